"""Compare's Evaluations tab with a real engine: Evaluate… on a tiny-Llama LoRA run scores it and, since it has
no result yet, its base model, on the run's validation data and a local lm-eval task; both rows fill in."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication

from engine.api.job_terms import EVALUATE
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TASKS_DIR = ROOT / "tests" / "data" / "lm_eval_tasks"
JOB_TIMEOUT_MS = 300_000  # two evaluations at once on two busy cores


def test_evaluate_scores_the_run_and_its_missing_base_model_side_by_side(qtbot, make_window, gui_home,
                                                                         trained_runs):
    run = trained_runs.seed(gui_home.home, "llm")["llm"]
    window = make_window(page="compare")
    wait_connected(qtbot, window)
    compare = window.page("compare")
    compare.show_evaluations(run)
    view = compare.evaluations
    assert compare.tabs.currentWidget() is view
    qtbot.waitUntil(lambda: [r.role for r in view.rows()] == ["base", "run"], timeout=20_000)
    assert [r.model for r in view.rows()] == [{"builtin": "tiny-llama"}, {"run": run}]
    assert all(v is None for r in view.rows() for v in r.cells.values())  # nothing scored yet
    assert view.selected_row().role == "run" and view.evaluate_button.isEnabled()

    def fill_and_start() -> None:
        dialog = QApplication.activeModalWidget()
        assert dialog.base_check.isChecked()  # the base model has no result on this data
        dialog.set_values(limit=3, tasks="ember_pick_word", include_path=str(TASKS_DIR), docs=2)
        dialog.tokens_spin.setValue(4)
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)

    QTimer.singleShot(300, fill_and_start)
    qtbot.mouseClick(view.evaluate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(view.started) == 2, timeout=20_000)
    by_model = {next(v for v in job["spec"]["model"].values() if v): job for job in view.started}
    tuned, base = by_model[run], by_model["tiny-llama"]
    assert tuned["parent_id"] == run and base["parent_id"] is None
    assert base["spec"]["validation_of"] == run and base["spec"]["lm_eval"] == tuned["spec"]["lm_eval"]
    lm_eval = tuned["spec"]["lm_eval"]
    assert (lm_eval["tasks"], lm_eval["include_path"], lm_eval["limit"]) == (["ember_pick_word"], str(TASKS_DIR), 2)
    assert tuned["spec"]["limit"] == 3 and tuned["spec"]["max_new_tokens"] == 4 and base["name"] == "tiny-llama-eval"

    qtbot.waitUntil(lambda: all(r.cells.get("exact_match") is not None and not r.active for r in view.rows()),
                    timeout=JOB_TIMEOUT_MS)
    with BlockingClient.connect(gui_home, client="check", timeout=30) as check:
        results = {key: check.call("jobs.get", id=job["id"]) for key, job in (("base", base), ("run", tuned))}
    for job in results.values():
        assert job["state"] == "succeeded" and job["kind"] == EVALUATE
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    assert headers == ["Model", "Exact match", "Token F1", "ROUGE-L", "BLEU", "chrF", "ember_pick_word\nacc",
                       "ember_pick_word\nacc_norm"]
    assert view.data_combo.currentText() == "validation data of llm"
    for r, row in enumerate(view.rows()):
        result = results[row.role]["result"]
        shown = [view.table.item(r, c).text() for c in range(1, view.table.columnCount())]
        scores = [f"{result['generation']['metrics'][m]:.3f}" for m in ("exact_match", "token_f1", "rouge_l",
                                                                          "bleu", "chrf")]
        picks = {t["metric"]: t for t in result["lm_eval"]["tasks"]}
        assert shown[:5] == scores
        assert shown[5].startswith(f"{picks['acc']['value']:.3f}") and picks["acc"]["docs"] == 2
        assert result["generation"]["rows"] == 3
    assert view.table.item(0, 0).text() == "tiny-llama (base model)" and view.table.item(1, 0).text() == "llm (fine-tune)"
