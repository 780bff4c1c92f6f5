"""The speed options in the wizard (Training step) and the speed figures on the Monitor (issue 10)."""

from __future__ import annotations

import re

import pytest
import yaml

from engine.api.train_spec import TrainSpec


def open_wizard(make_window):
    window = make_window(page="new_finetune", start=False)  # the form alone: no engine needed
    return window, window.page("new_finetune")


def test_the_speed_fields_round_trip_through_the_spec(qtbot, make_window):
    _window, page = open_wizard(make_window)
    hardware = page.training_step
    # A fresh wizard: everything automatic, and the job file says nothing about speed.
    assert hardware.precision_combo.currentData() == "auto" and hardware.precision_combo.currentIndex() == 0
    assert "bf16 on a capable GPU" in hardware.precision_combo.currentText()
    assert hardware.speed.workers_spin.text() == "auto"
    launched = page.spec_for_launch()
    assert "speed" not in launched and "precision" not in launched
    assert not {"num_workers", "packing", "group_by_length"} & set(launched.get("data") or {})

    spec = {
        "task": "causal_lm", "model": {"builtin": "tiny-llama"}, "method": {"kind": "lora"},
        "precision": "bf16", "device": "cpu", "optim": {"lr": 0.002},
        "speed": {"attention": "eager", "compile": "off", "optimizer_impl": "for_loop", "peak_tflops": 12.5},
        "data": {"builtin": "tiny-instructions", "num_workers": 3, "prefetch_factor": 4, "packing": True,
                 "group_by_length": True},
    }
    page.load_spec(spec, "speedy")
    speed = hardware.speed
    assert hardware.precision_combo.currentData() == "bf16"
    assert speed.attention_combo.currentData() == "eager"
    assert speed.compile_combo.currentData() == "off"
    assert speed.optimizer_combo.currentData() == "for_loop"
    assert speed.workers_spin.value() == 3
    assert speed.packing_check.isChecked() and speed.group_check.isChecked()
    assert page.errors == {}
    # What Launch sends and the YAML shows is the spec loaded (peak_tflops and prefetch_factor have
    # no widget: they survive anyway).
    assert TrainSpec.model_validate(page.spec_for_launch()) == TrainSpec.model_validate(spec)
    doc = yaml.safe_load(page.review_step.yaml_view.toPlainText())
    assert TrainSpec.model_validate(doc["spec"]) == TrainSpec.model_validate(spec)

    # Edits in the form reach the spec; "auto" workers is None there.
    speed.attention_combo.setCurrentIndex(speed.attention_combo.findData("sdpa"))
    speed.compile_combo.setCurrentIndex(speed.compile_combo.findData("on"))
    speed.optimizer_combo.setCurrentIndex(speed.optimizer_combo.findData("fused"))
    speed.workers_spin.setValue(speed.workers_spin.minimum())
    hardware.precision_combo.setCurrentIndex(0)
    now = TrainSpec.model_validate(page.current_spec())
    assert (now.speed.attention, now.speed.compile, now.speed.optimizer_impl) == ("sdpa", "on", "fused")
    assert now.data.num_workers is None and now.precision == "auto" and now.speed.peak_tflops == 12.5

    # Each option explains itself with its glossary term.
    assert "<b>scaled dot-product attention</b>" in speed.attention_combo.toolTip()
    assert "<b>torch.compile</b>" in speed.compile_combo.toolTip()
    assert "<b>fused AdamW</b>" in speed.optimizer_combo.toolTip()
    assert "<b>data workers</b>" in speed.workers_spin.toolTip()
    assert "<b>sequence packing</b>" in speed.packing_check.toolTip()
    assert "<b>length grouping</b>" in speed.group_check.toolTip()


def test_packing_only_for_causal_lm_and_length_grouping_only_for_text(qtbot, make_window):
    _window, page = open_wizard(make_window)
    speed = page.training_step.speed
    page.task_step.task_radios["causal_lm"].click()
    assert speed.packing_check.isEnabled() and speed.group_check.isEnabled()
    speed.packing_check.setChecked(True)
    assert page.current_spec()["data"]["packing"] is True and page.errors == {}

    page.task_step.task_radios["text_classification"].click()
    assert not speed.packing_check.isEnabled() and not speed.packing_check.isChecked()
    assert speed.group_check.isEnabled()
    assert page.current_spec()["data"]["packing"] is False
    assert page.errors == {}  # the engine refuses packing for classification: the form never sends it
    speed.group_check.setChecked(True)
    assert page.current_spec()["data"]["group_by_length"] is True

    page.task_step.task_radios["image_classification"].click()
    assert not speed.packing_check.isEnabled() and not speed.group_check.isEnabled()
    assert page.current_spec()["data"]["group_by_length"] is False and page.errors == {}

    # A spec the engine would refuse is named next to the field: the "use …" advice stays with it.
    page.load_spec({"task": "text_classification", "data": {"packing": True}})
    assert not speed.packing_check.isChecked()  # the form corrects it rather than send it
    from app.models.spec_tools import validate

    _normal, errors = validate({"task": "text_classification", "data": {"packing": True}})
    assert errors == {"data.packing": ["data.packing applies to causal_lm; use data.group_by_length for "
                                       "text classification"]}


# Events in the exact format of the issue-10 contract (run_info "speed", peak; train mfu, tflops,
# padding_frac), fed to the real Monitor page as its subscription would deliver them.
RUN_INFO = {
    "task": "causal_lm", "model": "tiny-gpt", "method": "full", "strategy": "single", "world_size": 1,
    "device": "cuda", "trainable_params": 1000, "total_params": 1000, "total_steps": 4, "start_step": 0,
    "speed": {"precision": "bf16", "attention": "sdpa", "compile": True, "optimizer_impl": "fused",
              "num_workers": 4, "pin_memory": True, "prefetch_factor": 2, "packing": True,
              "group_by_length": False, "notes": ["flash_attention_2 is not installed: sdpa instead"]},
    "flops_per_token": 6.0e9, "flops_per_sample": None, "peak_tflops": 989.0, "peak_source": "H200 table",
}


def train_event(step: int, **extra):
    event = {"step": step, "loss": 2.0 / step, "lr": 1e-4, "samples_per_s": 50.0, "tokens_per_s": 20000.0,
             "step_time_s": 0.5, "data_wait_frac": 0.03, "progress": step / 4, "eta_s": 1.0, "t": 0.0}
    event.update(extra)
    return event


def feed(page, job_id, events):
    page.show_run(job_id)
    for seq, (kind, data) in enumerate(events, 1):
        page._on_run_event(f"run/{job_id}/{kind}", seq, data)
    page._show_progress()


def test_monitor_shows_mfu_padding_and_the_speed_line(qtbot, make_window):
    window = make_window(page="monitor", start=False)
    page = window.page("monitor")
    feed(page, "run-speed", [("run_info", RUN_INFO)] + [
        ("train", train_event(s, mfu=0.40 + s / 100, tflops=(0.40 + s / 100) * 989, padding_frac=0.12))
        for s in range(1, 5)])
    assert page.speed_label.text() == ("bf16  ·  SDPA attention  ·  compiled  ·  fused AdamW  ·  4 data workers  ·  "
                                       "pinned memory  ·  packing")
    assert "flash_attention_2 is not installed" in page.speed_label.toolTip()
    assert page.perf_label.text() == "MFU 44%  ·  435 TFLOP/s of 989 peak (H200 table)  ·  padding 12%  ·  data wait 3.0%"
    chart = page.charts.step_chart
    assert chart.series("MFU %").y.tolist() == pytest.approx([41.0, 42.0, 43.0, 44.0])
    assert chart.series("padding %").y.tolist() == [12.0] * 4
    assert chart.count("data wait %") == 4

    # An older run (or one on a device with no known peak): nothing for the missing fields.
    feed(page, "run-old", [("run_info", {k: v for k, v in RUN_INFO.items()
                                         if k not in ("speed", "peak_tflops", "peak_source")})]
         + [("train", train_event(s)) for s in range(1, 4)])
    assert page.speed_label.text() == "" and not page.speed_label.isVisibleTo(page)  # no blank line either
    assert page.perf_label.text() == "data wait 3.0%"
    assert page.charts.step_chart.count("MFU %") == 0 == page.charts.step_chart.count("padding %")

    # An image run on CPU: MFU against a measured peak, no tokens so no padding, no attention.
    cpu_info = {**RUN_INFO, "task": "image_classification", "device": "cpu", "peak_tflops": 0.85,
                "peak_source": "measured fp32 matmul",
                "speed": {**RUN_INFO["speed"], "precision": "fp32", "compile": False,
                          "optimizer_impl": "foreach", "num_workers": 0, "pin_memory": False,
                          "packing": False, "attention": "auto"}}
    feed(page, "run-cpu", [("run_info", cpu_info), ("train", train_event(1, mfu=0.031, tflops=0.026,
                                                                          padding_frac=None))])
    assert page.speed_label.text() == "fp32  ·  foreach optimizer  ·  no data workers"
    assert page.perf_label.text() == "MFU 3.1%  ·  26 GFLOP/s of 850 peak (measured fp32 matmul)  ·  data wait 3.0%"
    for text in (page.speed_label.text(), page.perf_label.text()):
        assert "None" not in text and "nan" not in text

    # A GPU missing from the peak table: no MFU, and the line says why and what to set.
    why = "NVIDIA H300 is not in the GPU table; set speed.peak_tflops to its dense peak to see MFU"
    feed(page, "run-h300", [("run_info", {**RUN_INFO, "peak_tflops": None, "peak_source": why}),
                            ("train", train_event(1, tflops=512.0, padding_frac=0.0, mfu=float("nan")))])
    assert page.perf_label.text() == f"512 TFLOP/s (no MFU: {why})  ·  padding 0.0%  ·  data wait 3.0%"
    assert page.charts.step_chart.count("MFU %") == 0
    fresh = make_window(page="monitor", start=False).page("monitor")  # no earlier run's series: none at all
    feed(fresh, "run-h300", [("train", train_event(1, tflops=512.0, mfu=float("nan")))])
    assert not fresh.charts.step_chart.has_series("MFU %") and not fresh.charts.step_chart.has_series("padding %")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_monitor_shows_the_figures_of_a_real_packed_fine_tune(qtbot, make_window, gui_home):
    """A real causal-LM fine-tune with packing through the real engine: the Monitor shows what it reported."""
    from engine.cli.client import BlockingClient
    from tests.app.conftest import wait_connected

    window = make_window(page="monitor")
    wait_connected(qtbot, window)
    page = window.page("monitor")
    spec = {"task": "causal_lm", "method": {"kind": "full"}, "device": "cpu", "batch_size": 4, "max_steps": 3,
            "eval_every": 3, "checkpoint_every": 100, "data": {"packing": True, "max_length": 64}}
    with BlockingClient.connect(gui_home, client="test-starter", timeout=30) as c:
        job_id = c.call("jobs.start", kind="train.finetune", spec=spec, name="speed figures")["id"]
    qtbot.waitUntil(lambda: page.job_id == job_id, timeout=30_000)
    qtbot.waitUntil(lambda: page.job().get("state") in ("succeeded", "failed"), timeout=300_000)
    assert page.job()["state"] == "succeeded", page.job().get("error")
    chart = page.charts.step_chart
    qtbot.waitUntil(lambda: chart.count("MFU %") == 3, timeout=20_000)

    with BlockingClient.connect(gui_home, client="test-check", timeout=30) as c:
        events = c.call("events.query", topics=[f"run/{job_id}/train", f"run/{job_id}/run_info"],
                        limit=1000)["events"]
    train = [e["data"] for e in events if e["topic"].endswith("/train")]
    info = next(e["data"] for e in events if e["topic"].endswith("/run_info"))
    assert chart.series("MFU %").y.tolist() == pytest.approx([100 * t["mfu"] for t in train])
    assert chart.series("padding %").y.tolist() == pytest.approx([100 * t["padding_frac"] for t in train])
    # The header: MFU against the measured CPU peak, padding, and what the speed options became.
    perf = page.perf_label.text()
    shown = re.match(r"MFU ([0-9.]+)%", perf)
    assert shown and float(shown.group(1)) == pytest.approx(100 * train[-1]["mfu"], abs=0.51)
    assert "peak (" + info["peak_source"] + ")" in perf and "padding " in perf and "data wait " in perf
    line = page.speed_label.text()
    assert line.startswith(info["speed"]["precision"]) and "packing" in line
    for text in (perf, line):
        assert "None" not in text and "nan" not in text
