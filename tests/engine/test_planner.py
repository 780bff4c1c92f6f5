"""The parallelism planner on Llama 3.2 1B and Llama 3.1 8B (their facts measured on the meta device by
scripts/planner_table.py, kept in tests/fixtures/llama_facts.json): pure Python, no model is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.api.train_spec import TrainSpec
from engine.estimate.memory import _estimate, apply_patch
from engine.estimate.planner import plan

GiB = 1 << 30
FACTS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "llama_facts.json").read_text())
SPEC = TrainSpec.model_validate({"task": "causal_lm", "method": {"kind": "full"}, "data": {"max_length": 2048},
                                 "batch_size": 8, "precision": "bf16", "generate_eval": {"prompts": 0}})


def test_the_recommended_layout_fits_is_fastest_and_applies_as_a_valid_spec():
    result = plan(SPEC, FACTS["llama-3.1-8b"], 8, 80 * GiB)
    plans = result["plans"]
    best = plans[0]
    assert best["recommended"] and best["verdict"] == "fits" and best["memory_per_gpu"] < 0.85 * 80 * GiB
    fitting = [p for p in plans if p["verdict"] != "will_not_fit"]
    assert [p["throughput"] for p in fitting] == sorted((p["throughput"] for p in fitting), reverse=True)
    assert result["fitting"] >= len(fitting) and result["considered"] > result["fitting"]
    for p in plans:  # each one click away: the patch gives a spec the engine accepts, with that estimate
        spec = apply_patch(SPEC.model_copy(update={"device": "cuda"}), p["spec_patch"])
        assert spec is not None and spec.world_size() == 8


def test_an_8b_model_needs_its_states_split_and_a_split_model_holds_its_share():
    facts = FACTS["llama-3.1-8b"]
    one = {p["layout"]: p for p in plan(SPEC, facts, 1, 80 * GiB)["plans"]}
    # 8B params x 16 bytes of fp32 weights, gradients and Adam state: 128 GB. On one GPU only DeepSpeed's
    # offload to host RAM fits.
    assert one["1 GPU, activation checkpointing"]["verdict"] == "will_not_fit"
    assert all("in RAM" in name for name, p in one.items() if p["verdict"] != "will_not_fit")
    assert one["1 GPU, ZeRO-2 with the optimizer state in RAM, activation checkpointing"]["verdict"] == "fits"
    machine = {"gpus": [{"name": "H100", "memory_total": 80 * GiB}] * 8, "ram": {"available": 1 << 40}}

    def per_gpu(**distributed) -> dict:
        # fp32: no 16-bit copies of the weights, so the weights are exactly 4 bytes a parameter held
        spec = apply_patch(SPEC.model_copy(update={"device": "cuda", "precision": "fp32"}),
                           {"distributed": {"nproc": 8, **distributed}})
        return max((d for d in _estimate(spec, facts, machine)["devices"] if d["kind"] == "cuda"),
                   key=lambda d: d["total"])["parts"]

    whole = per_gpu(strategy="ddp")
    tp = per_gpu(strategy="fsdp", tensor_parallel=8)
    pp = per_gpu(strategy="fsdp", pipeline_parallel=8, pipeline_microbatches=8)
    # Weights: 32 layers of 218M split 8 ways plus the 1.05B embeddings and head, whole.
    assert tp["weights"] == pytest.approx(4 * (32 * 218_112_000 / 8 + 1_050_673_152), rel=1e-3)
    assert pp["weights"] == pytest.approx(4 * (4 * 218_112_000 + 1_050_673_152), rel=1e-3)
    assert tp["weights"] < whole["weights"] / 4 and pp["activations"] < whole["activations"] / 4


@pytest.mark.parametrize(("gpus", "memory", "expected"), [
    (1, 24, "1 GPU, ZeRO-2 with the optimizer state in RAM, activation checkpointing"),
    (2, 80, "DDP over 2 GPUs"),
])
def test_small_cases_pick_the_simplest_layout_that_fits(gpus, memory, expected):
    best = plan(SPEC, FACTS["llama-3.2-1b"], gpus, memory * GiB)["plans"][0]
    assert best["layout"] == expected and best["verdict"] != "will_not_fit"


def test_tensor_parallelism_stays_within_a_machine():
    result = plan(SPEC, FACTS["llama-3.1-8b"], 16, 80 * GiB, per_node=8)
    splits = [p["spec_patch"]["distributed"]["tensor_parallel"] for p in result["plans"]]
    assert max(splits) <= 8
    assert any("machines" in n for n in result["notes"])
    assert all(p["spec_patch"]["distributed"]["nproc"] == 8 for p in result["plans"])  # per machine


def test_the_estimate_shows_where_a_pipeline_cuts_the_model():
    """Llama 3.1 8B on 4 stages by parameter count: its untied embeddings and head (525M each, as much as 2.4
    layers) leave the first and the last stage fewer layers than the middle ones."""
    from engine.estimate.memory import pipeline_stages

    spec = apply_patch(SPEC.model_copy(update={"device": "cuda"}),
                       {"distributed": {"strategy": "fsdp", "nproc": 4, "pipeline_parallel": 4}})
    cut = pipeline_stages(spec, FACTS["llama-3.1-8b"])
    assert cut["stages"][0][0] == 0 and cut["stages"][-1][1] == 32
    assert all(a[1] == b[0] for a, b in zip(cut["stages"], cut["stages"][1:], strict=False))
    layers = [b - a for a, b in cut["stages"]]
    assert layers[0] < layers[1] and layers[-1] < layers[-2], layers
    assert cut["processes"] == [0, 1, 2, 3] and max(cut["stage_params"]) < 1.2 * min(cut["stage_params"])
    interleaved = apply_patch(spec, {"distributed": {"pipeline_schedule": "interleaved_1f1b"}})
    assert pipeline_stages(interleaved, FACTS["llama-3.1-8b"])["processes"] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert pipeline_stages(SPEC, FACTS["llama-3.1-8b"]) is None  # no pipeline, nothing to show
