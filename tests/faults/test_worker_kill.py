"""SIGKILL of training processes: one torchrun worker (restarted by torchrun), and the whole group
while it writes a checkpoint (failed; `latest` still a complete checkpoint; one jobs.resume call
finishes the run). Also a finished checkpoint damaged on disk: found by its checksums, skipped with
a warning the user sees, and the run resumes from the one before."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from engine.training import checkpoint
from tests.conftest import alive, wait_for
from tests.faults.conftest import digits, events_of, kill_tree, loss_steps, wait_final

pytestmark = pytest.mark.slow


def test_killed_worker_is_restarted_by_torchrun_and_resumes(start_engine, fault_report):
    # Moved here from tests/engine/test_finetune.py (the promise in docs/architecture.md).
    eng = start_engine()
    spec = digits(max_steps=120, checkpoint_every=30,
                  distributed={"strategy": "ddp", "nproc": 2, "max_restarts": 1})
    with eng.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        wait_for(lambda: len(loss_steps(c, job["id"])) >= 35, timeout=120, what="35 steps")
        torchrun = psutil.Process(c.call("jobs.get", id=job["id"])["pid"])
        workers = [p for p in torchrun.children(recursive=True) if "engine.recipes.finetune" in " ".join(p.cmdline())]
        assert len(workers) == 2
        os.kill(workers[1].pid, signal.SIGKILL)
        done = wait_final(c, job["id"], timeout=180)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        resumed = events_of(c, job["id"], "resumed")
        assert resumed and resumed[0]["step"] >= 30
        steps = loss_steps(c, job["id"])
    assert steps == list(range(1, 121))  # every step once, re-run steps replaced
    fault_report("2 worker SIGKILL", "rank 1 of 2 killed (max_restarts 1)",
                 f"torchrun restarted the group, resumed at step {resumed[0]['step']}", "120 loss rows",
                 f"{len(steps)} loss rows")


def test_torchrun_group_killed_mid_checkpoint_fails_and_resumes_from_latest(start_engine, fault_report):
    eng = start_engine(**{checkpoint.FAULT_DELAY_ENV: "1.0"})
    spec = digits(max_steps=60, checkpoint_every=20, distributed={"nproc": 1, "max_restarts": 1})
    with eng.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        ckpts = Path(job["run_dir"]) / "checkpoints"
        torn = ckpts / ".step-00000040.tmp"
        wait_for(torn.is_dir, timeout=90, what="the step-40 checkpoint being written")
        pid = c.call("jobs.get", id=job["id"])["pid"]
        tree = kill_tree(pid)  # torchrun and its worker: nothing left to restart anything
        assert len(tree) >= 2
        failed = wait_final(c, job["id"])
        assert failed["state"] == "failed" and "SIGKILL" in failed["error"]["message"]
        # A worker caught in a disk write (uninterruptible) dies when the write returns, which on a busy
        # machine can be just after torchrun's exit has ended the job.
        wait_for(lambda: not any(alive(p.pid) for p in tree), timeout=30, what="every killed process to be gone")
        # `latest` never points at the torn save; it names a checkpoint whose checksums verify.
        assert torn.is_dir() and not (torn / "manifest.json").exists()
        assert (ckpts / "latest").read_text() == "step-00000020"
        assert checkpoint.verify(ckpts / "step-00000020") is None

        c.call("jobs.resume", id=job["id"])  # one call
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        resumed = events_of(c, job["id"], "resumed")
        steps = loss_steps(c, job["id"])
    assert [r["step"] for r in resumed] == [20]
    assert steps == list(range(1, 61))
    assert not torn.exists()  # the torn save is cleared on resume
    fault_report("2 group SIGKILL", "torchrun + worker killed (max_restarts 1)",
                 "failed; jobs.resume from step 20 -> succeeded", "60 loss rows", f"{len(steps)} loss rows")
    fault_report("3 torn checkpoint", "kill between checkpoint files and rename",
                 "latest = step-20 (verified); torn .tmp ignored", "latest complete", "latest complete")


def test_a_damaged_checkpoint_is_skipped_with_a_warning_and_the_previous_one_used(start_engine, fault_report):
    eng = start_engine(**{checkpoint.FAULT_DELAY_ENV: "0.3"})  # slow enough for the stop to land mid-run
    spec = digits(max_steps=80, checkpoint_every=10, keep_checkpoints=3)
    with eng.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        wait_for(lambda: len(loss_steps(c, job["id"])) >= 25, timeout=90, what="25 steps")
        c.call("jobs.stop", id=job["id"])
        assert wait_final(c, job["id"])["state"] == "stopped"
        stop_step = events_of(c, job["id"], "stopped")[0]["step"]
        ckpts = Path(job["run_dir"]) / "checkpoints"
        latest = ckpts / (ckpts / "latest").read_text()
        assert latest.name == f"step-{stop_step:08d}"
        previous = sorted(p.name for p in ckpts.glob("step-*") if p != latest)[-1]
        state = latest / "state.pt"
        data = bytearray(state.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte: same size, wrong checksum
        state.write_bytes(bytes(data))

        c.call("jobs.resume", id=job["id"])
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        warnings = [w["message"] for w in events_of(c, job["id"], "warning")]
        resumed = events_of(c, job["id"], "resumed")
        steps = loss_steps(c, job["id"])
    assert warnings == [f"Skipped checkpoint {latest.name}: state.pt does not match its checksum; "
                        f"resuming from {previous} instead"]
    assert [r["step"] for r in resumed] == [int(previous.split("-")[1])]
    assert steps == list(range(1, 81))
    fault_report("3 damaged checkpoint", f"1 byte flipped in {latest.name}/state.pt",
                 f"warning shown; resumed from {previous}", "80 loss rows", f"{len(steps)} loss rows")
