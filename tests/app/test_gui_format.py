"""Formatting of engine values: durations, sizes, and probe facts (GPU rows included)."""

from __future__ import annotations

import time

from app.text import format as fmt
from app.text.probe_facts import probe_rows
from app.widgets.run_details import event_line


def test_durations_and_sizes():
    assert fmt.duration(None) == "—"
    assert fmt.duration(4.25) == "4.2 s"
    assert fmt.duration(75) == "1 min 15 s"
    assert fmt.duration(3 * 3600 + 120) == "3 h 02 min"
    assert fmt.size(512) == "512 B"
    assert fmt.size(25_276_510_208) == "23.5 GiB"
    job = {"state": "running", "started_at": 100.0, "ended_at": None}
    assert fmt.job_duration(job, now=112.0) == "12 s"
    assert fmt.job_duration({"state": "queued"}) == "—"


def test_probe_rows_describe_gpus_and_keep_unknown_facts():
    rows = dict(probe_rows({
        "host": "node1",
        "memory": {"total_bytes": 2 * 1024**3, "available_bytes": 1024**3},
        "gpu": {"torch": "2.14.1", "cuda_available": True, "cuda_version": "12.8",
                "devices": [{"index": 0, "name": "NVIDIA H200", "memory_bytes": 150_000_000_000,
                             "capability": "9.0"}]},
        "packages": {"torch": "2.14.1", "onnx": None},
        "numa_nodes": 2,
    }))
    assert rows["Host"] == "node1"
    assert rows["Memory"] == "2.0 GiB total, 1.0 GiB available"
    assert rows["GPUs"] == "0: NVIDIA H200, 139.7 GiB, compute 9.0"
    assert rows["CUDA"] == "available (CUDA 12.8)"
    assert rows["PyTorch"] == "2.14.1"
    assert rows["Packages"] == "torch 2.14.1\nnot installed: onnx"
    assert rows["Numa nodes"] == "2"  # a fact this GUI does not know yet is still shown


def test_event_lines_are_short_and_readable():
    line = event_line("run/r1/sample", {"t": time.time(), "kind": "sample", "step": 3, "cpu_percent": 1.5})
    assert line.split()[1:] == ["sample", "step=3", "cpu_percent=1.5"]
    long = event_line("run/r1/result", {"facts": {"x": "y" * 1000}})
    assert len(long) < 260 and long.endswith("…")


def test_an_eta_is_shown_only_once_it_can_be_estimated_and_never_as_0_s():
    assert fmt.eta_left(None, at=1000.0) is None
    assert fmt.eta_left(100, at=1000.0, now=1030.0) == 70.0
    # The estimate ran out while the job still runs (a slow evaluation, say): unknown, not "0.0 s".
    assert fmt.eta_left(20, at=1000.0, now=1030.0) is None
    assert fmt.eta_left(30.5, at=1000.0, now=1030.0) is None
    # The first steps' pace includes the warm-up: no ETA from them.
    assert fmt.train_eta({"step": 1, "eta_s": 500.0, "t": 1000.0}, now=1001.0) is None
    assert fmt.train_eta({"step": fmt.MIN_ETA_STEPS, "eta_s": 500.0, "t": 1000.0}, now=1001.0) == 499.0
    assert fmt.train_eta({"step": 10, "t": 1000.0}, now=1001.0) is None


def test_status_bar_activity_has_no_eta_during_warm_up_or_after_the_estimate_ran_out(qtbot):
    from app.widgets.activity import ActivityTracker, JobRow, extrapolated_eta, summary_text
    from tests.app.test_compress_wizard import fake_engine, settle

    engine = fake_engine({"jobs.list": {"jobs": []}})
    tracker = ActivityTracker(engine)
    settle(qtbot, engine.client)
    now = time.time()
    engine.client.publish("jobs", {"id": "r1", "kind": "train.finetune", "name": "tickets", "state": "running",
                                   "started_at": now - 100})
    engine.client.publish("run/r1/train", {"t": now, "step": 1, "progress": 0.01, "eta_s": 2.0})
    assert summary_text(tracker, now + 1) == "1 job running · 1%"
    engine.client.publish("run/r1/train", {"t": now, "step": 85, "progress": 0.85, "eta_s": 20.0})
    assert summary_text(tracker, now + 5) == "1 job running · 85% · ETA 15 s"
    assert summary_text(tracker, now + 60) == "1 job running · 85%"  # not "ETA 0.0 s"
    # The popup's row says "finishing" once every step is done and the job still runs.
    engine.client.publish("run/r1/train", {"t": now, "step": 100, "progress": 1.0, "eta_s": 0.0})
    row = JobRow(tracker.job("r1"), tracker)
    qtbot.addWidget(row)
    assert row.eta_label.text() == "100% · finishing"
    # Compress and export jobs: extrapolated only after a few seconds and a few percent.
    assert extrapolated_eta(0.5, now - 2, now) is None
    assert extrapolated_eta(0.01, now - 100, now) is None
    assert extrapolated_eta(0.5, now - 100, now) == 100.0
