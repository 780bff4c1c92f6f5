"""Compare two real fine-tunes: curves overlaid per run, specs diffed, picker and summary."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.widgets.jobs_table import STATE_COLUMN
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected
from tests.app.test_runs_page import FINAL_STATES, RUN_TIMEOUT_MS, cell, start_two_runs

# Real runs on two shared cores: minutes, not the default two, when the machine is busy.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_compare_overlays_two_runs_and_diffs_their_specs(qtbot, make_window, gui_home):
    window = make_window(page="runs")
    wait_connected(qtbot, window)
    runs = window.page("runs")
    r8, r4 = start_two_runs(gui_home)
    qtbot.waitUntil(lambda: cell(runs, r8["id"], STATE_COLUMN) in FINAL_STATES
                    and cell(runs, r4["id"], STATE_COLUMN) in FINAL_STATES, timeout=RUN_TIMEOUT_MS)
    with BlockingClient.connect(gui_home, client="check", timeout=30) as check:
        metrics = {job["id"]: check.call("jobs.metrics", id=job["id"])["metrics"] for job in (r8, r4)}

    # From the Runs page: select both and press Compare.
    runs.table.selectAll()
    qtbot.mouseClick(runs.compare_button, Qt.MouseButton.LeftButton)
    compare = window.page("compare")
    assert window.stack.currentWidget() is compare
    assert sorted(compare.job_ids()) == sorted([r8["id"], r4["id"]])

    def points(job_id: str, kind: str, name: str) -> int:
        return sum(1 for m in metrics[job_id] if m["kind"] == kind and m["name"] == name)

    expected = {"train_loss": ("train", "loss"), "eval_loss": ("eval", "loss"),
                "metric": ("eval", "accuracy")}

    def drawn() -> bool:
        return all(compare.charts[key].point_counts() == [points(i, *what) for i in compare.job_ids()]
                   for key, what in expected.items())

    qtbot.waitUntil(drawn, timeout=20_000)
    for key in expected:
        chart = compare.charts[key]
        assert chart.series_count() == 2
        assert sorted(chart.series_names()) == ["lora r4", "lora r8"]
    assert compare.charts["train_loss"].point_counts() == [4, 4]
    assert compare.charts["eval_loss"].point_counts() == [2, 2]  # eval at steps 2 and 4
    assert compare.charts["metric"].title.text() == "Eval accuracy"

    # The specs side by side: lora_r differs and is highlighted, the task does not.
    diff = compare.spec_diff
    qtbot.waitUntil(lambda: "method.lora_r" in diff.keys(), timeout=10_000)
    assert diff.is_highlighted("method.lora_r")
    assert not diff.is_highlighted("task")
    assert diff.differing_keys() == ["method.lora_r"]
    diff.only_differences.setChecked(True)
    visible = [k for row, k in enumerate(diff.keys()) if not diff.table.isRowHidden(row)]
    assert visible == ["method.lora_r"]

    # A summary row per run with its best metric.
    table = compare.summary_table
    assert table.rowCount() == 2
    assert all(table.item(row, 2).text().startswith("accuracy ") for row in range(2))

    # The picker lists both finished runs, ticked; unticking one leaves one series.
    qtbot.waitUntil(lambda: compare.picker.count() == 2, timeout=10_000)
    items = {compare.picker.item(i).data(Qt.ItemDataRole.UserRole): compare.picker.item(i)
             for i in range(compare.picker.count())}
    assert all(item.checkState() == Qt.CheckState.Checked for item in items.values())
    items[r4["id"]].setCheckState(Qt.CheckState.Unchecked)
    assert compare.job_ids() == [r8["id"]]
    assert compare.charts["train_loss"].series_count() == 1
