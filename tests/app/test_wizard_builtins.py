"""The wizard's built-in models and datasets: SmolLM2 and short-answers by default for a causal LM, the
tiny test model and data when a job file names them, and nothing lost on a round trip."""

from __future__ import annotations


def test_causal_lm_defaults_to_smollm2_and_a_loaded_choice_survives(qtbot, make_window):
    window = make_window(page="new_finetune", start=False)
    page = window.page("new_finetune")
    page.task_step.task_radios["causal_lm"].setChecked(True)
    model, data = page.model_step, page.data_step
    assert not model.builtin_combo.isHidden() and not data.builtin_combo.isHidden()
    spec = page.spec_for_launch()
    assert (spec["model"]["builtin"], spec["data"]["builtin"]) == ("smollm2-135m-instruct", "short-answers")
    assert "SmolLM2-135M-Instruct" in model.builtin_note.text()

    page.load_spec({"task": "causal_lm", "model": {"builtin": "tiny-llama"}, "data": {"builtin": "tiny-instructions"}},
                   "tiny")
    assert (model.builtin_combo.currentText(), data.builtin_combo.currentText()) == ("tiny-llama", "tiny-instructions")
    spec = page.spec_for_launch()
    assert (spec["model"]["builtin"], spec["data"]["builtin"]) == ("tiny-llama", "tiny-instructions")
    assert "tiny test model" in data.builtin_note.text()

    model.builtin_combo.setCurrentText("smollm2-135m-instruct")
    assert page.spec_for_launch()["model"]["builtin"] == "smollm2-135m-instruct"
    page.task_step.task_radios["text_classification"].setChecked(True)
    assert model.builtin_combo.isHidden() and model.builtin_radio.text() == "Built-in: minilm"
    assert page.spec_for_launch()["model"]["builtin"] == "minilm"
