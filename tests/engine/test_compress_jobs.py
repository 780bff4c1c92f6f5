"""Compression jobs against a real engine: real fine-tunes, real ONNX Runtime sessions, stored evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES
from tests.conftest import wait_for
from tests.fixtures.trained_runs import SPECS

# Real fine-tunes and exports on two shared cores: minutes when the machine is busy.
pytestmark = pytest.mark.timeout(900)

EVAL = {"samples": 32, "batch_size": 8, "warmup": 1, "repeats": 5}
# The parents are the session's shared fine-tunes (tests/fixtures/trained_runs.py), copied into each test's engine.
TEXT_PARENT, DIGITS_PARENT = SPECS["text"], SPECS["digits"]
ENTRY_KEYS = {"run_id", "label", "runtime", "metrics", "latency_ms", "throughput_per_s", "size_bytes", "params",
              "macs", "peak_memory_bytes"}


def finish(c, job_id: str, timeout: float = 600) -> dict:
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j,
                    timeout=timeout, interval=0.5, what=f"job {job_id} to finish")


def model_files(run: dict) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (Path(run["run_dir"]) / "model").iterdir()}


def check_evaluation(done: dict, parent_id: str, batch: int = EVAL["batch_size"]) -> dict:
    assert done["state"] == "succeeded", done
    assert done["parent_id"] == parent_id
    doc = json.loads((Path(done["run_dir"]) / "evaluation.json").read_text())
    assert doc["version"] == 1 and doc["samples"] > 0
    for side in ("parent", "variant"):
        entry = doc[side]
        assert ENTRY_KEYS <= set(entry), (side, set(entry))
        assert entry["runtime"] == doc["settings"]["runtime"]
        assert 0.0 <= entry["metrics"]["accuracy"] <= 1.0
        assert entry["latency_ms"]["b1"]["p50"] > 0 and entry["latency_ms"]["bN"]["batch"] == batch
        assert entry["size_bytes"] > 0 and entry["params"] > 0 and entry["peak_memory_bytes"] > 0
    assert doc["parent"]["run_id"] == parent_id and doc["variant"]["run_id"] == done["id"]
    assert 0.0 <= doc["agreement"] <= 1.0
    assert doc["delta"]["size_ratio"] == pytest.approx(doc["variant"]["size_bytes"] / doc["parent"]["size_bytes"])
    return doc


def test_text_classifier_variants_quantize_prune_qat_distill(engine_with_runs):
    eng, runs = engine_with_runs("text")
    with eng.client() as c:
        parent = c.call("jobs.get", id=runs["text"])
        assert parent["state"] == "succeeded", parent
        before = model_files(parent)
        pid = parent["id"]
        jobs = {
            "dynamic": ("compress.quantize", {"mode": "dynamic"}),
            "static": ("compress.quantize", {"mode": "static", "calibration": {"samples": 16, "method": "minmax"}}),
            "prune": ("compress.prune", {"ratio": 0.3, "recovery_steps": 4, "batch_size": 8}),
            "qat": ("compress.qat", {"steps": 4, "batch_size": 8, "calibration": {"samples": 16}, "target": "cpu"}),
        }
        ids = {name: c.call("jobs.start", kind=kind, spec={"source_run": pid, "eval": EVAL, **spec}, name=name)["id"]
               for name, (kind, spec) in jobs.items()}
        student_spec = {**parent["spec"], "max_steps": 4, "eval_every": 4, "batch_size": 8,
                        "distill": {"teacher_run": pid, "student_layers": 3}}
        ids["distill"] = c.call("jobs.start", kind="train.finetune", spec=student_spec, name="student")["id"]
        # A student is scored with the default evaluation settings (batch 16) after its fine-tune.
        docs = {name: check_evaluation(finish(c, job_id), pid, 16 if name == "distill" else EVAL["batch_size"])
                for name, job_id in ids.items()}

        dyn = docs["dynamic"]
        assert dyn["delta"]["size_ratio"] <= 0.30  # int8 weights: about a quarter of fp32
        assert dyn["agreement"] >= 0.8
        assert docs["static"]["variant"]["size_bytes"] < 0.35 * docs["static"]["parent"]["size_bytes"]
        pruned = docs["prune"]
        assert pruned["variant"]["params"] < 0.85 * pruned["parent"]["params"]
        assert pruned["variant"]["macs"] < pruned["parent"]["macs"]
        student = docs["distill"]
        assert student["variant"]["params"] < 0.9 * student["parent"]["params"]

        # Where each variant runs fast: the TensorRT form's CPU latency is flagged, the CPU ones are not.
        static_target = docs["static"]["target"]
        assert static_target["runtime"] == "tensorrt" and not static_target["measured_on_target"]
        assert "not its target runtime" in static_target["note"]
        assert docs["qat"]["target"]["runtime"] == "cpu" and docs["qat"]["target"]["measured_on_target"]
        # Variants ONNX Runtime runs on a CPU start from the transformer optimizer's fused graph.
        results = {name: c.call("jobs.get", id=ids[name])["result"] for name in ("dynamic", "qat")}
        assert results["dynamic"]["graph"]["fused"]["Attention"] == 6
        assert results["qat"]["graph"]["fused"]["SkipLayerNormalization"] == 12
        assert "Attention" not in results["qat"]["graph"]["fused"]  # QAT quantizes q, k, v one by one
        assert docs["qat"]["agreement"] >= 0.8

        prune_run = c.call("jobs.get", id=ids["prune"])
        assert prune_run["result"]["pruning"]["params_after"] < prune_run["result"]["pruning"]["params_before"]
        metrics = c.call("jobs.metrics", id=ids["prune"])  # the recovery fine-tune streamed the usual events
        assert any(m["kind"] == "train" for m in metrics["metrics"]), metrics

        view = c.call("compress.variants", id=pid)
        assert view["parent"]["id"] == pid
        assert {v["job"]["id"] for v in view["variants"]} == set(ids.values())
        assert all(v["evaluation"] for v in view["variants"])
        assert view["parent_evaluation"]["run_id"] == pid
        assert model_files(parent) == before  # the parent is never changed


def test_digits_cnn_variants(engine_with_runs):
    eng, runs = engine_with_runs("digits")
    with eng.client() as c:
        parent = c.call("jobs.get", id=runs["digits"])
        assert parent["state"] == "succeeded", parent
        pid = parent["id"]
        specs = [("compress.quantize", {"mode": "dynamic"}),
                 ("compress.quantize", {"mode": "static", "calibration": {"samples": 32, "method": "entropy"}}),
                 ("compress.quantize", {"mode": "fp16"}),
                 ("compress.prune", {"ratio": 0.3, "recovery_steps": 6})]
        ids = [c.call("jobs.start", kind=k, spec={"source_run": pid, "eval": EVAL, **s})["id"] for k, s in specs]
        docs = [check_evaluation(finish(c, i), pid) for i in ids]
        dynamic, static, fp16, pruned = docs
        assert dynamic["delta"]["size_ratio"] <= 0.30 and static["delta"]["size_ratio"] <= 0.35
        assert static["agreement"] >= 0.8
        assert fp16["delta"]["size_ratio"] == pytest.approx(0.5, abs=0.05) and fp16["agreement"] >= 0.95
        assert fp16["target"]["runtime"] == "gpu" and not fp16["target"]["measured_on_target"]
        assert dynamic["target"]["measured_on_target"]
        assert pruned["variant"]["params"] < 0.85 * pruned["parent"]["params"]
        assert pruned["variant"]["macs"] < pruned["parent"]["macs"]


def test_bad_input_fails_clearly_and_leaves_the_parent_alone(engine_with_runs):
    eng, runs = engine_with_runs("digits")
    with eng.client() as c:
        running = c.call("jobs.start", kind="train.finetune", spec={**DIGITS_PARENT, "max_steps": 400})
        early = finish(c, c.call("jobs.start", kind="compress.quantize",
                                 spec={"source_run": running["id"]})["id"], timeout=120)
        assert early["state"] == "failed" and "resume or finish the run first" in early["error"]["hint"], early
        c.call("jobs.cancel", id=running["id"])

        parent = c.call("jobs.get", id=runs["digits"])
        assert parent["state"] == "succeeded", parent
        before = model_files(parent)
        pid = parent["id"]
        cases = [
            (("compress.quantize", {"mode": "static", "calibration": {"samples": 4}}), "calibration data too small"),
            (("compress.quantize", {"exclude_op_types": ["Softmax"]}), "Softmax"),
            (("compress.quantize", {"exclude_nodes": ["no_such_node"]}), "no_such_node"),
            (("compress.prune", {"ratio": 0.99, "recovery_steps": 0}), "whole"),
        ]
        for (kind, spec), words in cases:
            done = finish(c, c.call("jobs.start", kind=kind, spec={"source_run": pid, **spec})["id"], timeout=300)
            assert done["state"] == "failed", (spec, done)
            assert words in done["error"]["message"] + done["error"]["hint"], (spec, done["error"])
            assert not (Path(done["run_dir"]) / "model" / "model.onnx").exists()
            assert not (Path(done["run_dir"]) / "work").exists()  # no intermediate exports left behind
        assert model_files(parent) == before
