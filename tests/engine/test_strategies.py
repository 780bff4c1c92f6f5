"""MiniLM + LoRA on the built-in support tickets, on 2 CPU processes, with each strategy."""

import os

import pytest

from tests.conftest import wait_for
from tests.engine.test_finetune import events_of, train_losses, wait_final

pytestmark = pytest.mark.slow


def minilm_spec(distributed, steps=40):
    return {"task": "text_classification", "method": {"kind": "lora", "lora_r": 8, "lora_alpha": 16},
            "distributed": {"nproc": 2, **distributed}, "batch_size": 16, "max_steps": steps, "eval_every": steps,
            "checkpoint_every": steps // 2, "data": {"max_length": 64}, "optim": {"lr": 0.002}}


# ZeRO-2 runs on one process below; on two, DeepSpeed's engine, its process group and its checkpoints are
# those of ZeRO-3, which also shards the parameters (and is stopped and resumed here).
@pytest.mark.timeout(900)  # two processes each, DeepSpeed's CPU Adam compiled on first use: minutes when busy
# DDP with LoRA on two processes is the wizard's default run: tests/app/test_end_to_end.py trains, stops and
# resumes it.
# FSDP2 stops, resumes from its distributed checkpoint and ends; that it learns (LoRA, FSDP2 alone and x TP, on
# the same batches as one process) is tests/engine/test_parallel.py's, so its run here is shorter.
@pytest.mark.parametrize(("distributed", "steps"), [
    ({"strategy": "fsdp"}, 20),
    ({"strategy": "deepspeed", "zero_stage": 3}, 40),
], ids=["fsdp", "zero3"])
def test_minilm_lora_learns_with_every_strategy(engine_proc, distributed, steps):
    """Each is also stopped and resumed from its own (sharded) checkpoint format on the way."""
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=minilm_spec(distributed, steps))
        wait_for(lambda: len(events_of(c, job["id"], "train")) >= 5, timeout=300, what="5 steps")
        c.call("jobs.stop", id=job["id"])
        assert wait_final(c, job["id"])["state"] == "stopped"
        stop_step = events_of(c, job["id"], "stopped")[0]["step"]
        c.call("jobs.resume", id=job["id"])
        done = wait_final(c, job["id"], timeout=900)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        info = events_of(c, job["id"], "run_info")[0]
        assert info["world_size"] == 2 and info["strategy"] == distributed["strategy"]
        assert info["trainable_params"] < info["total_params"] / 50  # LoRA trains a small fraction
        losses = list(train_losses(c, job["id"]).values())
        assert len(losses) == steps and all(loss == loss for loss in losses)  # every step once, none NaN
        if steps >= 40:
            assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5
            accuracy = events_of(c, job["id"], "eval")[-1]["metrics"]["accuracy"]
            baseline = info["data"]["majority_baseline"]
            assert accuracy > baseline + 0.25, (accuracy, baseline)
        checkpoints = [e["step"] for e in events_of(c, job["id"], "checkpoint")]
        assert events_of(c, job["id"], "resumed")[0]["step"] == stop_step < steps // 2
        assert checkpoints == [stop_step, steps // 2, steps]
    layout = {"fsdp": "dcp", "deepspeed": "deepspeed"}[distributed["strategy"]]
    assert os.path.isdir(os.path.join(done["run_dir"], "checkpoints", f"step-{steps:08d}", layout))


def test_deepspeed_runs_on_a_single_process(engine_proc):
    """One process has no process group of torchrun's making; DeepSpeed still needs one."""
    spec = {"task": "causal_lm", "method": {"kind": "full"}, "distributed": {"strategy": "deepspeed", "zero_stage": 2},
            "batch_size": 4, "max_steps": 3, "eval_every": 3, "checkpoint_every": 3, "data": {"max_length": 64}}
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        done = wait_final(c, job["id"], timeout=600)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        info = events_of(c, job["id"], "run_info")[0]
        assert info["world_size"] == 1 and info["strategy"] == "deepspeed"
        assert sorted(train_losses(c, job["id"])) == [1, 2, 3]
