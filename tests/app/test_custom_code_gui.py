"""The wizard's "Model from my Python file…" and the confirmation at launch, against a real engine.

The engine answers jobs.start with CONFIRMATION_REQUIRED; the dialog shows the path, the sha256,
the size and the first lines it sent; Cancel submits nothing, "Run this code" submits again with
model.code_sha256 and the run is queued. The GUI never runs the file (its marker stays absent).
"""

from __future__ import annotations

import hashlib

from app.connection.engine_client import EngineClient as GuiClient
from app.pages.new_finetune.code_confirm import RUN_TEXT, CodeConfirmDialog, start_job
from app.pages.new_finetune.step_model import ModelStep

CODE = '''import os
from pathlib import Path
from torch import nn

Path({marker!r}).write_text(str(os.getpid()))


def build_model(num_labels):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, num_labels))
'''


def _connected(qtbot, engine_proc) -> GuiClient:
    client = GuiClient("gui-test")
    client.connect_to_engine(engine_proc.paths)
    qtbot.waitUntil(lambda: client.is_connected, timeout=20_000)
    return client


def test_launch_asks_to_confirm_the_code_and_submits_only_with_its_hash(qtbot, engine_proc, tmp_path):
    marker = tmp_path / "ran.txt"
    code = tmp_path / "flat_model.py"
    code.write_text(CODE.format(marker=str(marker)), encoding="utf-8")
    sha = hashlib.sha256(code.read_bytes()).hexdigest()
    gui = _connected(qtbot, engine_proc)
    step = ModelStep(gui)
    qtbot.addWidget(step)
    step.set_task("image_classification")
    step.code_radio.setChecked(True)
    step.code_edit.setText(str(code))
    spec = {"task": "image_classification", "method": {"kind": "full"}, "device": "cpu", "max_steps": 1,
            "batch_size": 4}
    step.write(spec)
    assert spec["model"]["code"] == str(code) and spec["model"]["code_entry"] == "build_model"
    assert "code_sha256" not in spec["model"]  # the wizard never hashes or reads the file itself
    params = {"kind": "train.finetune", "spec": spec, "name": "custom"}
    started, failed, cancelled = [], [], []
    blocking = engine_proc.client()
    try:
        # Cancel: the dialog shows what the engine read; nothing is submitted.
        start_job(step, gui, params, started.append, failed.append, lambda: cancelled.append(True))
        qtbot.waitUntil(lambda: getattr(step, "_code_confirm_dialog", None) is not None, timeout=20_000)
        dialog: CodeConfirmDialog = step._code_confirm_dialog
        assert dialog.sha_label.text() == sha
        assert dialog.path_label.text() == str(code.resolve())
        assert str(code.stat().st_size) in dialog.size_label.text()
        assert dialog.preview.isReadOnly() and "def build_model(num_labels):" in dialog.preview.toPlainText()
        assert dialog.preview.font().fixedPitch() or dialog.preview.font().styleHint() is not None
        assert dialog.run_button.text() == RUN_TEXT and dialog.cancel_button.isDefault()
        dialog.cancel_button.click()
        qtbot.waitUntil(lambda: cancelled == [True], timeout=5_000)
        assert blocking.call("jobs.list")["jobs"] == [] and started == [] and failed == []

        # Run this code: submitted again with the hash, and the run exists.
        start_job(step, gui, params, started.append, failed.append, lambda: cancelled.append(True))
        qtbot.waitUntil(lambda: getattr(step, "_code_confirm_dialog", None) is not None, timeout=20_000)
        step._code_confirm_dialog.run_button.click()
        qtbot.waitUntil(lambda: len(started) == 1, timeout=20_000)
        job = started[0]
        assert job["spec"]["model"]["code_sha256"] == sha and failed == []
        assert [j["id"] for j in blocking.call("jobs.list")["jobs"]] == [job["id"]]
        blocking.call("jobs.cancel", id=job["id"])  # the training itself is tests/engine/test_custom_code.py's
        assert not marker.exists() or int(marker.read_text()) != engine_proc.proc.pid
    finally:
        blocking.close()
        gui.close()


def test_choosing_a_code_model_switches_the_method_to_full_and_back(qtbot):
    from app.pages.new_finetune.step_method import MethodStep

    model, method = ModelStep(None), MethodStep()
    qtbot.addWidget(model)
    qtbot.addWidget(method)
    model.code_mode_changed.connect(method.set_code_model)
    assert method.kind() == "lora"
    model.code_radio.setChecked(True)
    assert method.kind() == "full" and not method.method_radios["lora"].isEnabled()
    assert not method.code_reason.isHidden()
    model.builtin_radio.setChecked(True)
    assert method.method_radios["lora"].isEnabled() and method.code_reason.isHidden()
    assert not method.method_radios["qlora"].isEnabled()  # still no CUDA here
