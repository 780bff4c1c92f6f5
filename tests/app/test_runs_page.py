"""The Runs page: against real fine-tunes (columns, sorting, filtering, checkpoints, delete), and on
canned engine records (variants and exports named by their parent, system jobs, the page's minimum size)."""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QMessageBox

from app.widgets.jobs_table import (
    BEST_COLUMN,
    CREATED_COLUMN,
    DURATION_COLUMN,
    METHOD_COLUMN,
    MODEL_COLUMN,
    NAME_COLUMN,
    STATE_COLUMN,
    STRATEGY_COLUMN,
    TASK_COLUMN,
)
from engine.api.job_terms import FINAL_STATES
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected

TINY = {"task": "text_classification", "method": {"kind": "lora"}, "batch_size": 8,
        "data": {"max_length": 32}, "max_steps": 4, "eval_every": 2}
RUN_TIMEOUT_MS = 240_000  # two tiny fine-tunes side by side on a 2-core machine


def start_two_runs(home) -> tuple[dict, dict]:
    """Two tiny LoRA fine-tunes that differ only in lora_r, started by another client."""
    variant = copy.deepcopy(TINY)
    variant["method"]["lora_r"] = 4
    with BlockingClient.connect(home, client="test-runs", timeout=30) as other:
        r8 = other.call("jobs.start", kind="train.finetune", spec=TINY, name="lora r8")
        r4 = other.call("jobs.start", kind="train.finetune", spec=variant, name="lora r4")
    return r8, r4


def cell(runs, job_id: str, column: int) -> str:
    row = runs.model.row_of(job_id)
    return runs.model.index(row, column).data() if row >= 0 else ""


def shown_names(runs) -> list[str]:
    return [runs.proxy.index(row, NAME_COLUMN).data() for row in range(runs.proxy.rowCount())]


def click_header(qtbot, runs, column: int) -> None:
    head = runs.table.horizontalHeader()
    x = head.sectionViewportPosition(column) + head.sectionSize(column) // 2
    qtbot.mouseClick(head.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, head.height() // 2))


# Real runs on two shared cores: minutes, not the default two, when the machine is busy.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_runs_table_sort_filter_checkpoints_and_delete(qtbot, make_window, gui_home, monkeypatch):
    window = make_window(page="runs")
    wait_connected(qtbot, window)
    runs = window.page("runs")
    r8, r4 = start_two_runs(gui_home)
    qtbot.waitUntil(lambda: cell(runs, r8["id"], STATE_COLUMN) in FINAL_STATES
                    and cell(runs, r4["id"], STATE_COLUMN) in FINAL_STATES, timeout=RUN_TIMEOUT_MS)
    # The final record (with its summary) follows the state change.
    qtbot.waitUntil(lambda: cell(runs, r4["id"], BEST_COLUMN) != "—", timeout=20_000)

    for job in (r8, r4):
        assert cell(runs, job["id"], STATE_COLUMN) == "succeeded"
        assert cell(runs, job["id"], TASK_COLUMN) == "text_classification"
        assert cell(runs, job["id"], MODEL_COLUMN) == "minilm"
        assert cell(runs, job["id"], METHOD_COLUMN) == "lora"
        assert cell(runs, job["id"], STRATEGY_COLUMN) == "single"
        assert re.fullmatch(r"accuracy [\d.]+ @ step [24]", cell(runs, job["id"], BEST_COLUMN))
        assert cell(runs, job["id"], DURATION_COLUMN).endswith(("s", "min"))
        assert re.fullmatch(r"\d\d:\d\d:\d\d", cell(runs, job["id"], CREATED_COLUMN))
    assert cell(runs, r4["id"], NAME_COLUMN) == "lora r4"

    # Sorting by clicking a header: by name, then the other way.
    click_header(qtbot, runs, NAME_COLUMN)
    first = shown_names(runs)
    click_header(qtbot, runs, NAME_COLUMN)
    assert shown_names(runs) == list(reversed(first))
    assert sorted(first) in (first, list(reversed(first)))
    # Durations sort by their seconds, not their text.
    runs.table.sortByColumn(DURATION_COLUMN, Qt.SortOrder.AscendingOrder)
    seconds = [runs.proxy.index(r, DURATION_COLUMN).data(runs.proxy.sortRole())
               for r in range(runs.proxy.rowCount())]
    assert seconds == sorted(seconds)

    # Filters narrow the rows and clearing them brings the rows back.
    runs.filter_edit.setText("r4")
    assert shown_names(runs) == ["lora r4"]
    runs.filter_edit.setText("minilm lora")
    assert sorted(shown_names(runs)) == ["lora r4", "lora r8"]
    runs.filter_edit.clear()
    runs.state_combo.setCurrentText("Failed")
    assert shown_names(runs) == []
    runs.state_combo.setCurrentText("Succeeded")
    assert sorted(shown_names(runs)) == ["lora r4", "lora r8"]
    runs.state_combo.setCurrentText("All states")

    # Two fine-tunes selected: Compare is on; one selected: Duplicate and Delete are.
    runs.table.selectAll()
    assert runs.compare_button.isEnabled()
    assert runs.select_run(r8["id"])
    assert not runs.compare_button.isEnabled() and runs.duplicate_button.isEnabled()

    # The details: overview facts, the spec, and the run's checkpoints.
    details = runs.details
    assert details.job_id == r8["id"]
    qtbot.waitUntil(lambda: details.checkpoints.rowCount() >= 1, timeout=20_000)
    steps = [details.checkpoints.item(r, 0).text() for r in range(details.checkpoints.rowCount())]
    assert "4" in steps
    latest = [details.checkpoints.item(r, 3).text() for r in range(details.checkpoints.rowCount())]
    assert latest[steps.index("4")] == "latest"
    assert details.fact("Best metric").startswith("accuracy ")
    qtbot.waitUntil(lambda: details.fact("Final metrics").startswith("accuracy"),
                    timeout=20_000)
    assert "measured" in details.fact("Peak memory")
    assert "lora_r: 8" in details.spec_view.toPlainText()

    # Delete, with the confirmation answered Yes: the row and the run's folder are gone.
    asked: list[str] = []

    def answer_yes(_parent, _title, text, *_args, **_kwargs):
        asked.append(text)
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", answer_yes)
    run_dir = Path(r4["run_dir"])
    assert run_dir.is_dir()
    runs.select_run(r4["id"])
    assert runs.delete_button.isEnabled()
    qtbot.mouseClick(runs.delete_button, Qt.MouseButton.LeftButton)
    assert len(asked) == 1 and "lora r4" in asked[0] and "checkpoints" in asked[0]
    qtbot.waitUntil(lambda: runs.model.row_of(r4["id"]) < 0, timeout=20_000)
    assert not run_dir.exists()
    assert runs.model.row_of(r8["id"]) >= 0 and Path(r8["run_dir"]).is_dir()
    assert not runs.message.isVisible()


# -- canned records, shaped as jobs.list returns them (engine/daemon/job_records.py record()) ---------

def child_record(run_id: str, kind: str, name: str, spec: dict, parent: str, offset: float) -> dict:
    """A finished compress or export job: the engine validates its spec, and its summary says nothing."""
    from engine.api.specs import validate_spec

    now = time.time()
    return {"id": run_id, "kind": kind, "name": name, "state": "succeeded", "created_at": now - offset,
            "started_at": now - offset + 1, "ended_at": now - offset + 30, "pid": None, "exit_code": 0,
            "error": None, "run_dir": f"/tmp/ember/runs/{run_id}",
            "spec": validate_spec(kind, {"source_run": parent, **spec}).model_dump(mode="json"),
            "parent_id": parent, "host": None,
            "summary": {"task": None, "model": None, "method": None, "strategy": None, "nproc": None,
                        "nodes": [], "best": None, "estimated_peak": None, "measured_peak": None}}


def canned_jobs() -> list[dict]:
    from tests.app.test_compress_wizard import finetune_record

    parent = finetune_record("r20261201-1932-aaaaaa", "text-lora-1201-1932",
                             {"task": "text_classification", "method": {"kind": "lora"}}, 0.91, "minilm")
    int8 = child_record("r20261201-1940-bbbbbb", "compress.quantize", "text-lora-1201-1932-int8-dynamic",
                        {"mode": "dynamic"}, parent["id"], 300)
    export = child_record("r20261201-1950-cccccc", "export.model", "text-lora-1201-1932-int8-dynamic-export",
                          {"formats": ["onnx"]}, int8["id"], 200)
    pruned = child_record("r20261201-1955-dddddd", "compress.prune", "text-lora-1201-1932-pruned-30pct",
                          {"ratio": 0.3}, parent["id"], 150)
    mine = child_record("r20261201-1958-eeeeee", "export.model", "production bundle", {"formats": ["onnx"]},
                        parent["id"], 120)
    probe = {"id": "r20261201-2000-ffffff", "kind": "system.probe", "name": "system.probe", "state": "succeeded",
             "created_at": time.time() - 60, "started_at": time.time() - 59, "ended_at": time.time() - 50,
             "pid": None, "exit_code": 0, "error": None, "run_dir": "/tmp/ember/runs/probe", "spec": {},
             "parent_id": None, "host": None, "summary": {"task": None, "model": None, "best": None}}
    return [probe, mine, pruned, export, int8, parent]


QUEUE = {"jobs": [], "running": [],
         "resources": {"local": {"cpu_limit": 16, "used": {"cores": 2}, "gpus": 2, "free": {"gpus": [1]}}},
         "settings": {"max_concurrent": 2, "cpu_cores": 0, "allow_gpu_sharing": False}}


@pytest.fixture
def canned_runs(qtbot):
    from app.pages.runs import RunsPage
    from tests.app.test_compress_wizard import fake_engine, settle

    jobs = canned_jobs()
    engine = fake_engine({"jobs.list": {"jobs": copy.deepcopy(jobs)}, "queue.get": QUEUE,
                          "jobs.get": lambda p: next(copy.deepcopy(j) for j in jobs if j["id"] == p["id"]),
                          "jobs.logs": {"lines": []}})
    page = RunsPage(engine)
    qtbot.addWidget(page)
    page.resize(828, 620)
    page.show()
    settle(qtbot, engine.client)
    yield page, engine, jobs
    settle(qtbot, engine.client)


def test_variants_and_exports_are_named_by_their_parent_with_its_columns(canned_runs):
    page, _engine, jobs = canned_runs
    probe, mine, pruned, export, int8, parent = jobs
    assert cell(page, int8["id"], NAME_COLUMN) == "int8 of text-lora-1201-1932"
    assert cell(page, export["id"], NAME_COLUMN) == "export of int8 of text-lora-1201-1932"
    assert cell(page, pruned["id"], NAME_COLUMN) == "pruned 30% of text-lora-1201-1932"
    assert cell(page, mine["id"], NAME_COLUMN) == "production bundle"  # a name given by hand stays
    for job in (int8, export, pruned, mine):
        assert (cell(page, job["id"], TASK_COLUMN), cell(page, job["id"], MODEL_COLUMN),
                cell(page, job["id"], METHOD_COLUMN)) == ("text_classification", "minilm", "lora")
    # The job's own name is one hover away, and the filter finds the words shown.
    row = page.model.row_of(int8["id"])
    assert "text-lora-1201-1932-int8-dynamic" in page.model.index(row, NAME_COLUMN).data(Qt.ItemDataRole.ToolTipRole)
    page.filter_edit.setText("export of")
    assert shown_names(page) == ["export of int8 of text-lora-1201-1932"]
    page.filter_edit.clear()
    # The details name it the same way and say what it was made from.
    assert page.select_run(export["id"])
    assert page.details.title.text().startswith("export of int8 of text-lora-1201-1932")
    assert page.details.fact("Made from") == "int8 of text-lora-1201-1932"
    assert page.details.fact("Model") == "minilm"


def test_system_jobs_are_hidden_unless_asked_for(canned_runs, qtbot):
    page, engine, jobs = canned_runs
    probe = jobs[0]
    shown = [page._job_at(page.proxy.index(r, 0))["id"] for r in range(page.proxy.rowCount())]
    assert probe["id"] not in shown and len(shown) == len(jobs) - 1
    page.system_check.setChecked(True)
    assert page.proxy.rowCount() == len(jobs)
    page.system_check.setChecked(False)
    # A new probe started while the page is open stays out of the list too.
    engine.client.publish("jobs", {**probe, "id": "r20261201-2001-gggggg", "state": "running"})
    assert page.proxy.rowCount() == len(jobs) - 1
    # Opening a system job by id (from elsewhere) shows it, turning the toggle on.
    assert page.select_run(probe["id"]) and page.system_check.isChecked()


def test_only_system_jobs_show_the_empty_state(qtbot):
    from app.pages.runs import RunsPage
    from tests.app.test_compress_wizard import fake_engine, settle

    probe = canned_jobs()[0]
    engine = fake_engine({"jobs.list": {"jobs": [probe]}, "queue.get": QUEUE, "jobs.get": probe,
                          "jobs.logs": {"lines": []}})
    page = RunsPage(engine)
    qtbot.addWidget(page)
    page.show()
    settle(qtbot, engine.client)
    assert page.list_stack.currentWidget() is page.empty
    page.system_check.setChecked(True)
    assert page.list_stack.currentWidget() is page.table


@pytest.mark.parametrize("queued", [0, 6])
def test_runs_page_lays_out_in_a_1024_by_700_window(qtbot, queued):
    """The page area of a 1024 x 700 window (the sidebar takes 196 px, the status bar and banner some
    height): long names, a long queue, and still no minimum size beyond it."""
    from app.pages.runs import RunsPage
    from tests.app.test_compress_wizard import fake_engine, settle

    jobs = canned_jobs()
    queue = {**QUEUE, "jobs": [{"id": f"r-wait-{i}", "name": f"waiting job {i}", "kind": "train.finetune",
                                "priority": 0, "reason": "waiting for 4 CPU cores"} for i in range(queued)]}
    engine = fake_engine({"jobs.list": {"jobs": jobs}, "queue.get": queue, "jobs.get": jobs[-1],
                          "jobs.logs": {"lines": []}})
    page = RunsPage(engine)
    qtbot.addWidget(page)
    page.resize(828, 600)
    page.show()
    settle(qtbot, engine.client)
    qtbot.wait(50)  # the layout settles (the action buttons wrap onto two rows at this width)
    hint = page.minimumSizeHint()
    assert hint.width() <= 828 and hint.height() <= 600, hint
    assert top(page, page.stop_button) > top(page, page.open_button)  # wrapped, not widening the page
    assert page.queue_panel.height() >= 90 and page.details.height() >= 150
    page.resize(1400, 900)
    qtbot.wait(50)
    assert top(page, page.stop_button) == top(page, page.open_button)  # one row where there is room


def top(page, widget) -> int:
    return widget.mapTo(page, QPoint(0, 0)).y()
