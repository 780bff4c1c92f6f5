"""Runs across two nodes, both reached through a real sshd on loopback (c10d rendezvous on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES
from engine.launch import node_ctl
from tests.conftest import wait_for
from tests.sshd import free_port

TICKETS = Path(__file__).resolve().parents[2] / "engine" / "resources" / "datasets" / "support_tickets" / "train.jsonl"
pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]


def _trusted_hosts(client, sshd, tmp_path: Path, names=("node-a", "node-b"), **extra) -> None:
    for name in names:
        client.call("hosts.add", host=sshd.host(name, python=sys.executable, workdir=str(tmp_path / name), **extra))
        status = client.call("hosts.check_key", name=name)
        client.call("hosts.trust", name=name, fingerprint=status["fingerprint"])


def _spec(steps: int, nodes: list[dict], port: int | None = None) -> dict:
    return {"task": "text_classification", "method": {"kind": "lora"}, "batch_size": 8, "max_steps": steps,
            "data": {"max_length": 32}, "eval_every": 1000, "checkpoint_every": 8, "memory_every": 4,
            "device": "cpu", "optim": {"lr": 0.002},
            "distributed": {"strategy": "ddp", "nodes": nodes, "rdzv_port": port or free_port()}}


def _kill_leftovers(run_id: str) -> list[int]:
    left = node_ctl.procs({"run_id": run_id})["pids"]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def _wait_state(client, run_id: str, states: tuple[str, ...], timeout: float) -> dict:
    return wait_for(lambda: (j := client.call("jobs.get", id=run_id))["state"] in states and j,
                    timeout=timeout, interval=0.5, what=f"{run_id} to be {states}")


def _steps(client, run_id: str) -> list[int]:
    rows = client.call("jobs.metrics", id=run_id, kind="train", names=["loss"], max_points=100_000)
    return [r["step"] for r in rows["metrics"]] if isinstance(rows, dict) else [r["step"] for r in rows]


def test_two_nodes_over_ssh_train_and_survive_a_dropped_link(engine_proc, sshd, tmp_path):
    client = engine_proc.client(timeout=120)
    _trusted_hosts(client, sshd, tmp_path)
    steps = 16
    # A dataset that lives only on this machine: the engine copies it to each node (sync_data).
    data = tmp_path / "my-tickets.jsonl"
    shutil.copy(TICKETS, data)
    spec = _spec(steps, [{"host": "node-a", "nproc": 1}, {"host": "node-b", "nproc": 1}])
    spec["data"]["path"] = str(data)
    job = client.call("jobs.start", kind="train.finetune", name="two-nodes", spec=spec)
    run_id = job["id"]
    try:
        wait_for(lambda: len(_steps(client, run_id)) >= 4, timeout=240, interval=0.5, what="the first steps")
        # Cut every SSH session the engine has, as a network failure would; training goes on on the nodes.
        assert sshd.drop_connections() >= 1
        wait_for(lambda: len(_steps(client, run_id)) >= 7, timeout=120, interval=0.5, what="steps after the drop")
        # Then the engine itself dies and comes back: it re-attaches to the nodes from nodes.json.
        client.close()
        engine_proc.kill()
        engine_proc.restart()
        client = engine_proc.client(timeout=120)
        done = _wait_state(client, run_id, FINAL_STATES, timeout=300)
        assert done["state"] == "succeeded", done.get("error")
        # Not one step lost across the reconnect: every step 1..steps is stored exactly once.
        assert _steps(client, run_id) == list(range(1, steps + 1))
        losses = [r["value"] for r in client.call("jobs.metrics", id=run_id, kind="train", names=["loss"],
                                                   max_points=100_000)["metrics"]]
        assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
        warnings = [e["data"]["message"] for e in client.call("events.query", topics=[f"run/{run_id}/warning"],
                                                              limit=100)["events"]]
        assert any("Lost the connection" in w for w in warnings), warnings
        assert any("Reconnected" in w for w in warnings), warnings
        # Memory per rank names the hosts; both ranks report.
        memory = client.call("events.query", topics=[f"run/{run_id}/memory"], limit=100)["events"]
        hosts = {r["host"] for e in memory for r in e["data"]["ranks"]}
        assert hosts == {"node-a", "node-b"}, hosts
        run_dir = Path(done["run_dir"])
        nodes = json.loads((run_dir / "nodes.json").read_text())
        assert [n["host"] for n in nodes["nodes"]] == ["node-a", "node-b"]
        assert all(n["exit_code"] == 0 for n in nodes["nodes"])
        # The trained model came back from rank 0's node; each node's log is kept here too.
        assert (run_dir / "model").is_dir() and any((run_dir / "model").iterdir())
        assert (run_dir / "nodes" / "node1-node-b" / "stdout.log").stat().st_size > 0
        assert "[node0-node-a]" in (run_dir / "stdout.log").read_text()
        for node in nodes["nodes"]:
            copied = Path(node["dir"]) / "inputs" / "data-path-my-tickets.jsonl"
            assert copied.read_bytes() == data.read_bytes()
            assert f"path: {copied}" in (Path(node["dir"]) / "spec.yaml").read_text()
        launch = [e["data"]["message"] for e in client.call("events.query", topics=[f"run/{run_id}/launch"],
                                                            limit=100)["events"]]
        assert any(m.startswith("Copying my-tickets.jsonl to node-b") for m in launch), launch
    finally:
        assert _kill_leftovers(run_id) == []


def test_stop_reaches_every_node_leaves_no_process_and_resumes(engine_proc, sshd, tmp_path):
    client = engine_proc.client(timeout=120)
    _trusted_hosts(client, sshd, tmp_path)
    steps = 14
    # Node 0 is this machine, node 1 a host: the host reaches the rendezvous at this machine's address.
    job = client.call("jobs.start", kind="train.finetune", name="stop-me",
                      spec=_spec(steps, [{"host": "local", "nproc": 1}, {"host": "node-a", "nproc": 1}]))
    run_id = job["id"]
    try:
        wait_for(lambda: len(_steps(client, run_id)) >= 3, timeout=240, interval=0.5, what="the first steps")
        assert len(node_ctl.procs({"run_id": run_id})["pids"]) >= 4  # a shell, torchrun and a worker per node
        client.call("jobs.stop", id=run_id)
        done = _wait_state(client, run_id, ("stopped", "failed", "cancelled", "succeeded"), timeout=120)
        assert done["state"] == "stopped", done.get("error")
        wait_for(lambda: not node_ctl.procs({"run_id": run_id})["pids"], timeout=30, interval=0.5,
                 what="every process of the run to end")
        # A graceful stop writes a checkpoint on rank 0's node, and it is copied back here.
        assert (Path(done["run_dir"]) / "checkpoints" / "latest").is_file()
        stopped_at = max(_steps(client, run_id))
        assert stopped_at < steps
        # Resume: every node gets that checkpoint and the run goes on from it to the end.
        client.call("jobs.resume", id=run_id)
        done = _wait_state(client, run_id, FINAL_STATES, timeout=300)
        assert done["state"] == "succeeded", done.get("error")
        assert _steps(client, run_id) == list(range(1, steps + 1))
        info = [e["data"] for e in client.call("events.query", topics=[f"run/{run_id}/run_info"], limit=10)["events"]]
        assert [i["start_step"] for i in info] == [0, stopped_at], info
        # Deleting the run deletes its folders on the hosts too.
        node_dirs = [Path(n["dir"]) for n in json.loads((Path(done["run_dir"]) / "nodes.json").read_text())["nodes"]]
        assert all(d.is_dir() for d in node_dirs)
        deleted = client.call("jobs.delete", id=run_id)
        assert deleted["remote_left"] == [] and deleted["freed_bytes"] > 0
        assert not any(d.exists() for d in node_dirs) and not Path(done["run_dir"]).exists()
    finally:
        assert _kill_leftovers(run_id) == []


def test_bad_nodes_fail_before_anything_starts(engine_proc, sshd, tmp_path):
    client = engine_proc.client(timeout=120)
    _trusted_hosts(client, sshd, tmp_path)
    client.call("hosts.add", host=sshd.host("no-torch", python="/usr/bin/python3", workdir=str(tmp_path / "nt")))
    client.call("hosts.trust", name="no-torch", fingerprint=client.call("hosts.check_key", name="no-torch")["fingerprint"])
    nodes = [{"host": "node-a", "nproc": 1}, {"host": "no-torch", "nproc": 1}]
    job = client.call("jobs.start", kind="train.finetune", spec=_spec(5, nodes))
    done = _wait_state(client, job["id"], ("failed",), timeout=120)
    assert "no-torch cannot run this: torch is not installed" in done["error"]["message"]
    assert "Nothing was started" in done["error"]["hint"]
    assert node_ctl.procs({"run_id": job["id"]})["pids"] == []

    # The rendezvous port is taken on node 0's machine.
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        job = client.call("jobs.start", kind="train.finetune",
                          spec=_spec(5, [{"host": "node-a", "nproc": 1}, {"host": "node-b", "nproc": 1}], port))
        done = _wait_state(client, job["id"], ("failed",), timeout=120)
    assert f"rendezvous port {port} on node-a is in use" in done["error"]["message"]
    assert "rdzv_port" in done["error"]["hint"]
    assert node_ctl.procs({"run_id": job["id"]})["pids"] == []

    # An unknown host name is refused when the run is submitted.
    job = client.call("jobs.start", kind="train.finetune", spec=_spec(5, [{"host": "nowhere", "nproc": 1}]))
    done = _wait_state(client, job["id"], ("failed",), timeout=60)
    assert "No host named 'nowhere'" in done["error"]["message"]
    time.sleep(0.5)
