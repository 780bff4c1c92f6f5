"""CUDA-only paths: autocast, GradScaler, NCCL, QLoRA, CUDA memory events.

Skipped without a GPU; on a GPU machine: ``pytest -m gpu`` (or scripts/gpu_check.sh).
"""

import importlib.util

import pytest

from tests.engine.test_finetune import digits_spec, events_of, wait_final

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_cuda_trains_and_reports_cuda_memory(engine_proc, precision):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune",
                     spec=digits_spec(device="cuda", precision=precision, max_steps=80, eval_every=80))
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        assert events_of(c, job["id"], "eval")[-1]["metrics"]["accuracy"] > 0.9
        ranks = events_of(c, job["id"], "memory")[-1]["ranks"]
        assert ranks[0]["device"] == "cuda:0"
        assert ranks[0]["allocated"] > 0 and ranks[0]["peak"] >= ranks[0]["allocated"]


def test_fp16_grad_scaler_state_is_checkpointed(engine_proc, tmp_path):
    import torch

    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune",
                     spec=digits_spec(device="cuda", precision="fp16", max_steps=20, checkpoint_every=10))
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded"
    saved = torch.load(f"{done['run_dir']}/checkpoints/step-00000020/trainer.pt", weights_only=False)
    assert "scaler" in saved and saved["scaler"]["scale"] > 0


@pytest.mark.skipif("gpu_count() < 2", reason="NCCL across processes needs 2 GPUs")
def test_ddp_over_nccl(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune",
                     spec=digits_spec(device="cuda", distributed={"strategy": "ddp", "nproc": 2}))
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        assert {r["device"] for r in events_of(c, job["id"], "memory")[-1]["ranks"]} == {"cuda:0", "cuda:1"}


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="QLoRA needs bitsandbytes")
def test_qlora_on_the_tiny_causal_lm(engine_proc):
    spec = {"task": "causal_lm", "device": "cuda", "precision": "bf16", "method": {"kind": "qlora"},
            "batch_size": 8, "max_steps": 30, "eval_every": 30, "optim": {"lr": 0.002}}
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        losses = [e["loss"] for e in events_of(c, job["id"], "train")]
        assert losses[-1] < losses[0]
