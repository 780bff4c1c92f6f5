"""Fine-tunes on a real Slurm cluster on this machine (tests/slurm.py): submitted with sbatch, held back
in the queue, followed, stopped with scancel, resumed, cancelled; the engine's view of each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES
from engine.launch import node_ctl
from tests.conftest import wait_for
from tests.remote.test_multinode import _kill_leftovers, _steps, _wait_state
from tests.slurm import NODE, PARTITION

pytestmark = [pytest.mark.timeout(480), pytest.mark.slow]


def _spec(steps: int, **slurm) -> dict:
    return {"task": "text_classification", "method": {"kind": "lora"}, "batch_size": 8, "max_steps": steps,
            "data": {"max_length": 32}, "eval_every": 1000, "checkpoint_every": 4, "memory_every": 4,
            "device": "cpu", "optim": {"lr": 0.002},
            "distributed": {"strategy": "ddp", "nproc": 2, "slurm": {"cluster": "local", **slurm}}}


def _cluster(client, run_id: str) -> dict:
    return client.call("jobs.get", id=run_id).get("cluster") or {}


def test_slurm_run_waits_in_the_queue_stops_resumes_and_cancels(slurm, engine_proc):
    client = engine_proc.client(timeout=120)
    info = client.call("hosts.slurm", name="local")
    part = next(p for p in info["partitions"] if p["name"] == PARTITION)
    assert part["default"] and part["up"] and part["nodes"] == 1 and part["cpus_per_node"] == 2, info
    assert part["max_minutes"] == 60 and info["version"].startswith("slurm"), info

    # What cannot fit the partition is refused before anything is submitted, with the reason.
    bad = client.call("jobs.start", kind="train.finetune", name="too-big", spec=_spec(4, nodes=3))
    failed = _wait_state(client, bad["id"], FINAL_STATES, timeout=60)
    assert failed["state"] == "failed" and "3 nodes asked for, partition debug has 1" in failed["error"]["message"]
    assert "Nothing was submitted" in failed["error"]["hint"] and slurm.queue() == []

    # Another user's job holds both CPUs: the run waits in Slurm's queue, and Runs says why.
    blocker = slurm.run("sbatch", "--parsable", "-c", "2", "--output", str(slurm.root / "log" / "blocker.out"),
                        "--wrap", "sleep 600").strip()
    steps = 12
    job = client.call("jobs.start", kind="train.finetune", name="on-slurm", spec=_spec(steps, cpus_per_node=2))
    run_id = job["id"]
    try:
        pending = wait_for(lambda: (c := _cluster(client, run_id)).get("reason") == "Resources" and c,
                           timeout=60, interval=0.5, what="the run pending for resources")
        assert pending["state"] == "PENDING" and pending["position"] == 1, pending
        assert pending["reason_text"] == "waiting for free nodes, CPUs or GPUs"
        assert client.call("jobs.get", id=run_id)["state"] == "running"  # Ember's side: handed to Slurm
        slurm_id = pending["job_id"]
        assert slurm.queue() == [blocker, slurm_id] or sorted(slurm.queue()) == sorted([blocker, slurm_id])

        slurm.run("scancel", blocker)
        wait_for(lambda: len(_steps(client, run_id)) >= 5, timeout=240, interval=0.5, what="the first steps")
        running = _cluster(client, run_id)
        assert running["state"] == "RUNNING" and running["nodelist"] == NODE, running
        client.call("jobs.stop", id=run_id)  # scancel --signal=TERM: the ranks save a checkpoint and end
        stopped = _wait_state(client, run_id, FINAL_STATES, timeout=120)
        assert stopped["state"] == "stopped", stopped.get("error")
        assert slurm_id not in slurm.queue()
        done_before = _steps(client, run_id)
        assert 5 <= len(done_before) < steps
        run_dir = Path(stopped["run_dir"])
        assert any((run_dir / "checkpoints").iterdir())
        script = (run_dir / "node0" / "slurm.sbatch").read_text()
        assert "#SBATCH --cpus-per-task=2" in script and "--nproc-per-node=2" in script

        # Resume: a new Slurm job continues from the checkpoint; no step is lost or repeated.
        client.call("jobs.resume", id=run_id)
        done = _wait_state(client, run_id, FINAL_STATES, timeout=300)
        assert done["state"] == "succeeded", done.get("error")
        assert _steps(client, run_id) == list(range(1, steps + 1))
        second = _cluster(client, run_id)
        assert second["job_id"] != slurm_id and second["state"] == "COMPLETED", second
        assert (run_dir / "model").is_dir() and any((run_dir / "model").iterdir())
        nodes = json.loads((run_dir / "nodes.json").read_text())
        assert nodes["nodes"][0]["job_id"] == second["job_id"] and nodes["nodes"][0]["exit_code"] == 0
        memory = client.call("events.query", topics=[f"run/{run_id}/memory"], limit=10)["events"]
        assert {r["host"] for e in memory for r in e["data"]["ranks"]} == {NODE}  # srun's node names the ranks
    finally:
        assert _kill_leftovers(run_id) == []

    # Cancel while running: scancel ends every process of the job; nothing stays in Slurm's queue.
    job = client.call("jobs.start", kind="train.finetune", name="cancel-me", spec=_spec(200))
    run_id = job["id"]
    try:
        wait_for(lambda: len(_steps(client, run_id)) >= 1, timeout=240, interval=0.5, what="a first step")
        client.call("jobs.cancel", id=run_id)
        cancelled = _wait_state(client, run_id, FINAL_STATES, timeout=120)
        assert cancelled["state"] == "cancelled", cancelled
        wait_for(lambda: slurm.queue() == [], timeout=60, interval=0.5, what="Slurm's queue to empty")
        wait_for(lambda: node_ctl.procs({"run_id": run_id})["pids"] == [], timeout=60, interval=0.5,
                 what="the run's processes to end")
    finally:
        assert _kill_leftovers(run_id) == []
