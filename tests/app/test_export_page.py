"""The Export wizard: widget tests on canned engine replies, then one real export through the engine.

The widget tests use the Compress wizard's FakeEngineClient (replies on the next
turn of the event loop, events published by hand) with records shaped like the
engine's (docs/export.md). The last test trains the digits CNN briefly in the real
engine the window starts, exports it to ONNX and a Jetson bundle from the page, and
checks the files and the parity shown.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from PySide6.QtCore import Qt

from engine.api.job_terms import FINAL_STATES
from engine.api.protocol import INVALID_PARAMS, RpcError
from engine.api.specs import ExportSpec, validate_spec
from tests.app.test_compress_wizard import DIGITS, LORA, fake_engine, finetune_record, settle

NOW = time.time()
STATIC = {"id": "r-static", "kind": "compress.quantize", "name": "digits-cnn-full-int8-static", "state": "succeeded",
          "created_at": NOW - 200, "ended_at": NOW - 100, "error": None, "run_dir": "/tmp/ember/runs/r-static",
          "spec": {"source_run": DIGITS["id"], "mode": "static"}, "parent_id": DIGITS["id"], "host": None,
          "summary": {"task": None, "best": None}}
PRUNED = {**copy.deepcopy(STATIC), "id": "r-pruned", "kind": "compress.prune", "name": "digits-pruned",
          "run_dir": "/tmp/ember/runs/r-pruned",
          "spec": {"source_run": DIGITS["id"], "ratio": 0.3}}
RUNNING = {**finetune_record("r-running", "still-training", {"task": "image_classification"}, 0.5, "digits-cnn"),
           "state": "running"}
PROBE = {"id": "r-probe", "kind": "system.probe", "name": "probe", "state": "succeeded", "spec": {}}
JOBS = [LORA, DIGITS, STATIC, PRUNED, RUNNING, PROBE]
HOSTS = [
    {"name": "trainer", "address": "10.0.0.2", "port": 22, "user": "", "role": "training", "facts": None},
    {"name": "orin", "address": "10.0.0.9", "port": 22, "user": "nv", "role": "jetson",
     "facts": {"jetson": {"l4t": "36.4.0", "jetpack": "6.1", "tensorrt": "10.3.0"}}},
    {"name": "bench-nano", "address": "10.0.0.7", "port": 22, "user": "nv", "role": "jetson", "facts": None},
]
RESULT = {
    "source_run": DIGITS["id"], "source_kind": "train.finetune", "task": "image_classification",
    "formats": {
        "onnx": {"path": "/runs/r-exp/export/onnx/model.onnx", "files": ["/runs/r-exp/export/onnx/model.onnx"],
                 "bytes": 90_000, "seconds": 2.1, "exporter": "dynamo",
                 "opset": 18, "parity": {"max_abs_diff": 2.1e-06, "top1_agreement": 1.0, "samples": 64,
                                         "passed": True, "enforced": True}},
        "torchscript": {"path": "/runs/r-exp/export/torchscript/model.ts", "bytes": 95_000,
                        "parity": {"max_abs_diff": 3e-3, "top1_agreement": 0.97, "samples": 64,
                                   "passed": False, "enforced": True}},
    },
    "compat": {"tensorrt_version": "10.3", "ok": True, "findings": [
        {"severity": "warning", "node": "/fc/Gemm", "op": "Gemm", "message": "int8 not calibrated",
         "fix": "use a static int8 variant"},
        {"severity": "info", "node": "", "op": "", "message": "opset 18 is read by TensorRT 10.3", "fix": ""}]},
    "device": {"host": "orin", "jetpack": "6.1", "tensorrt": "10.3.0", "precision": "fp16",
               "latency_ms": {"mean": 1.1, "median": 1.0, "p90": 1.2, "p95": 1.3, "p99": 1.5},
               "throughput_qps": 950.0, "batch": 1},
}


def started(params: dict[str, Any]) -> dict[str, Any] | RpcError:
    """jobs.start as the engine answers it: the engine's validation, then a queued record."""
    try:
        validate_spec(params["kind"], params["spec"])
    except ValueError as exc:
        return RpcError(INVALID_PARAMS, str(exc).splitlines()[0])
    return {"id": "r-exp", "kind": params["kind"], "name": params["name"], "state": "queued",
            "spec": params["spec"], "run_dir": "/runs/r-exp", "error": None}


@pytest.fixture
def page(qtbot):
    from app.pages.export import ExportPage

    engine = fake_engine({"jobs.list": {"jobs": copy.deepcopy(JOBS)}, "hosts.list": {"hosts": copy.deepcopy(HOSTS)},
                          "jobs.get": lambda p: next(copy.deepcopy(j) for j in JOBS if j["id"] == p["id"]),
                          "jobs.start": started,
                          "jobs.stop": lambda p: {"id": p["id"], "kind": "export.model", "state": "stopping",
                                                  "run_dir": "/runs/r-exp", "error": None}})
    widget = ExportPage(engine)
    qtbot.addWidget(widget)
    widget.resize(1100, 850)
    widget.show()
    settle(qtbot, engine.client)
    yield widget
    settle(qtbot, engine.client)


def tick(page, *formats: str) -> None:
    for key, check in page.format_checks.items():
        check.setChecked(key in formats)


def choose(page, qtbot, run_id: str) -> None:
    page.set_variant(run_id)
    settle(qtbot, page._client)


def test_sources_are_finished_runs_with_a_model_and_set_variant_preselects(page, qtbot):
    assert len(page._client.sent("jobs.list")) == 1  # the one list of the JobsState
    assert sorted(page.source_step.source_ids()) == sorted([LORA["id"], DIGITS["id"], "r-static", "r-pruned"])
    assert page.source_step.row_text(DIGITS["id"])[:5] == [
        "digits-cnn-full", "train.finetune", "the fine-tune itself", "image classification", "0.97"]
    assert page.source_step.row_text("r-static")[1:3] == ["compress.quantize", "int8 static (TensorRT form)"]
    assert page.current_step() == 0 and not page.next_button.isEnabled() and not page.run_button.isEnabled()

    choose(page, qtbot, "r-pruned")
    assert page.source()["id"] == "r-pruned" and page.current_step() == 1
    assert page.variant_facts.value("Variant") == "pruned 30% params"
    assert page.variant_facts.value("Model file") == "/tmp/ember/runs/r-pruned/model/model.pt (and model.onnx)"

    # A run not (yet) finished is refused, with the reason.
    page._client.replies["jobs.get"] = copy.deepcopy(RUNNING)
    page.set_variant("r-running")
    settle(qtbot, page._client)
    assert page.source()["id"] == "r-pruned"
    assert "only a finished (succeeded) fine-tune or compression variant" in page.status_label.text()


def test_quantized_variant_cannot_become_torchscript_or_pt2(page, qtbot):
    choose(page, qtbot, DIGITS["id"])
    tick(page, "onnx", "torchscript", "pt2")
    assert page.spec()["formats"] == ["onnx", "torchscript", "pt2"]

    choose(page, qtbot, "r-static")
    for key in ("torchscript", "pt2"):
        check = page.format_checks[key]
        assert not check.isEnabled() and not check.isChecked()
        assert "ONNX model only" in check.toolTip() and page.formats_step.reasons[key].isVisibleTo(page)
    assert all(page.format_checks[k].isEnabled() for k in ("onnx", "ort", "tensorrt", "triton", "jetson"))
    assert page.spec()["formats"] == ["onnx"]
    assert "reported, not enforced" in page.source_step.note.text()
    # An image model has no sequence axis.
    assert not page.formats_step.fields["dynamic_sequence"].isEnabled()


def test_spec_is_validated_and_each_message_is_on_its_step(page, qtbot):
    choose(page, qtbot, DIGITS["id"])
    fields = page.formats_step.fields
    assert page.errors == {} and page.next_button.isEnabled()
    fields["opt_batch"].setValue(16)  # above max_batch 8
    message = page.formats_step.field_messages["opt_batch"]
    assert message.isVisibleTo(page) and "larger than max_batch" in message.text()
    assert not page.next_button.isEnabled() and not page.run_button.isEnabled()
    assert page.step_buttons[1].text().endswith("⚠") and "Opt batch" in page.status_label.text()
    fields["max_batch"].setValue(32)
    assert page.errors == {} and page.next_button.isEnabled()

    fields["tolerance"].setText("tiny")  # typed text the engine cannot read as a number
    fields["tolerance"].textEdited.emit("tiny")
    assert "tolerance" in page.errors and page.formats_step.field_messages["tolerance"].isVisibleTo(page)
    fields["tolerance"].setText("1e-3")
    fields["tolerance"].textEdited.emit("1e-3")
    assert page.errors == {}

    # No format: Next stays disabled with the reason.
    tick(page)
    assert not page.next_button.isEnabled() and "tick at least one format" in page.status_label.text()

    # The Jetson's fields live on Target: an unreadable JetPack is flagged there, not on Formats.
    tick(page, "onnx", "jetson")
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 2
    target = page.target_step.fields
    target["jetpack"].setText("6.x")
    target["jetpack"].textEdited.emit("6.x")
    assert page.target_step.field_messages["jetpack"].isVisibleTo(page)
    assert page.step_buttons[2].text().endswith("⚠") and not page.step_buttons[1].text().endswith("⚠")
    assert not page.next_button.isEnabled() and not page.run_button.isEnabled()
    assert "Target · JetPack" in page.review_step.blockers.text()
    target["jetpack"].setText("6.1")
    target["jetpack"].textEdited.emit("6.1")
    assert page.errors == {} and page.next_button.isEnabled()


def test_target_step_is_skipped_without_jetson_or_tensorrt(page, qtbot):
    choose(page, qtbot, DIGITS["id"])
    tick(page, "onnx", "ort")
    assert not page.step_buttons[2].isEnabled()
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 3  # Formats -> Review
    qtbot.mouseClick(page.back_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 1
    assert "target" not in page.spec() and "precision" not in page.spec()

    tick(page, "tensorrt")  # an engine built here: precision and workspace, no Jetson and no host
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 2
    assert not page.target_step.fields["target"].isEnabled() and not page.target_step.fields["host"].isEnabled()
    assert page.target_step.fields["precision"].isEnabled()
    assert page.spec()["target"] is None and page.spec()["precision"] == "fp16"
    int8_tip = page.target_step.fields["precision"].itemData(2, Qt.ItemDataRole.ToolTipRole)
    assert "QDQ" in int8_tip and "static int8" in int8_tip


def test_deploy_to_lists_only_jetson_hosts_with_their_probe(page, qtbot):
    assert page._client.sent("hosts.list") == [{}]
    combo = page.target_step.fields["host"]
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "Save the bundle only (folder and .tar.gz)", "bench-nano (not probed yet)",
        "orin (JetPack 6.1, TensorRT 10.3.0)"]
    choose(page, qtbot, DIGITS["id"])
    tick(page, "onnx", "jetson")
    assert page.spec()["host"] is None and "benchmark_s" not in page.spec()
    target = page.target_step.fields
    target["target"].setCurrentIndex(target["target"].findData("agx_orin"))
    assert target["target"].currentText() == "Jetson AGX Orin"
    combo.setCurrentIndex(combo.findData("orin"))
    spec = page.spec()
    assert spec["host"] == "orin" and spec["target"] == "agx_orin" and spec["benchmark_s"] == 10.0
    assert page.errors == {}

    # A host removed elsewhere: the list follows the hosts topic, and the bundle is only saved.
    page._client.replies["hosts.list"] = {"hosts": [h for h in HOSTS if h["name"] != "orin"]}
    page._client.publish("hosts", {"name": "orin", "removed": True})
    settle(qtbot, page._client)
    assert page.target_step.host_names() == ["bench-nano"] and page.spec()["host"] is None


def test_review_shows_the_job_file_start_sends_and_the_command(page, qtbot):
    choose(page, qtbot, DIGITS["id"])
    tick(page, "onnx", "jetson")
    page.formats_step.fields["opset"].setValue(17)
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 3
    doc = yaml.safe_load(page.review_view.toPlainText())
    assert doc["kind"] == "export.model" and doc["name"] == "digits-cnn-full-export"
    assert ExportSpec.model_validate(doc["spec"]).target == "orin_nano"
    assert doc["spec"]["opset"] == 17 and doc["spec"]["formats"] == ["onnx", "jetson"]
    assert page.review_step.command.text() == "ember run export.yaml"

    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    settle(qtbot, page._client)
    [sent] = page._client.sent("jobs.start")
    assert sent == {"kind": "export.model", "spec": doc["spec"], "name": doc["name"]}
    assert page.current_step() == 4 and page.run_step.job_id == "r-exp"
    assert page._client.subscriptions[-1].topics == ["run/r-exp/*"]


def start_job(page, qtbot, *formats: str) -> None:
    choose(page, qtbot, DIGITS["id"])
    tick(page, *formats)
    page.go_to(3)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    settle(qtbot, page._client)


def test_run_step_follows_the_jobs_events_and_result(page, qtbot):
    start_job(page, qtbot, "onnx", "torchscript", "jetson")
    run, client = page.run_step, page._client
    assert run.stop_button.isEnabled() and run.open_button.isEnabled()
    client.publish("run/r-exp/status", {"kind": "status", "state": "running"})
    client.publish("run/r-exp/progress", {"kind": "progress", "stage": "onnx", "fraction": 0.25,
                                          "message": "exporting ONNX"})
    assert run.progress.value() == 250 and run.stage_label.text() == "onnx · exporting ONNX"
    client.publish("run/r-exp/export", {"kind": "export", "format": "onnx", **RESULT["formats"]["onnx"]})
    assert run.format_cells() == {"onnx": ["onnx", "onnx/model.onnx", "87.9 KiB", "2.10e-06", "100.0% of 64",
                                           "passed"]}
    verdict = page.results_table.item(0, 5)
    assert verdict.foreground().color().name() == "#2b8a3e"
    client.publish("run/r-exp/device", {"kind": "device", "stage": "build", "line": "[I] Building engine"})
    assert run.device_card.isVisibleTo(page) and "[build] [I] Building engine" in run.device_log.toPlainText()

    client.publish("run/r-exp/result", {"kind": "result", **RESULT})
    cells = run.format_cells()
    assert cells["torchscript"][5] == "failed" and page.results_table.item(1, 5).foreground().color().name() == \
        "#c92a2a"
    assert run.compat_card.isVisibleTo(page)
    assert "TensorRT 10.3: compatible (1 warning, 1 info)" in run.compat_label.text()
    table = run.findings_table
    assert [table.item(0, c).text() for c in range(5)] == ["warning", "/fc/Gemm", "Gemm", "int8 not calibrated",
                                                           "use a static int8 variant"]
    assert run.device_facts.value("Latency") == "median 1.00 ms, p99 1.50 ms"
    assert run.device_facts.value("Throughput") == "950 inferences/s at batch 1"
    assert run.device_facts.value("JetPack") == "6.1"

    qtbot.mouseClick(run.stop_button, Qt.MouseButton.LeftButton)
    settle(qtbot, client)
    assert client.sent("jobs.stop") == [{"id": "r-exp"}] and run.state == "stopping"


def test_a_failed_export_shows_its_message_and_hint(page, qtbot):
    start_job(page, qtbot, "onnx", "jetson")
    failed = {"id": "r-exp", "kind": "export.model", "state": "failed", "run_dir": "/runs/r-exp",
              "error": {"message": "TensorRT 8.5 cannot read opset 18",
                        "hint": "Choose opset 17 or lower on Formats."}}
    page._client.replies["jobs.get"] = failed
    # The compatibility check fails the job before any result: its findings come from the compat event.
    page._client.publish("run/r-exp/compat", {"kind": "compat", "tensorrt_version": "8.5", "where": "orin_nano",
                                              "ok": False, "findings": [
        {"severity": "error", "node": "", "op": "", "message": "opset 18 is newer than TensorRT 8.5 reads",
         "fix": "export with opset 17"}]})
    page._client.publish("run/r-exp/error", {"kind": "error", **failed["error"]})
    page._client.publish("run/r-exp/status", {"kind": "status", "state": "failed", **failed["error"]})
    settle(qtbot, page._client)
    run = page.run_step
    assert run.state == "failed" and run.error_label.isVisibleTo(page)
    assert run.error_label.text() == "TensorRT 8.5 cannot read opset 18"
    assert run.hint_label.text() == "What to do: Choose opset 17 or lower on Formats."
    assert not run.stop_button.isEnabled() and run.another_button.isEnabled()
    assert run.compat_label.text() == "Checked against TensorRT 8.5 (orin_nano): not compatible (1 error)."
    assert run.findings_table.item(0, 4).text() == "export with opset 17"
    qtbot.mouseClick(run.another_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 1 and run.job_id is None and page.run_button.isEnabled()


def test_open_folder_opens_the_formats_own_folder_or_shows_the_path_to_copy(page, qtbot, monkeypatch):
    from PySide6.QtGui import QDesktopServices, QGuiApplication

    asked, answer = [], {"opened": True}

    def open_url(url):
        asked.append(url.toLocalFile())
        return answer["opened"]

    monkeypatch.setattr(QDesktopServices, "openUrl", open_url)
    start_job(page, qtbot, "onnx", "ort")
    run = page.run_step
    for fmt, path in (("onnx", "/runs/r-exp/export/onnx/model.onnx"), ("ort", "/runs/r-exp/export/ort")):
        page._client.publish("run/r-exp/export", {"kind": "export", "format": fmt, "path": path,
                                                  "parity": RESULT["formats"]["onnx"]["parity"]})
    # ONNX is where the package starts from: the folder asked for is the package's.
    qtbot.mouseClick(run.open_button, Qt.MouseButton.LeftButton)
    assert asked == ["/runs/r-exp/export/ort"] and not run.folder_fallback.isVisibleTo(page)
    assert "export/ort/" in run.open_button.toolTip()
    run.results_table.selectRow(0)  # another row: its own folder
    qtbot.mouseClick(run.open_button, Qt.MouseButton.LeftButton)
    assert asked[-1] == "/runs/r-exp/export/onnx"

    # No file-manager launcher on this desktop: the path is shown, and Copy puts it on the clipboard.
    answer["opened"] = False
    run.results_table.selectRow(1)
    qtbot.mouseClick(run.open_button, Qt.MouseButton.LeftButton)
    fallback = run.folder_fallback
    assert fallback.isVisibleTo(page) and fallback.copy_button.isVisibleTo(page)
    assert fallback.path_edit.text() == "/runs/r-exp/export/ort" and "No file manager" in fallback.note.text()
    QGuiApplication.clipboard().clear()
    qtbot.mouseClick(fallback.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "/runs/r-exp/export/ort"
    assert fallback.copied.isVisibleTo(page)
    answer["opened"] = True  # it opens now: the fallback goes
    qtbot.mouseClick(run.open_button, Qt.MouseButton.LeftButton)
    assert not fallback.isVisibleTo(page)


def test_a_quantized_variants_reported_parity_is_explained_on_screen(page, qtbot):
    start_job(page, qtbot, "onnx", "ort")
    run = page.run_step
    assert not run.parity_label.isVisibleTo(page)
    reported = {"max_abs_diff": 0.328, "top1_agreement": 0.979, "samples": 48, "passed": False, "enforced": False,
                "reference": "run r-digits (fp32 PyTorch, the variant's parent)", "reported_because": "quantized"}
    for fmt in ("onnx", "ort"):
        page._client.publish("run/r-exp/export", {"kind": "export", "format": fmt, "path": f"/runs/r-exp/export/{fmt}",
                                                  "parity": reported})
    assert run.format_cells()["onnx"][3:] == ["3.28e-01", "97.9% of 48", "reported"]
    text = run.parity_label.text()
    assert run.parity_label.isVisibleTo(page)
    assert "quantized variant is compared with its fp32 parent" in text and "reported, not enforced" in text
    assert "onnx 97.9% of 48 examples (max abs diff 3.28e-01)" in text and "ort 97.9%" in text
    # An fp32 export that passed needs no such line.
    page._client.publish("run/r-exp/result", {"kind": "result", "formats": {"onnx": RESULT["formats"]["onnx"]}})
    run.reset()
    run.set_format("onnx", RESULT["formats"]["onnx"])
    assert not run.parity_label.isVisibleTo(page)


def test_a_quantized_variant_offers_only_what_the_export_applies(page, qtbot):
    fields, note = page.formats_step.fields, page.formats_step.variant_note
    choose(page, qtbot, DIGITS["id"])
    fields["slim"].setChecked(True)
    fields["dynamic_batch"].setChecked(False)
    assert fields["slim"].isEnabled() and not note.isVisibleTo(page)

    choose(page, qtbot, "r-static")
    # Its model.onnx is used as the compression job wrote it: axes and slimming are shown as applied, not offered.
    assert not fields["slim"].isEnabled() and not fields["slim"].isChecked()
    assert not fields["dynamic_batch"].isEnabled() and fields["dynamic_batch"].isChecked()
    assert "compression job" in fields["dynamic_batch"].toolTip()
    # The opset is applied: the file is converted to it (or the job stops), and the step says so.
    assert fields["opset"].isEnabled() and note.isVisibleTo(page)
    assert "converts it to the ONNX opset chosen above" in note.text()
    fields["opset"].setValue(17)
    spec = page.spec()
    assert spec["opset"] == 17 and spec["slim"] is False and spec["dynamic_batch"] is True

    choose(page, qtbot, DIGITS["id"])
    assert fields["slim"].isEnabled() and fields["dynamic_batch"].isEnabled() and not note.isVisibleTo(page)


def test_review_says_one_thing_about_saving_the_job_file(page, qtbot, tmp_path):
    from PySide6.QtWidgets import QLabel

    choose(page, qtbot, DIGITS["id"])
    tick(page, "onnx", "ort")
    page.go_to(3)
    review = page.review_step
    texts = " ".join(w.text() for w in review.findChildren(QLabel) if w.isVisibleTo(page))
    assert "Saved as" not in texts and "Save YAML" in texts and "once the YAML is saved" in texts
    assert review.command.text() == "ember run export.yaml" and review.save_button.isVisibleTo(page)

    path = tmp_path / "my export.yaml"
    review.write_yaml(str(path))
    assert path.read_text() == page.review_view.toPlainText()
    doc = yaml.safe_load(path.read_text())
    assert validate_spec(doc["kind"], doc["spec"]).formats == ["onnx", "ort"]
    assert review.command.text() == f"ember run '{path}'"
    assert review.saved_note.text() == f"Saved {path}. Run it with: ember run '{path}'"
    page.formats_step.fields["opset"].setValue(17)  # the file on disk is now older than the YAML shown
    assert "changed since it was saved" in review.saved_note.text()


# -- the real thing -------------------------------------------------------------------------------

PARENT = {"task": "image_classification", "method": {"kind": "full"}, "max_steps": 12, "eval_every": 12,
          "optim": {"lr": 3e-3}}
ENGINE_READY = (Path(__file__).resolve().parents[2] / "engine" / "recipes" / "export.py").is_file()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not ENGINE_READY, reason="engine/recipes/export.py is not there yet")
def test_export_a_digits_finetune_to_onnx_and_a_jetson_bundle(qtbot, make_window, gui_home):
    from engine.cli.client import BlockingClient
    from tests.app.conftest import wait_connected

    window = make_window(page="export")
    wait_connected(qtbot, window)
    with BlockingClient.connect(gui_home, client="setup", timeout=30) as c:
        parent = c.call("jobs.start", kind="train.finetune", spec=PARENT, name="digits parent")
    pid = parent["id"]

    def state_of(job_id: str) -> str:
        with BlockingClient.connect(gui_home, client="check", timeout=30) as c:
            return c.call("jobs.get", id=job_id)["state"]

    qtbot.waitUntil(lambda: state_of(pid) in ("succeeded", "failed"), timeout=180_000)
    assert state_of(pid) == "succeeded"
    window.nav.show("export", job_id=pid, record=parent)
    page = window.page("export")
    assert window.stack.currentWidget() is page
    qtbot.waitUntil(lambda: page.source() is not None and page.source()["id"] == pid, timeout=20_000)
    tick(page, "onnx", "jetson")
    page.formats_step.fields["parity_samples"].setValue(16)
    assert page.current_step() == 1
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    target = page.target_step.fields
    assert page.current_step() == 2 and target["target"].currentData() == "orin_nano"
    assert target["host"].currentData() is None
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 3 and page.run_button.isEnabled(), page.review_step.blockers.text()
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)

    run = page.run_step
    qtbot.waitUntil(lambda: run.state in FINAL_STATES, timeout=180_000)
    assert run.state == "succeeded", f"{run.error_label.text()} {run.hint_label.text()}"
    qtbot.waitUntil(lambda: {"onnx", "jetson"} <= set(run.format_cells()), timeout=20_000)
    cells = run.format_cells()
    assert cells["onnx"][5] == "passed", cells
    assert run.progress.value() == run.progress.maximum()
    export = Path(run.folder())
    bundles = [p for p in (export / "jetson").iterdir() if p.is_dir()]
    assert len(bundles) == 1 and (bundles[0] / "manifest.json").is_file()
    manifest = json.loads((bundles[0] / "manifest.json").read_text())  # written last: the bundle is complete
    assert manifest["target"] == "orin_nano" and manifest["source_run"] == pid and manifest["precision"] == "fp16"
    assert "model.onnx" in manifest["files"]
    assert (export / "jetson" / f"{bundles[0].name}.tar.gz").is_file()
    assert cells["jetson"][1] == f"jetson/{bundles[0].name}/ + .tar.gz"
    assert (export / "onnx" / "model.onnx").is_file()
    shot = os.environ.get("EMBER_EXPORT_SCREENSHOT")
    if shot:  # a look at the layout, with the app's stylesheet (tests run without it)
        from PySide6.QtWidgets import QApplication

        from app.state.style import apply_stylesheet

        apply_stylesheet(QApplication.instance())
        window.resize(1280, 1000)
        qtbot.wait(200)
        page.grab().save(shot)
        QApplication.instance().setStyleSheet("")


SMOL = finetune_record("r20260101-smol", "smollm2-short-answers",
                       {"task": "causal_lm", "model": {"builtin": "smollm2-135m-instruct"},
                        "method": {"kind": "lora", "lora_r": 8}, "data": {"builtin": "short-answers"}},
                       1.2, "smollm2-135m-instruct")


def _check(same: int, ppl: float, enforced: bool) -> dict[str, Any]:
    return {"prompts": 8, "identical_answers": same, "perplexity": ppl, "reference_perplexity": 2.0,
            "perplexity_change": ppl / 2.0 - 1, "token_agreement": same / 8, "runtime": "llama.cpp",
            "tokens_per_s": 40.0, "ttft_s": 0.05, "batch": 4, "batch_tokens_per_s": 120.0, **({"enforced": True} if enforced else {"reported_because": "quantized"})}


LLM_RESULT = {"source_run": SMOL["id"], "task": "causal_lm", "reference": {"perplexity": 2.0}, "formats": {
    "hf": {"path": "/runs/r-exp/export/hf", "content": "merged", "bytes": 538_000_000, "check": _check(8, 2.0, True)},
    "gguf": {"path": "/runs/r-exp/export/gguf", "modelfile": "/runs/r-exp/export/gguf/Modelfile", "files": {
        "f16": {"path": "/runs/r-exp/export/gguf/smol-f16.gguf", "bytes": 270_000_000, "check": _check(8, 2.004, True)},
        "q4_k_m": {"path": "/runs/r-exp/export/gguf/smol-q4_k_m.gguf", "bytes": 105_000_000,
                   "check": _check(5, 2.2, False)}}}}}


def test_a_language_model_exports_to_its_own_formats_checked_by_generating(qtbot):
    from app.pages.export import ExportPage

    jobs = [SMOL, DIGITS]
    engine = fake_engine({"jobs.list": {"jobs": copy.deepcopy(jobs)}, "hosts.list": {"hosts": []},
                          "jobs.get": lambda p: next(copy.deepcopy(j) for j in jobs if j["id"] == p["id"]),
                          "jobs.start": started})
    page = ExportPage(engine)
    qtbot.addWidget(page)
    page.resize(1100, 850)
    page.show()
    settle(qtbot, engine.client)
    step = page.formats_step

    def shown() -> list[str]:
        keys = step.check_list.shown()
        assert all(step.check_list.blocks[k].isVisibleTo(page) == (k in keys) for k in step.check_list.blocks)
        return keys

    # An image classifier is offered the graph formats only, ONNX ticked; a language model's are not shown.
    choose(page, qtbot, DIGITS["id"])
    assert shown() == ["onnx", "ort", "torchscript", "pt2", "tensorrt", "triton", "jetson"]
    assert page.spec()["formats"] == ["onnx"] and "for language models" in page.format_checks["gguf"].toolTip()

    # A language model: its own formats, the merged checkpoint and GGUF ticked; the classifier ones hidden.
    choose(page, qtbot, SMOL["id"])
    assert shown() == ["hf", "gguf", "onnx_genai", "jetson"]
    assert all(page.format_checks[f].isEnabled() for f in ("hf", "gguf", "onnx_genai"))
    assert page.spec()["formats"] == ["hf", "gguf"] and step.llm_card.isVisibleTo(page)
    assert page.errors == {} and page.next_button.isEnabled()
    # Back to the classifier and again: each kind of model gets its own defaults back.
    choose(page, qtbot, DIGITS["id"])
    assert page.spec()["formats"] == ["onnx"]
    choose(page, qtbot, SMOL["id"])
    assert page.spec()["formats"] == ["hf", "gguf"]
    tick(page, "hf", "gguf", "onnx_genai")
    assert step.llm_card.isVisibleTo(page) and not step.options_card.isVisibleTo(page)  # no opset for a GGUF
    step.fields["gguf_types"].set_value(["f16", "q8_0"])
    step.fields["adapter"].setCurrentIndex(step.fields["adapter"].findData("separate"))
    spec = page.spec()
    assert spec["formats"] == ["hf", "gguf", "onnx_genai"] and spec["gguf_types"] == ["f16", "q8_0"]
    assert spec["genai_precisions"] == ["fp32", "int4"] and spec["adapter"] == "separate" and "opset" not in spec
    assert spec["check_batch"] == 4
    assert page.errors == {} and page.next_button.isEnabled()

    # No GGUF type ticked: the message is under the types, on this step.
    step.fields["gguf_types"].set_value([])
    assert "gguf_types" in page.errors and step.field_messages["gguf_types"].isVisibleTo(page)
    step.fields["gguf_types"].set_value(["f16", "q4_k_m"])
    # A Jetson bundle of the GGUF file: the Jetson and host, no TensorRT engine options.
    tick(page, "gguf", "jetson")
    spec = page.spec()
    assert spec["formats"] == ["jetson", "gguf"] and spec["target"] == "orin_nano" and "precision" not in spec
    assert page.errors == {} and not step.options_card.isVisibleTo(page)
    assert not page.target_step.fields["precision"].isEnabled() and page.target_step.fields["target"].isEnabled()
    tick(page, "hf", "gguf")

    page.go_to(3)
    doc = yaml.safe_load(page.review_view.toPlainText())
    assert doc["spec"]["formats"] == ["hf", "gguf"] and doc["spec"]["gguf_types"] == ["f16", "q4_k_m"]
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    settle(qtbot, engine.client)
    engine.client.publish("run/r-exp/result", {"kind": "result", **LLM_RESULT})
    cells = page.run_step.format_cells()
    assert cells["hf"][1:] == ["hf", "513.1 MiB", "2.000 (+0.00%)", "8 of 8", "40.0 · 120.0 (4)", "50 ms", "passed"]
    assert cells["gguf f16"][1:4] == ["gguf/smol-f16.gguf", "257.5 MiB", "2.004 (+0.20%)"]
    assert cells["gguf q4_k_m"][3:] == ["2.200 (+10.00%)", "5 of 8", "40.0 · 120.0 (4)", "50 ms", "reported"]
    headers = [page.results_table.horizontalHeaderItem(c).text() for c in range(8)]
    assert headers[3:] == ["Perplexity (change)", "Same greedy answers", "Tokens/s (1 · N at once)", "First token",
                           "Check"]
    assert "token for token" in page.run_step.parity_label.text()
