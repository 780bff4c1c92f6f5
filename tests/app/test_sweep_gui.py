"""Sweeps in the GUI: Review's sweep card (what it launches, what it refuses) and Compare › Sweeps (the
trials as parallel coordinates and a scatter, the best marked, a trial opening its run)."""

from __future__ import annotations

import pytest
import yaml

from app.models.spec_tools import launch_spec
from app.pages.compare.sweep_view import axis_position
from app.pages.new_finetune.sweep_box import parse_values
from tests.app.conftest import wait_connected

pytestmark = [pytest.mark.timeout(240)]


def test_values_and_axes():
    assert parse_values("optim.lr", "0.001, 0.003") == {"path": "optim.lr", "values": [0.001, 0.003]}
    assert parse_values("method.kind", "lora, full") == {"path": "method.kind", "values": ["lora", "full"]}
    assert parse_values("method.lora_r", "2 .. 32 int") == {"path": "method.lora_r", "low": 2.0, "high": 32.0,
                                                            "log": False, "integer": True}
    with pytest.raises(ValueError, match="only 'log' and 'int' may follow, not lg"):
        parse_values("optim.lr", "1e-5 .. 1e-2 lg")
    # A span of more than a decade is placed on a log axis; words by their order.
    assert axis_position([1e-4, 1e-3, 1e-2], 1e-3) == pytest.approx(0.5)
    assert axis_position([4, 8, 12], 8) == pytest.approx(0.5)
    assert axis_position(["full", "lora", "qlora"], "lora") == 0.5


TRIALS = [
    {"number": 0, "settings": {"optim.lr": 0.003, "method.lora_r": 4}, "run_id": "r-0", "state": "done", "value": 0.41},
    {"number": 1, "settings": {"optim.lr": 0.001, "method.lora_r": 8}, "run_id": "r-1", "state": "done", "value": 0.52},
    {"number": 2, "settings": {"optim.lr": 1e-06, "method.lora_r": 8}, "run_id": "r-2", "state": "pruned",
     "value": 1.09},
    {"number": 3, "settings": {"optim.lr": 0.003, "method.lora_r": 8}, "run_id": "r-3", "state": "running",
     "value": None},
]


def test_review_launches_a_sweep_and_compare_draws_it(qtbot, make_window):
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    page = window.page("new_finetune")
    review = page.review_step
    box = review.sweep_box
    page.go_to(5)
    assert not box.body.isVisible()
    box.enable_check.setChecked(True)
    assert box.body.isVisible()
    box.add_row("method.lora_r", "4, 8")
    spec = page.current_spec()
    params = review.launch_params(launch_spec(spec))
    assert params["kind"] == "train.sweep" and params["spec"]["trials"] == 6  # 3 learning rates x 2 ranks
    assert params["spec"]["params"][1] == {"path": "method.lora_r", "values": [4, 8]}
    shown = yaml.safe_load(review.yaml_view.toPlainText())
    assert shown["kind"] == "train.sweep" and shown["spec"]["base"] == params["spec"]["base"]
    assert box.note.text() == "6 trials varying optim.lr, method.lora_r, 2 at a time, the best by loss (lowest)."
    # A field the spec does not have blocks Launch, with the reason.
    box.add_row("optim.learning_rate", "0.1")
    page.current_spec()
    assert "Sweep: optim.learning_rate is not a field of the fine-tune spec" in page.blockers()
    assert not page.launch_button.isEnabled()
    box.table.setCurrentCell(2, 1)
    box._remove_row()
    box.enable_check.setChecked(False)
    assert yaml.safe_load(review.yaml_view.toPlainText())["kind"] == "train.finetune"

    compare = window.page("compare")
    view = compare.sweeps
    view.sweep_id = "s-1"
    view._got("s-1", {"id": "s-1", "spec": {"params": [{"path": "optim.lr"}, {"path": "method.lora_r"}],
                                            "metric": "loss", "mode": "min", "trials": 6},
                      "sweep": {"trials": TRIALS, "best": 0}})
    assert view.summary.text() == ("4 of 6 trials: 2 done, 1 pruned, 0 failed, 1 running. Best: trial #0, loss 0.41 "
                                   "(optim.lr=0.003, method.lora_r=4).")
    assert [view.table.item(r, 0).text() for r in range(4)] == ["★ 0", "1", "2", "3"]
    lines = [i for i in view.plot.listDataItems()]
    assert len(lines) == 3  # one per scored trial; the running one has no metric yet
    assert max(lines, key=lambda i: i.zValue()).yData[-1] == 0  # the best is the lowest loss
    view.view_combo.setCurrentIndex(view.view_combo.findData("scatter"))
    assert not view.field_combo.isHidden() and len(view.plot.listDataItems()) == 3
    assert view.plot.getAxis("bottom").labelText.startswith("optim.lr (log scale)")
    with qtbot.waitSignal(compare.nav.requested) as shown:
        view._open_trial(0, 0)
    assert shown.args == ["monitor", {"job_id": "r-0"}]
