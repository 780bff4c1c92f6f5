"""Tensor parallelism, pipeline parallelism (each schedule) and FSDP2 x TP on CPU (gloo), real torchrun
processes, the built-in tiny Llama (2 layers, its head tied to its embeddings): every layout's losses match
the run it must equal step for step (fp32), and a checkpoint written on one mesh resumes on another."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.api.specs import SpecError, validate_spec
from engine.launch import local

pytestmark = pytest.mark.slow

# A constant learning rate: a run resumed at step 6 follows the same schedule as one that never stopped.
# Batches of 6: the 40 validation rows end in a short batch, which a pipeline pads to the shape of the others.
BASE = {"task": "causal_lm", "method": {"kind": "full"}, "device": "cpu", "batch_size": 6, "max_steps": 12,
        "eval_every": 6, "checkpoint_every": 6, "keep_checkpoints": 2, "log_every": 1, "memory_every": 10,
        "optim": {"lr": 0.003, "schedule": "constant"}, "generate_eval": {"prompts": 0},
        "data": {"max_length": 64}}
TOLERANCE = 1e-4  # relative, per step


def run(tmp: Path, name: str, nproc: int = 1, resume_from: Path | None = None, check: bool = True,
        **changes) -> dict:
    spec = {**BASE, **changes}
    run_dir = tmp / name
    if resume_from is not None:  # the other layout's step-6 checkpoint, as this run's own
        (run_dir / "checkpoints").mkdir(parents=True)
        shutil.copytree(resume_from, run_dir / "checkpoints" / resume_from.name)
        (run_dir / "checkpoints" / "latest").write_text(resume_from.name)
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump(spec))
    # torchrun and each of its workers forked from the warm server, as the engine starts them (engine/launch).
    launcher = [sys.executable, *local.worker("torch.distributed.run"), "--nproc-per-node", str(nproc)] \
        if nproc > 1 else [sys.executable]
    proc = subprocess.run([*launcher, *local.worker("engine.recipes.finetune"), "--config", str(config),
                           "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    errors = [e for e in events if e["kind"] == "error"]
    assert not check or (proc.returncode == 0 and not errors), (errors, proc.stderr[-3000:])
    return {"dir": run_dir, "events": events,
            "losses": {e["step"]: e["loss"] for e in events if e["kind"] == "train"},
            "info": next((e for e in events if e["kind"] == "run_info"), None)}


def assert_same_losses(reference: dict, other: dict, steps: range) -> None:
    worst = 0.0
    for step in steps:
        a, b = reference["losses"][step], other["losses"][step]
        assert abs(a - b) <= TOLERANCE * abs(a), (step, a, b)
        worst = max(worst, abs(a - b) / abs(a))
    # The figures docs/parallelism.md quotes (pytest -s shows them).
    name, ref = other["dir"].name, reference["dir"].name
    print(f"{name} against {ref}, steps {steps.start}-{steps.stop - 1}: "  # noqa: T201 - the figures
          f"largest relative difference {worst:.1e}")


def assert_same_model(reference: dict, other: dict) -> None:
    """The final model is saved whole, under the names a single process gives it, with the same values."""
    from safetensors.torch import load_file

    whole, split = (load_file(r["dir"] / "model" / "weights.safetensors") for r in (reference, other))
    assert set(whole) == set(split)
    assert max(float((whole[k] - split[k]).abs().max()) for k in whole) < 1e-4


def checkpoint(result: dict, step: int) -> Path:
    return result["dir"] / "checkpoints" / f"step-{step:08d}"


@pytest.mark.timeout(900)
def test_every_layout_matches_its_reference_and_resumes_on_another_mesh(tmp_path):
    single = run(tmp_path, "single")
    assert sorted(single["losses"]) == list(range(1, 13))

    tp = run(tmp_path, "tp2", nproc=2, distributed={"strategy": "fsdp", "nproc": 2, "tensor_parallel": 2})
    assert tp["info"]["mesh"] == {"pp": 1, "dp": 1, "tp": 2, "order": ["pp", "dp", "tp"]}
    assert_same_losses(single, tp, range(1, 13))
    # Both processes saw the same batches: the samples counted are one process's, not twice that.
    assert tp["info"]["n_train"] == single["info"]["n_train"]
    memory = next(e for e in tp["events"] if e["kind"] == "memory")
    assert [(r["rank"], r["pp"], r["dp"], r["tp"]) for r in memory["ranks"]] == [(0, 0, 0, 0), (1, 0, 0, 1)]
    evals = {e["step"]: e["metrics"]["loss"] for e in tp["events"] if e["kind"] == "eval"}
    assert evals[12] == pytest.approx(next(e["metrics"]["loss"] for e in single["events"]
                                           if e["kind"] == "eval" and e["step"] == 12), rel=TOLERANCE)
    assert (checkpoint(tp, 6) / "dcp").is_dir()  # split parameters: a distributed checkpoint

    assert_same_model(single, tp)

    # Stopped at step 6 with 2-way tensor parallelism, resumed on one process.
    resumed = run(tmp_path, "tp2-to-single", resume_from=checkpoint(tp, 6))
    assert next(e for e in resumed["events"] if e["kind"] == "resumed")["step"] == 6
    assert sorted(resumed["losses"]) == list(range(7, 13))
    assert_same_losses(single, resumed, range(7, 13))

    # Two pipeline stages, 1F1B and interleaved 1F1B (GPipe's schedule is covered by the spec and planner
    # tests); the tied head's two gradients are summed across the stages. The 1F1B run splits by measured
    # time instead of parameters: the first process times each part, and both processes cut the model there.
    for schedule in ("1f1b", "interleaved_1f1b"):
        by = "time" if schedule == "1f1b" else "params"
        pp = run(tmp_path, f"pp2-{schedule}", nproc=2, distributed={"nproc": 2, "pipeline_parallel": 2,
                                                                      "pipeline_schedule": schedule,
                                                                      "pipeline_microbatches": 2,
                                                                      "pipeline_split": by})
        assert pp["info"]["mesh"]["pp"] == 2
        stages = pp["info"]["pipeline"]
        assert stages["split_by"] == by and len(stages["stage_costs"]) == len(stages["stages"])
        if by == "time":
            (a, b), (c, e) = stages["stages"]
            assert a == 0 and b == c and e == 2  # contiguous, every layer placed once
            assert all(cost > 0 for cost in stages["stage_costs"])  # seconds measured
        else:
            # Interleaved: four stages on two processes (embeddings, layer 0, layer 1, head), the bubble smaller.
            assert stages["stages"] == ([[0, 0], [0, 1], [1, 2], [2, 2]] if schedule.startswith("interleaved")
                                        else [[0, 1], [1, 2]])
        assert stages["bubble"] == pytest.approx(1 / 5 if schedule.startswith("interleaved") else 1 / 3)
        assert_same_losses(single, pp, range(1, 13))
        assert_same_model(single, pp)
    # The tensor-parallel run's step-6 checkpoint resumed on two pipeline stages (the head's optimizer
    # state found under its tied twin's name).
    resumed = run(tmp_path, "tp2-to-pp2", nproc=2, resume_from=checkpoint(tp, 6),
                  distributed={"nproc": 2, "pipeline_parallel": 2, "pipeline_microbatches": 2})
    assert_same_losses(single, resumed, range(7, 13))

    # Two data-parallel replicas, LoRA: FSDP2 alone, then FSDP2 x TP (2 x 2) on the same batches; and the
    # FSDP2 run's step-6 checkpoint resumed on the 2 x 2 mesh.
    lora = {"method": {"kind": "lora", "lora_r": 8, "lora_alpha": 16}, "optim": {"lr": 0.03, "schedule": "constant"}}
    fsdp = run(tmp_path, "fsdp", nproc=2, distributed={"strategy": "fsdp", "nproc": 2}, **lora)
    two_d = run(tmp_path, "fsdp-x-tp", nproc=4, resume_from=checkpoint(fsdp, 6),
                distributed={"strategy": "fsdp", "nproc": 4, "tensor_parallel": 2}, **lora)
    assert two_d["info"]["mesh"]["dp"] == 2 and two_d["info"]["trainable_params"] == fsdp["info"]["trainable_params"]
    assert sorted(two_d["losses"]) == list(range(7, 13))
    assert_same_losses(fsdp, two_d, range(7, 13))
    first, last = (sum(fsdp["losses"][s] for s in steps) / 4 for steps in (range(1, 5), range(9, 13)))
    assert last < first, (first, last)  # the adapters learn (slowly: a random model, 12 steps)

    # A checkpoint that does not fit (the full model's, for a LoRA run) fails with what to do, not a hang.
    wrong = run(tmp_path, "wrong-checkpoint", resume_from=checkpoint(tp, 6), check=False, **lora)
    (error,) = [e for e in wrong["events"] if e["kind"] == "error"]
    assert error["message"].startswith("Checkpoint step-00000006 does not fit this run: Missing key")
    assert "Resume with the spec it was written with" in error["hint"]


@pytest.mark.parametrize(("changes", "words"), [
    ({"distributed": {"strategy": "fsdp", "nproc": 3, "tensor_parallel": 2}}, "must divide the processes (3)"),
    ({"distributed": {"strategy": "ddp", "nproc": 4, "tensor_parallel": 2}}, "set strategy fsdp"),
    ({"distributed": {"strategy": "deepspeed", "nproc": 2, "tensor_parallel": 2}}, "use strategy fsdp"),
    ({"task": "text_classification", "distributed": {"strategy": "fsdp", "nproc": 2, "tensor_parallel": 2}},
     "applies to causal_lm"),
    ({"method": {"kind": "prompt_tuning"}, "distributed": {"strategy": "fsdp", "nproc": 2, "tensor_parallel": 2}},
     "use full or lora"),
    ({"activation_offload": True}, "in CPU memory already"),
    ({"distributed": {"nproc": 2, "pipeline_parallel": 2, "pipeline_microbatches": 4}},
     "pipeline_microbatches 4 must divide batch_size 6"),
    ({"distributed": {"nproc": 4, "pipeline_parallel": 4, "pipeline_schedule": "interleaved_1f1b",
                      "pipeline_microbatches": 6}, "batch_size": 6},
     "make pipeline_microbatches a multiple of 4"),
    ({"distributed": {"nproc": 2, "pipeline_parallel": 2}, "data": {"packing": True}},
     "data.packing does not combine with pipeline_parallel"),
])
def test_layouts_that_cannot_work_are_refused_with_the_fix(changes, words):
    with pytest.raises(SpecError) as err:
        validate_spec("train.finetune", {**BASE, **changes})
    assert words in str(err.value)


def test_one_replica_split_two_ways_needs_no_data_parallel_strategy():
    spec = validate_spec("train.finetune", {**BASE, "distributed": {"nproc": 2, "tensor_parallel": 2}})
    assert spec.data_parallel() == 1
    spec = validate_spec("train.finetune", {**BASE, "distributed": {"strategy": "fsdp", "nproc": 8,
                                                                    "tensor_parallel": 4}})
    assert spec.data_parallel() == 2


def test_models_that_do_not_split_are_refused_with_the_reason():
    from types import SimpleNamespace

    from engine.strategies.tensor_parallel import problems

    def model(**config):
        return SimpleNamespace(config=SimpleNamespace(**config))

    llama = {"model_type": "llama", "num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 768}
    assert problems(model(**llama), 2) == []
    assert problems(model(**llama), 3) == ["the model's key/value heads (2) cannot be split 3 ways: pick a "
                                           "tensor_parallel that divides 2"]
    (why,) = problems(model(model_type="gpt2"), 2)
    assert "supports Llama-style models" in why and "gpt2" in why


@pytest.mark.gpu
def test_activation_offload_lowers_the_gpus_peak_with_the_same_losses(tmp_path):
    """Sized so that activations dominate: the 64-wide tiny Llama on packed 1024-token rows."""
    sized = {"device": "cuda", "precision": "fp32", "batch_size": 8, "max_steps": 6, "eval_every": 6,
             "checkpoint_every": 6, "memory_every": 1, "data": {"max_length": 1024, "packing": True}}
    kept = run(tmp_path, "kept", **sized)
    moved = run(tmp_path, "offloaded", activation_offload=True, **sized)
    assert moved["info"]["activation_offload"] is True
    assert_same_losses(kept, moved, range(1, 7))

    def peak(result: dict) -> int:
        return max(e["ranks"][0]["peak"] for e in result["events"] if e["kind"] == "memory")

    offloaded = [e["offloaded_bytes"] for e in moved["events"] if e["kind"] == "train"]
    assert min(offloaded) > 0
    assert peak(moved) < 0.7 * peak(kept), (peak(moved), peak(kept))


def test_a_split_by_time_weighs_the_head_above_the_embeddings():
    """Both hold vocabulary x hidden parameters, so a split by parameters weighs them alike; timed, the head's
    matrix product is the slow one and the embeddings' lookup the quick one."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.strategies.pipeline import measure
    from engine.training.pipeline_split import split, stage_costs

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=8192, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    first, layers, last = measure(LlamaForCausalLM(config), rows=4, length=64, device=torch.device("cpu"))
    assert len(layers) == 4 and min(layers) > 0
    assert last > 2 * first, (first, last)
    ranges = split(layers, first, last, 2)
    costs = stage_costs(ranges, [first, *layers, last])
    # The stage with the head gets fewer layers; no other cut has a smaller largest stage.
    assert ranges[1][1] - ranges[1][0] <= ranges[0][1] - ranges[0][0]
    every = [max(stage_costs([(0, k), (k, 4)], [first, *layers, last])) for k in range(5)]
    assert max(costs) == pytest.approx(min(every))
