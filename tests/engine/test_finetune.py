"""Real fine-tunes through the engine: torchrun, strategies, stop/resume, worker restarts, NaN."""

import os
import time

import psutil
import pytest

from engine.api.job_terms import FINAL_STATES
from tests.conftest import wait_for

pytestmark = pytest.mark.slow


def digits_spec(**overrides):
    spec = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 32, "max_steps": 60,
            "eval_every": 60, "checkpoint_every": 20, "optim": {"lr": 0.003}}
    spec.update(overrides)
    return spec


def wait_final(c, job_id, timeout=240):
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j, timeout=timeout,
                    interval=0.2, what=f"job {job_id} to end")


def events_of(c, job_id, kind):
    evs = c.call("events.query", topics=[f"run/{job_id}/{kind}"], limit=100_000)["events"]
    return [e["data"] for e in evs]


def train_losses(c, job_id):
    return {m["step"]: m["value"] for m in c.call("jobs.metrics", id=job_id, kind="train")["metrics"]
            if m["name"] == "loss"}


def test_digits_cnn_trains_through_the_engine(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=digits_spec(), name="digits")
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-20:]
        evals = events_of(c, job["id"], "eval")
        assert evals[-1]["metrics"]["accuracy"] > 0.9
        losses = train_losses(c, job["id"])
        assert sorted(losses) == list(range(1, 61))
        assert sum(list(losses.values())[-10:]) < sum(list(losses.values())[:10])
        train = events_of(c, job["id"], "train")[-1]
        for key in ("lr", "grad_norm", "samples_per_s", "step_time_s", "data_wait_frac", "eta_s", "progress"):
            assert key in train
        assert events_of(c, job["id"], "memory")[0]["ranks"][0]["rss"] > 0
        assert os.path.exists(os.path.join(done["run_dir"], "model", "weights.safetensors"))


def test_stop_then_resume_gives_the_same_losses_as_an_uninterrupted_run(engine_proc):
    spec = digits_spec(max_steps=40, eval_every=100, checkpoint_every=100)
    with engine_proc.client() as c:
        straight = c.call("jobs.start", kind="train.finetune", spec=spec, name="straight")
        interrupted = c.call("jobs.start", kind="train.finetune", spec=spec, name="interrupted")
        wait_for(lambda: len(events_of(c, interrupted["id"], "train")) >= 8, timeout=120, what="8 steps")
        c.call("jobs.stop", id=interrupted["id"])
        stopped = wait_final(c, interrupted["id"])
        assert stopped["state"] == "stopped"
        stop_step = events_of(c, interrupted["id"], "stopped")[0]["step"]
        assert 8 <= stop_step < 40
        c.call("jobs.resume", id=interrupted["id"])
        assert wait_final(c, interrupted["id"])["state"] == "succeeded"
        assert wait_final(c, straight["id"])["state"] == "succeeded"
        assert events_of(c, interrupted["id"], "resumed")[0]["step"] == stop_step
        a, b = train_losses(c, straight["id"]), train_losses(c, interrupted["id"])
    assert sorted(b) == list(range(1, 41))
    assert [b[s] for s in range(stop_step + 1, 41)] == [a[s] for s in range(stop_step + 1, 41)]


class Recorder:
    """Stands in for the rank context: collects what rank 0 would write to events.jsonl."""

    stop_requested = False

    def __init__(self):
        self.events = []

    def emit(self, kind, **data):
        self.events.append({"kind": kind, **data})

    def log(self, message):
        pass


@pytest.fixture
def nan_at_step_3(monkeypatch):
    """The task's loss turns NaN on the third optimizer step (as an exploding run's would)."""
    from engine.tasks import image_classification as task

    real, calls = task.forward, {"n": 0}

    def forward(model, batch):
        loss, stats = real(model, batch)
        calls["n"] += model.training  # the FLOP count for MFU runs one forward in eval mode first
        return (loss * float("nan") if calls["n"] == 3 else loss), stats

    monkeypatch.setattr(task, "forward", forward)


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_nan_loss_is_reported_with_its_step(ember_home, tmp_path, nan_at_step_3, policy):
    import math

    from engine.api.train_spec import TrainSpec
    from engine.trainer.loop import Trainer
    from engine.training import dist
    from engine.training.context import JobFailed

    spec = TrainSpec.model_validate(digits_spec(max_steps=6, eval_every=100, checkpoint_every=100, nan_policy=policy))
    rec = Recorder()
    trainer = Trainer(spec, dist.World(0, 0, 1, "cpu", "test"), rec, tmp_path / "run")
    if policy == "stop":
        with pytest.raises(JobFailed) as exc:
            trainer.run()
        assert str(exc.value) == "The loss became NaN or infinite at step 3"
        assert "optim.lr" in exc.value.hint
        return
    assert trainer.run() == "succeeded"
    warnings = [e for e in rec.events if e["kind"] == "warning"]
    assert [w["step"] for w in warnings] == [3]
    assert warnings[0]["message"] == "Skipped step 3: the loss was NaN or infinite"
    assert [e["step"] for e in rec.events if e["kind"] == "train"] == [1, 2, 4, 5, 6]
    assert all(math.isfinite(p.detach().sum().item()) for p in trainer.model.parameters())


def test_cancel_kills_every_torchrun_worker(engine_proc):
    spec = digits_spec(max_steps=10_000, distributed={"strategy": "ddp", "nproc": 2})
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        wait_for(lambda: events_of(c, job["id"], "train"), timeout=120, what="a step")
        torchrun = psutil.Process(c.call("jobs.get", id=job["id"])["pid"])
        # torchrun's workers are forked by the warm server (engine/launch/forked_worker.py): found by command line.
        workers = [p for p in psutil.process_iter(["cmdline"]) if p.pid != torchrun.pid
                   and job["run_dir"] in " ".join(p.info["cmdline"] or []) and "engine.recipes.finetune" in " ".join(p.info["cmdline"])]
        assert len(workers) >= 2, workers
        tree = [torchrun, *torchrun.children(recursive=True), *workers]
        c.call("jobs.cancel", id=job["id"])
        assert wait_final(c, job["id"])["state"] == "cancelled"
        time.sleep(0.5)
        assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_inputs_are_checked_before_launch(engine_proc, tmp_path):
    missing = tmp_path / "nowhere"
    with engine_proc.client() as c:
        ok = c.call("jobs.check", kind="train.finetune", spec=digits_spec())
        assert ok == {"issues": []}
        bad = c.call("jobs.check", kind="train.finetune",
                     spec=digits_spec(data={"path": str(missing)}))
        assert bad["issues"] and str(missing) in bad["issues"][0]["file"] + bad["issues"][0]["message"]
        spec_error = c.call("jobs.check", kind="train.finetune", spec={"batch_size": 0})
        assert spec_error["issues"][0]["message"].startswith("batch_size: ")


def test_early_stopping_ends_the_run_when_the_metric_stalls(ember_home, tmp_path):
    from engine.api.train_spec import TrainSpec
    from engine.trainer.loop import Trainer
    from engine.training import dist

    spec = TrainSpec.model_validate(digits_spec(
        max_steps=100, eval_every=5, checkpoint_every=100, optim={"lr": 1e-9},
        early_stopping={"metric": "accuracy", "mode": "max", "patience": 1}))
    rec = Recorder()
    assert Trainer(spec, dist.World(0, 0, 1, "cpu", "test"), rec, tmp_path / "run").run() == "succeeded"
    assert [e["step"] for e in rec.events if e["kind"] == "eval"] == [5, 10]
    assert [e["step"] for e in rec.events if e["kind"] == "early_stop"] == [10]
    assert [e["step"] for e in rec.events if e["kind"] == "checkpoint"] == [10]


def test_out_of_memory_is_explained_with_concrete_suggestions():
    import torch

    from engine.recipes.finetune import describe_failure

    message, hint = describe_failure(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert message == "Out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"
    for suggestion in ("smaller batch_size", "grad_accum", "lora", "zero_stage 3", "activation_checkpointing"):
        assert suggestion in hint


def test_the_recipe_runs_by_hand_under_torchrun(ember_home, tmp_path):
    import subprocess
    import sys

    import yaml

    from tests.conftest import ROOT

    config = tmp_path / "spec.yaml"
    config.write_text(yaml.safe_dump({"kind": "train.finetune", "spec": digits_spec(
        max_steps=10, eval_every=10, checkpoint_every=10, distributed={"strategy": "ddp", "nproc": 2})}))
    run_dir = tmp_path / "by-hand"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "engine.recipes.finetune", "--config", str(config), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (run_dir / "model" / "weights.safetensors").is_file()
    assert (run_dir / "checkpoints" / "latest").read_text() == "step-00000010"
    assert '"state":"succeeded"' in (run_dir / "events.jsonl").read_text().splitlines()[-1]


def test_tiny_causal_lm_loss_decreases(engine_proc):
    spec = {"task": "causal_lm", "method": {"kind": "full"}, "batch_size": 8, "max_steps": 40, "eval_every": 20,
            "checkpoint_every": 40, "optim": {"lr": 0.003}}
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        losses = list(train_losses(c, job["id"]).values())
        assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
        evals = [e["metrics"] for e in events_of(c, job["id"], "eval")]
        assert evals[-1]["perplexity"] < evals[0]["perplexity"]
        assert events_of(c, job["id"], "train")[-1]["tokens_per_s"] > 0


def test_augmentation_preview_through_the_protocol(engine_proc):
    import base64

    spec = digits_spec(data={"augment": {"random_resized_crop": True, "horizontal_flip": True, "color_jitter": 0.3}})
    # The first preview imports torchvision in the engine: seconds, or more than 30 on a loaded two-core machine.
    with engine_proc.client(timeout=120) as c:
        out = c.call("data.preview", spec=spec, n=6)
        assert out["issues"] == [] and len(out["samples"]) == 6
        assert {s["label"] for s in out["samples"]} <= {str(d) for d in range(10)}
        assert all(base64.b64decode(s["png_base64"]).startswith(b"\x89PNG") for s in out["samples"])
        text = c.call("data.preview", spec={"task": "text_classification"})
        assert text["samples"] == [] and "image tasks" in text["issues"][0]["message"]


@pytest.mark.parametrize("spec", [
    {"task": "text_classification", "method": {"kind": "prompt_tuning", "num_virtual_tokens": 8},
     "grad_accum": 2, "batch_size": 8, "data": {"max_length": 48}, "optim": {"lr": 0.01}},
    {"task": "image_classification", "method": {"kind": "lora", "lora_r": 4}, "precision": "bf16",
     "activation_checkpointing": True, "batch_size": 32, "optim": {"lr": 0.003}},
    {"task": "causal_lm", "method": {"kind": "lora"}, "batch_size": 8,
     "optim": {"optimizer": "sgd", "lr": 0.05, "schedule": "cosine", "warmup_steps": 3}},
    {"task": "causal_lm", "method": {"kind": "full"}, "activation_checkpointing": True, "batch_size": 8,
     "optim": {"lr": 0.003, "schedule": "one_cycle"}},
], ids=["text-prompt-tuning-accum", "image-lora-bf16-ckpt", "lm-lora-sgd-cosine", "lm-full-ckpt-onecycle"])
def test_methods_and_options_run_end_to_end(engine_proc, spec):
    import math

    spec = {**spec, "max_steps": 8, "eval_every": 8, "checkpoint_every": 4, "log_every": 1}
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        info = events_of(c, job["id"], "run_info")[0]
        assert info["method"] == spec["method"]["kind"]
        assert 0 < info["trainable_params"] < info["total_params"] or spec["method"]["kind"] == "full"
        train = events_of(c, job["id"], "train")
        assert [e["step"] for e in train] == list(range(1, 9))
        assert all(math.isfinite(e["loss"]) for e in train)
        assert events_of(c, job["id"], "eval")
    ckpt = os.path.join(done["run_dir"], "checkpoints", "step-00000008")
    assert os.path.isfile(os.path.join(ckpt, "spec.json")) and os.path.isfile(os.path.join(ckpt, "manifest.json"))


