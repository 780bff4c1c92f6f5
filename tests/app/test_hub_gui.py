"""The Models page and the New fine-tune Model step's Hub picker, offscreen, against the real engine and
the Hub stand-in on 127.0.0.1 (tests/hub_standin.py): search as you type, download with progress,
the cached list and Delete, the token saved without the page keeping it, search offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected
from tests.hub_standin import HubStandin, point_huggingface_hub_at

REPO = "acme/tiny-llama"
GATED = "acme/gated-llama"
SECRET = "hf_GuiTokenNotKept_1234567890"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from engine.tasks.causal_lm import make_tiny_model_folder

    return make_tiny_model_folder(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture
def hub(tiny_model, tmp_path, monkeypatch):
    standin = HubStandin()
    standin.add_folder(REPO, tiny_model, downloads=1234, license="apache-2.0")
    standin.add_folder(GATED, tiny_model, gated="manual", license="llama3.1")
    standin.start()
    point_huggingface_hub_at(standin, tmp_path / "hf-home", monkeypatch)
    yield standin
    standin.stop()


def cells(table, row: int) -> list[str]:
    return [table.item(row, c).text() for c in range(table.columnCount())]


def test_models_page_searches_downloads_lists_deletes_and_saves_the_token(qtbot, make_window, hub, gui_home):
    from huggingface_hub import constants

    window = make_window(page="models")
    wait_connected(qtbot, window)
    page = window.page("models")
    qtbot.waitUntil(lambda: "No model in the Hugging Face cache" in page.cache_note.text(), timeout=10_000)

    # The built-in models come first, with what they are, their state and what can be done with each.
    builtins = {cells(page.builtin_table, r)[0]: cells(page.builtin_table, r) for r in range(page.builtin_table.rowCount())}
    assert set(builtins) == {"minilm", "digits-cnn", "smollm2-135m-instruct", "tiny-llama"}
    assert builtins["minilm"][1:3] == ["text classifier", "ready"] and builtins["minilm"][3].endswith("MiB")
    assert builtins["smollm2-135m-instruct"][1] == "language model"
    smol = [m["name"] for m in page.builtins].index("smollm2-135m-instruct")
    page.builtin_table.selectRow(smol)
    assert page.chat_button.isEnabled() and page.finetune_button.isEnabled()
    page.builtin_table.selectRow([m["name"] for m in page.builtins].index("minilm"))
    assert page.finetune_button.isEnabled() and not page.chat_button.isEnabled()  # a classifier's head is untrained
    qtbot.mouseClick(page.finetune_button, Qt.MouseButton.LeftButton)
    wizard = window.page("new_finetune")
    assert window.stack.currentWidget() is wizard and wizard.spec_for_launch()["model"] == {"builtin": "minilm"}
    window.show_page("models")

    # A built-in language model, exported and served as it is, from here: the export job is shown on Runs, the
    # served endpoint in the Playground (its URL and figures).
    page.builtin_table.selectRow([m["name"] for m in page.builtins].index("tiny-llama"))
    assert page.export_button.isEnabled() and page.serve_button.isEnabled()
    assert [a.text() for a in page.export_button.menu().actions()][0].startswith("Merged checkpoint and GGUF")
    page.export_button.menu().actions()[2].trigger()  # ONNX for generation
    runs = window.page("runs")
    qtbot.waitUntil(lambda: window.stack.currentWidget() is runs
                    and (runs.selected_job() or {}).get("kind") == "export.model", timeout=30_000)
    with BlockingClient.connect(gui_home, client="test", timeout=30) as c:
        job = c.call("jobs.get", id=runs.selected_job()["id"])
        assert job["spec"]["model"]["builtin"] == "tiny-llama" and job["spec"]["formats"] == ["onnx_genai"]
        c.call("jobs.cancel", id=job["id"])
    window.show_page("models")
    qtbot.mouseClick(page.serve_button, Qt.MouseButton.LeftButton)
    playground = window.page("playground")
    qtbot.waitUntil(lambda: window.stack.currentWidget() is playground and bool(playground.serve_bar.url),
                    timeout=120_000)
    assert "Serving tiny-llama at http://127.0.0.1:" in playground.serve_bar.text.text()
    qtbot.mouseClick(playground.serve_bar.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not playground.serve_bar.serving, timeout=60_000)
    window.show_page("models")

    # Search as you type: one request after the typing stops, results with downloads, licence, gated.
    picker = page.picker
    qtbot.keyClicks(picker.id_edit, "llama")
    qtbot.waitUntil(lambda: picker.results.isVisible() and picker.results.rowCount() == 2, timeout=10_000)
    assert len([r for r in hub.requests if r["path"] == "/api/models"]) == 1  # debounced
    rows = {cells(picker.results, r)[0]: cells(picker.results, r) for r in range(2)}
    assert rows[REPO][1:] == ["1,234", "apache-2.0", "no"]
    assert rows[GATED][2:] == ["llama3.1", "yes (request access)"]

    # Pick one, download it: progress in bytes with speed and ETA, then the cached list shows it.
    row = [cells(picker.results, r)[0] for r in range(2)].index(REPO)
    qtbot.mouseClick(picker.results.viewport(), Qt.MouseButton.LeftButton,
                     pos=picker.results.visualItemRect(picker.results.item(row, 0)).center())
    assert picker.id_edit.text() == REPO and not picker.results.isVisible()
    hub.throttle_bps = 300_000  # slow enough to see it move
    qtbot.mouseClick(picker.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: " of " in picker.progress_text.text() and "/s" in picker.progress_text.text(),
                    timeout=30_000)
    assert picker.progress.isVisible() and not picker.download_button.isEnabled()
    qtbot.waitUntil(lambda: picker.progress_text.text().startswith("Downloaded"), timeout=60_000)
    assert picker.progress.value() == 1000
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=10_000)
    assert cells(page.table, 0)[0] == REPO and "(main)" in cells(page.table, 0)[3]

    # The token: typed into a password field, saved where huggingface_hub reads it, not kept.
    qtbot.mouseClick(page.token_button, Qt.MouseButton.LeftButton)
    dialog = page.token_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.setTextValue(SECRET)
    dialog.accept()
    qtbot.waitUntil(lambda: "A token is saved" in page.token_status.text(), timeout=10_000)
    assert Path(constants.HF_TOKEN_PATH).read_text() == SECRET and dialog.textValue() == ""
    assert SECRET not in page.token_status.text()

    # Delete asks first, then the list is empty again.
    page.table.selectRow(0)
    qtbot.mouseClick(page.delete_button, Qt.MouseButton.LeftButton)
    assert page.confirm_dialog is not None and REPO in page.confirm_dialog.text()
    page.confirm_dialog.accept()
    qtbot.waitUntil(lambda: page.table.rowCount() == 0, timeout=10_000)

    # Offline: search says so within seconds instead of hanging.
    hub.stop()
    picker.id_edit.clear()
    qtbot.keyClicks(picker.id_edit, "qwen")
    qtbot.waitUntil(lambda: "Search is unavailable" in picker.search_note.text(), timeout=15_000)


def test_model_step_takes_a_hub_id_with_revision(qtbot, make_window, hub):
    from app.pages.new_finetune.step_model import ModelStep
    from engine.api.specs import validate_spec

    window = make_window(page="runs")
    wait_connected(qtbot, window)
    step = ModelStep(window.engine.client)
    qtbot.addWidget(step)
    step.load({"task": "causal_lm", "model": {"hub": REPO, "revision": "main"}})
    assert step.hub_radio.isChecked() and step.hub_picker.repo_id() == REPO
    spec = {"task": "causal_lm"}
    step.write(spec)
    assert spec["model"]["hub"] == REPO and spec["model"]["revision"] == "main"
    assert validate_spec("train.finetune", spec).model.hub == REPO
    step.hub_picker.set_model("")
    assert step.missing_hub() and "Model: type the Hugging Face model's id" in step.blocking()
    step.set_task("image_classification")
    assert step.hub_radio.isHidden() and step.builtin_radio.isChecked()
