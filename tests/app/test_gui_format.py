"""Formatting of engine values: durations, sizes, and probe facts (GPU rows included)."""

from __future__ import annotations

import time

from app import format as fmt
from app.probe_facts import probe_rows
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
