"""The Compress wizard on a real trained run: dynamic int8 -> the variant on the Compare page with its numbers.

Everything is real: the engine the window starts, a digits CNN fine-tune, the ONNX
export, ONNX Runtime's quantizer and the evaluation beside the parent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from engine.client import EngineClient
from tests.app.conftest import wait_connected

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PARENT = {"task": "image_classification", "method": {"kind": "full"}, "max_steps": 20, "eval_every": 20,
          "optim": {"lr": 3e-3}}


def click(qtbot, button) -> None:
    assert button.isEnabled(), f"{button.text()} is disabled"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def test_dynamic_int8_from_the_wizard_appears_on_the_compare_page(qtbot, make_window, gui_home, tmp_path):
    window = make_window(page="compress")
    wait_connected(qtbot, window)
    with EngineClient.connect(gui_home, client="setup", timeout=30) as c:
        parent = c.call("jobs.start", kind="train.finetune", spec=PARENT, name="digits parent")
    pid = parent["id"]
    wizard = window.page("compress")

    def parent_state() -> str:
        with EngineClient.connect(gui_home, client="check", timeout=30) as c:
            return c.call("jobs.get", id=pid)["state"]

    qtbot.waitUntil(lambda: parent_state() == "succeeded", timeout=300_000)
    qtbot.waitUntil(lambda: pid in wizard.source_step.source_ids(), timeout=30_000)

    window.compress_run(pid)
    assert window.stack.currentWidget() is wizard and wizard.source()["id"] == pid
    assert not wizard.technique_checks["lora_merge"].isEnabled()  # a full fine-tune has no adapters
    wizard.technique_checks["dynamic_int8"].setChecked(True)
    click(qtbot, wizard.next_button)
    fields = wizard.settings_step.fields
    fields["eval.samples"].setValue(64)
    fields["eval.repeats"].setValue(5)
    click(qtbot, wizard.next_button)
    [(kind, spec, _name)] = wizard.specs()
    assert kind == "compress.quantize" and spec["mode"] == "dynamic" and spec["source_run"] == pid
    assert "mode: dynamic" in wizard.review_view.toPlainText()

    click(qtbot, wizard.run_button)
    qtbot.waitUntil(lambda: len(wizard.job_rows) == 1 and wizard.job_rows[0].job_id, timeout=30_000)
    row = wizard.job_rows[0]
    qtbot.waitUntil(lambda: row.state in ("succeeded", "failed"), timeout=300_000)
    assert row.state == "succeeded", row.detail_label.text()
    assert row.progress.value() == row.progress.maximum()

    click(qtbot, wizard.run_step.compare_button)
    compare = window.page("compare")
    assert window.stack.currentWidget() is compare
    view = compare.variants
    qtbot.waitUntil(lambda: len(view.rows()) == 2 and all(r.metric is not None for r in view.rows()),
                    timeout=30_000)
    parent_row, variant_row = sorted(view.rows(), key=lambda r: not r.is_parent)
    doc = json.loads((Path(row.record["run_dir"]) / "evaluation.json").read_text())
    assert parent_row.run_id == pid and variant_row.run_id == row.job_id
    assert variant_row.metric == pytest.approx(doc["variant"]["metrics"]["accuracy"])
    assert variant_row.size_bytes == doc["variant"]["size_bytes"]
    assert variant_row.compression == pytest.approx(doc["parent"]["size_bytes"] / doc["variant"]["size_bytes"])
    assert variant_row.compression > 3.0  # int8 weights: about a quarter of the fp32 file
    assert variant_row.b1_ms == pytest.approx(doc["variant"]["latency_ms"]["b1"]["p50"])
    view.save_csv(tmp_path / "variants.csv")
    assert row.job_id in (tmp_path / "variants.csv").read_text()
