"""SIGKILL of the engine while a fine-tune trains, while it writes a checkpoint, and while an export runs.

Jobs run detached, so they carry on; a new engine re-attaches and follows on from the offset it
committed with the last events it stored: every event once, one train-loss row per step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.training import checkpoint
from tests.conftest import wait_for
from tests.faults.conftest import digits, events_of, file_events, loss_steps, wait_final

pytestmark = pytest.mark.slow


def test_engine_sigkill_during_training_checkpoint_and_export(start_engine, fault_report):
    eng = start_engine(**{checkpoint.FAULT_DELAY_ENV: "1.5"})
    with eng.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=digits(max_steps=60, checkpoint_every=20))
        run_dir = Path(job["run_dir"])
        wait_for(lambda: loss_steps(c, job["id"]), timeout=60, what="a stored step")
    eng.kill()  # 1: mid-training
    killed_at = max(e.get("step", 0) for e in file_events(run_dir))
    eng.restart()
    with eng.client() as c:
        wait_for(lambda: (run_dir / "checkpoints" / ".step-00000040.tmp").is_dir(), timeout=60,
                 what="the step-40 checkpoint being written")
    eng.kill()  # 2: while rank 0 is between writing the checkpoint's files and renaming them
    eng.restart()
    with eng.client() as c:
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-20:]
        steps = loss_steps(c, job["id"])
        stored = events_of(c, job["id"])
    written = file_events(run_dir)
    assert steps == list(range(1, 61))
    assert len(stored) == len(written) and [e["kind"] for e in stored] == [e["kind"] for e in written]
    assert checkpoint.verify(run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text()) is None
    fault_report("1 engine SIGKILL", f"engine killed mid-training (job at step {killed_at})",
                 "job ran on, re-attached, succeeded", "60 loss rows", f"{len(steps)} loss rows")
    fault_report("1 engine SIGKILL", "engine killed mid-checkpoint (step 40)",
                 f"events stored once: {len(stored)} of {len(written)}", f"{len(written)} events",
                 f"{len(stored)} events")

    with eng.client() as c:
        export = c.call("jobs.start", kind="export.model", spec={"source_run": job["id"], "formats": ["onnx"]})
        wait_for(lambda: c.call("jobs.get", id=export["id"])["state"] == "running" and events_of(c, export["id"]),
                 timeout=30, what="the export to start")
    eng.kill()  # 3: mid-export
    eng.restart()
    with eng.client() as c:
        done = wait_final(c, export["id"], timeout=120)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=export["id"])["lines"][-20:]
        stored = events_of(c, export["id"])
    written = file_events(done["run_dir"])
    assert len(stored) == len(written) and stored[-1] == {**stored[-1], "kind": "status", "state": "succeeded"}
    assert (Path(done["run_dir"]) / "export" / "onnx").is_dir()
    fault_report("1 engine SIGKILL", "engine killed mid-export (onnx)", "export succeeded, files + result",
                 f"{len(written)} events", f"{len(stored)} events")
