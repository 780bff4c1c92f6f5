"""The Data step's chat template card, offscreen: the drop-down writes data.chat_template, a model without a
template gets the note, and the rendered row from data.inspect shows the learned part highlighted."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

from app.pages.new_finetune.chat_template_box import NO_TEMPLATE_NOTE
from app.state.style import colour
from engine.api.train_spec import TrainSpec


def _pick(combo, key):
    combo.setCurrentIndex(combo.findData(key))


def _background_at(view, index: int) -> str:
    cursor = QTextCursor(view.document())
    cursor.setPosition(index + 1)  # the format of the character before the cursor
    return cursor.charFormat().background().color().name()


def test_template_choice_note_and_highlighted_example(qtbot, make_window, tmp_path):
    from engine.preflight.data import inspect_data
    from engine.tasks import causal_lm as lm

    window = make_window(page="new_finetune", start=False)
    page = window.page("new_finetune")
    data = page.data_step
    box = data.template_box
    assert box.isHidden()  # text classification has no chat template
    page.task_step.task_radios["causal_lm"].setChecked(True)
    assert not box.isHidden()
    assert page.current_spec()["data"]["chat_template"] == "auto"
    assert "chat_template" not in page.spec_for_launch().get("data", {})  # the default stays out of job files
    _pick(box.combo, "chatml")
    assert page.spec_for_launch()["data"]["chat_template"] == "chatml"
    assert TrainSpec.model_validate(page.spec_for_launch()).data.chat_template == "chatml"
    _pick(box.combo, "auto")

    # What data.inspect answers for a model without a template of its own.
    bare = lm.make_tiny_model_folder(tmp_path / "bare", chat_template=False)
    reply = inspect_data(TrainSpec(task="causal_lm", model={"path": str(bare)}, data={"builtin": "tiny-instructions"}))
    data._on_inspect(reply)
    assert box.note.text() == NO_TEMPLATE_NOTE and not box.note.isHidden()
    text = box.view.toPlainText()
    first = lm.read_rows(lm.DATA_DIR / "train.jsonl")[0][0][1]
    answer = first[-1]["content"] + "</s>"
    assert text.startswith("<s>### User:\n") and text.endswith(answer)
    assert box.learned == [answer]
    start = text.index(answer)
    assert _background_at(box.view, start) == colour("accent-soft")
    assert _background_at(box.view, 0) != colour("accent-soft")  # the prompt is not learned
    assert "Line 1" in box.example_title.text() and "plain" in box.example_title.text()
    assert box.view.isReadOnly()

    # ChatML chosen for the same model: its rendering, and the note says what is used.
    _pick(box.combo, "chatml")
    reply = inspect_data(TrainSpec(task="causal_lm", model={"path": str(bare)},
                                   data={"builtin": "tiny-instructions", "chat_template": "chatml"}))
    data._on_inspect(reply)
    assert box.view.toPlainText().startswith("<|im_start|>user\n")
    assert box.learned == [first[-1]["content"] + "<|im_end|>\n"]
    assert "no chat template; ChatML is used" in box.note.text()

    # A Hub model not downloaded yet: no example, and the box says when it comes.
    data._on_inspect({"issues": [], "rows": [], "model_chat_template": None, "rendered_example": None})
    assert box.view.toPlainText() == "" and "once the model is here" in box.example_title.text()

    # A job file's choice comes back into the drop-down; another task leaves it out of the spec.
    page.load_spec({"task": "causal_lm", "data": {"builtin": "short-answers", "chat_template": "llama3"}})
    assert data.template_box.value() == "llama3"
    assert page.spec_for_launch()["data"]["chat_template"] == "llama3"
    page.task_step.task_radios["text_classification"].setChecked(True)
    assert box.isHidden() and "chat_template" not in page.spec_for_launch().get("data", {})
    assert TrainSpec.model_validate(page.spec_for_launch()).data.chat_template == "auto"
