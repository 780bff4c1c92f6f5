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

EVAL = {"samples": 32, "batch_size": 8, "warmup": 1, "repeats": 3}
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


def test_text_classifier_variants_and_a_chain(engine_with_runs):
    """Quantize (dynamic, static), QAT, and a chain distil → prune → int8 whose stages are jobs of their own."""
    eng, runs = engine_with_runs("text")
    with eng.client() as c:
        parent = c.call("jobs.get", id=runs["text"])
        assert parent["state"] == "succeeded", parent
        before = model_files(parent)
        pid = parent["id"]
        jobs = {
            "dynamic": ("compress.quantize", {"mode": "dynamic"}),
            "static": ("compress.quantize", {"mode": "static", "calibration": {"samples": 16, "method": "minmax"}}),
            "qat": ("compress.qat", {"steps": 4, "batch_size": 8, "calibration": {"samples": 16}, "target": "cpu"}),
        }
        ids = {name: c.call("jobs.start", kind=kind, spec={"source_run": pid, "eval": EVAL, **spec}, name=name)["id"]
               for name, (kind, spec) in jobs.items()}
        stages = [{"technique": "distill", "settings": {"student_layers": 3, "steps": 4, "batch_size": 8}},
                  {"technique": "prune", "settings": {"ratio": 0.7, "vocabulary": True, "iterative_steps": 2,
                                                      "recovery_steps": 4, "batch_size": 8}},
                  {"technique": "quantize", "settings": {"mode": "dynamic"}}]
        chain_id = c.call("jobs.start", kind="compress.chain", name="chain",
                          spec={"source_run": pid, "stages": stages, "eval": EVAL})["id"]
        docs = {name: check_evaluation(finish(c, job_id), pid) for name, job_id in ids.items()}
        chain = finish(c, chain_id, timeout=900)
        assert chain["state"] == "succeeded", (chain.get("error"), chain.get("chain"))
        student_id, pruned_id, final_id = (s["run_id"] for s in chain["chain"]["stages"])
        assert [s["state"] for s in chain["chain"]["stages"]] == ["done"] * 3
        # Each stage is a job whose parent is the previous stage, scored beside it.
        student = check_evaluation(c.call("jobs.get", id=student_id), pid, 16)  # a student: default batch 16
        assert student["variant"]["params"] < 0.9 * student["parent"]["params"]
        assert c.call("jobs.get", id=student_id)["kind"] == "train.finetune"
        pruned = check_evaluation(c.call("jobs.get", id=pruned_id), student_id)
        # 70% of the student's parameters: its vocabulary (about 60%), then heads and FFN width for the rest.
        student_params = pruned["parent"]["params"]
        assert pruned["variant"]["params"] == pytest.approx(0.3 * student_params, abs=0.012 * student_params)
        pruning = c.call("jobs.get", id=pruned_id)["result"]["pruning"]
        assert pruning["vocabulary"]["vocabulary_after"] < 5000 and len(pruning["steps"]) == 2
        assert pruned["variant"]["macs"] < pruned["parent"]["macs"]
        metrics = c.call("jobs.metrics", id=pruned_id)  # the recovery fine-tune streamed the usual events
        assert any(m["kind"] == "train" for m in metrics["metrics"]), metrics
        # The last stage is scored beside the chain's start, and that evaluation is the chain's.
        final = c.call("jobs.get", id=final_id)
        assert final["parent_id"] == pruned_id
        last = json.loads((Path(final["run_dir"]) / "evaluation.json").read_text())
        assert last["parent"]["run_id"] == pid and last["variant"]["params"] == pruned["variant"]["params"]
        assert last["delta"]["size_ratio"] < 0.2  # the chain's target: a fifth of the fine-tune's size at most
        own = json.loads((Path(chain["run_dir"]) / "evaluation.json").read_text())
        assert own["chain"]["label"] == "distilled to 3 layers → pruned 70% with vocabulary → int8 dynamic"
        assert own["variant"] == last["variant"] and own["parent"]["run_id"] == pid
        # The lineage of the chain's model names every stage, back to the fine-tune.
        lineage = c.call("jobs.lineage", id=final_id)
        names = json.dumps(lineage)
        assert all(run in names for run in (pid, student_id, pruned_id, final_id)), lineage

        # Where each variant runs fast: the TensorRT form's CPU latency is flagged, the CPU ones are not.
        static_target = docs["static"]["target"]
        assert static_target["runtime"] == "tensorrt" and not static_target["measured_on_target"]
        assert "not its target runtime" in static_target["note"]
        assert docs["qat"]["target"]["runtime"] == "cpu" and docs["qat"]["target"]["measured_on_target"]
        assert docs["dynamic"]["delta"]["size_ratio"] <= 0.30  # int8 weights: about a quarter of fp32
        assert docs["dynamic"]["agreement"] >= 0.8
        assert docs["static"]["variant"]["size_bytes"] < 0.35 * docs["static"]["parent"]["size_bytes"]
        # Variants ONNX Runtime runs on a CPU start from the transformer optimizer's fused graph.
        results = {name: c.call("jobs.get", id=ids[name])["result"] for name in ("dynamic", "qat")}
        # Dynamic int8 quantizes the packed attention (QAttention); QAT's MultiHeadAttention reads q, k and v,
        # which stay MatMuls quantized one by one.
        assert results["dynamic"]["graph"]["fused"]["Attention"] == 6
        fused = results["qat"]["graph"]["fused"]
        assert fused["MultiHeadAttention"] == 6 and "Attention" not in fused, fused
        assert docs["qat"]["agreement"] >= 0.8

        # Compare: the chain is one row (its stages are not rows of their own).
        view = c.call("compress.variants", id=pid)
        assert view["parent"]["id"] == pid
        assert {v["job"]["id"] for v in view["variants"]} == {*ids.values(), chain_id}
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
