"""Preference tuning in the window: the wizard's Objective card writes the spec, the data follows
the objective, Review shows it, and the Monitor draws rewards only for runs that have them."""

from __future__ import annotations

import yaml

from app.pages.monitor.run_charts import RunCharts
from engine.api.train_spec import TrainSpec


def _pick(combo, key):
    combo.setCurrentIndex(combo.findData(key))


def _shown(box, row):
    return box.row_visible(row)


def test_objective_choice_gives_the_preference_spec_and_its_builtin_data(qtbot, make_window):
    window = make_window(page="new_finetune", start=False)
    page = window.page("new_finetune")
    task, data = page.task_step, page.data_step
    box = task.objective_box
    assert box.isHidden()  # text classification: no objective to choose
    task.task_radios["causal_lm"].setChecked(True)
    assert box.isVisible()
    assert page.spec_for_launch().get("objective", "sft") == "sft"
    assert (data.builtin_radio.text(), data.builtin_combo.currentText()) == ("Built-in", "short-answers")
    assert page.spec_for_launch()["model"]["builtin"] == "smollm2-135m-instruct"

    _pick(box.objective_combo, "dpo")
    box.beta_spin.setValue(0.25)
    _pick(box.loss_combo, "ipo")
    spec = page.spec_for_launch()
    assert spec["objective"] == "dpo"
    assert spec["preference"] == {"beta": 0.25, "loss_type": "ipo"}
    assert _shown(box, "loss") and not _shown(box, "desirable")
    assert spec["data"]["builtin"] == "tiny-preferences"
    assert data.builtin_radio.text() == "Built-in: tiny-preferences"
    assert "chosen" in data.path_help.text()
    assert page.errors == {}
    checked = TrainSpec.model_validate(spec)
    assert (checked.objective, checked.preference.beta, checked.data_name()) == ("dpo", 0.25, "tiny-preferences")
    review = yaml.safe_load(page.review_step.yaml_view.toPlainText())["spec"]
    assert review["objective"] == "dpo" and review["preference"]["loss_type"] == "ipo"
    assert page.review_step.run_name().startswith("lm-dpo-lora-")

    # KTO: the loss type gives way to the two weights.
    _pick(box.objective_combo, "kto")
    assert not _shown(box, "loss") and _shown(box, "desirable") and _shown(box, "undesirable")
    box.undesirable_spin.setValue(1.5)
    spec = page.spec_for_launch()
    assert spec["objective"] == "kto" and spec["preference"]["undesirable_weight"] == 1.5
    page.apply_patch({"batch_size": 1})  # KTO's KL baseline needs two rows a batch: said next to the choice
    assert any("batch_size 2" in m for m in page.errors.get("objective", []))
    assert box.isVisible() and task.field_messages["objective"].text()
    page.apply_patch({"batch_size": 8})

    # Another task: the objective goes back to sft and the card hides.
    task.task_radios["text_classification"].setChecked(True)
    assert box.isHidden()
    spec = page.spec_for_launch()
    assert spec.get("objective", "sft") == "sft" and spec["data"]["builtin"] == "support-tickets"


def test_a_loaded_preference_spec_fills_the_objective_card(qtbot, make_window):
    window = make_window(page="new_finetune", start=False)
    page = window.page("new_finetune")
    page.load_spec({"task": "causal_lm", "objective": "orpo", "preference": {"beta": 0.5},
                    "method": {"kind": "full"}})
    box = page.task_step.objective_box
    assert box.objective() == "orpo" and box.beta_spin.value() == 0.5
    assert _shown(box, "beta") and not _shown(box, "loss") and not _shown(box, "desirable")
    assert page.data_step.builtin_radio.text() == "Built-in: tiny-preferences"
    spec = page.spec_for_launch()
    assert spec["objective"] == "orpo" and spec["preference"]["beta"] == 0.5


def test_monitor_draws_rewards_only_for_runs_that_report_them(qtbot):
    charts = RunCharts()
    qtbot.addWidget(charts)
    charts.show()
    charts.add_event("train", {"step": 1, "loss": 2.0, "lr": 0.001})
    assert charts.reward_chart.isHidden()
    for step, margin in ((1, 0.1), (2, 0.4)):
        charts.add_event("train", {"step": step, "loss": 0.6, "reward_chosen": margin / 2,
                                   "reward_rejected": -margin / 2, "reward_margin": margin,
                                   "reward_accuracy": 0.75})
    assert charts.reward_chart.isVisible()
    assert charts.reward_chart.series_names() == ["chosen", "rejected", "margin", "accuracy %"]
    assert charts.reward_chart.series("margin").last_y() == 0.4
    assert charts.reward_chart.series("accuracy %").last_y() == 75.0
    charts.clear()
    assert charts.reward_chart.isHidden()
