"""The Data step's "From the Hugging Face Hub" source, offscreen, against the real engine and the Hub stand-in
(tests/hub_standin.py): a dataset id, Download with progress, the splits and the column picker filled
from data.inspect, and the spec it writes; a causal LM's renamed columns mapped."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from engine.api.train_spec import TrainSpec
from tests.app.conftest import wait_connected
from tests.engine.test_hub_datasets import QA, QA_CARD, REVIEWS, _parquet, qa_csv, review_rows
from tests.hub_standin import HubStandin, point_huggingface_hub_at


@pytest.fixture
def hub(tmp_path, monkeypatch):
    standin = HubStandin()
    standin.add_dataset(REVIEWS, {"README.md": b"# Tiny reviews\n",
                                  "data/train-00000-of-00001.parquet": _parquet(review_rows(40)),
                                  "data/validation-00000-of-00001.parquet": _parquet(review_rows(10, 40))})
    standin.add_dataset(QA, {"README.md": QA_CARD, "qa.csv": qa_csv()})
    standin.start()
    point_huggingface_hub_at(standin, tmp_path / "hf-home", monkeypatch)
    yield standin
    standin.stop()


def test_hub_dataset_download_splits_columns_and_spec(qtbot, make_window, hub):
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    page = window.page("new_finetune")
    data = page.data_step
    box = data.hub_box
    assert not data.hub_radio.isHidden()
    data.hub_radio.setChecked(True)
    assert box.isEnabled() and not data.custom_box.isEnabled()
    assert "Data: type the Hub dataset's id" in data.blocking()

    # Not downloaded yet: data.inspect says so, and nothing blocks (the fine-tune would download it).
    qtbot.keyClicks(box.picker.id_edit, REVIEWS)
    qtbot.waitUntil(lambda: "not downloaded yet" in box.note.text(), timeout=30_000)
    assert box.picker.download_button.isEnabled()

    hub.throttle_bps = 400_000  # slow enough to see the bar move
    qtbot.mouseClick(box.picker.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: box.picker.progress_text.text().startswith("Downloaded"), timeout=60_000)
    assert box.picker.progress.value() == 1000
    assert any(r["path"].startswith(f"/datasets/{REVIEWS}/resolve/") for r in hub.requests)

    # Downloaded: looked at again, the splits in the drop-downs, the columns in the picker with a guess.
    qtbot.waitUntil(lambda: box.note.text().startswith("Downloaded"), timeout=30_000)
    assert [box.split_combo.itemText(i) for i in range(box.split_combo.count())] == ["train", "validation"]
    assert box.val_combo.itemText(2) == "validation" and "Validation: validation." in box.note.text()
    qtbot.waitUntil(lambda: data.text_column_edit.text() == "sentence" and not data.busy(), timeout=30_000)
    assert [data.text_column_edit.itemText(i) for i in range(data.text_column_edit.count())] == ["sentence", "label"]
    assert "sentence" in data.columns_note.text()
    qtbot.waitUntil(lambda: data.preview.table.rowCount() == 12 and data._issues == [], timeout=30_000)
    assert data.preview.table.item(0, 1).text() == "I loved this film (0)"
    assert "40" in data.preview.sizes.text() and "10" in data.preview.sizes.text()
    spec = page.spec_for_launch()
    assert spec["data"] == {"hub": REVIEWS, "text_column": "sentence"}
    assert TrainSpec.model_validate(spec).data.hub == REVIEWS
    assert data.blocking() == []

    # A job file's Hub dataset comes back into the form; another source leaves its fields out.
    page.load_spec({"task": "text_classification", "data": {"hub": REVIEWS, "revision": "main", "split": "train",
                                                            "val_split": "validation", "text_column": "sentence"}})
    assert data.hub_radio.isChecked() and box.picker.revision() == "main" and box.val_split() == "validation"
    data.builtin_radio.setChecked(True)
    assert not {"hub", "revision", "val_split"} & set(page.spec_for_launch().get("data", {}))


def test_causal_lm_hub_dataset_maps_renamed_columns(qtbot, make_window, hub):
    from engine.tasks import causal_lm, hub_models

    hub_models.download(QA, None, repo_type="dataset")  # already in the cache: no Download needed
    causal_lm.ensure_tiny_llama()  # prepared, as the wizard's model checks would have it
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    page = window.page("new_finetune")
    page.task_step.task_radios["causal_lm"].setChecked(True)
    page.apply_patch({"model": {"builtin": "tiny-llama"}})
    data = page.data_step
    data.hub_radio.setChecked(True)
    assert not data.chat_column_edits["prompt"].isHidden()
    qtbot.keyClicks(data.hub_box.picker.id_edit, QA)
    # The dataset's question/answer columns are offered and chosen for prompt and response.
    qtbot.waitUntil(lambda: data.chat_column_edits["prompt"].text() == "question", timeout=30_000)
    assert data.chat_column_edits["response"].text() == "answer"
    qtbot.waitUntil(lambda: not data.busy() and data._issues == [] and data.preview.table.rowCount() == 12,
                    timeout=30_000)
    spec = page.spec_for_launch()
    assert spec["data"]["hub"] == QA and spec["data"]["columns"] == {"prompt": "question", "response": "answer"}
    assert data.template_box.learned == ["0</s>"]  # the first row rendered, its answer learned
    page.task_step.task_radios["image_classification"].setChecked(True)
    assert data.hub_radio.isHidden() and data.builtin_radio.isChecked()
