"""A fine-tune on a Slurm cluster: sbatch from the login node, srun starts torchrun on every node.

The login node is a host profile reached over SSH (or this machine, ``local``).
The run's folder there (``<workdir>/runs/<run id>/node0``) must be on storage the
compute nodes share, as cluster home folders are; every rank writes into it, and
the engine mirrors its events and log back exactly as for a multi-node run
(engine/launch/multinode.py), so following, re-attaching after an engine restart
and copying the results back are the same code. What differs: the job is started
by ``sbatch``, its liveness is Slurm's (``squeue``, then ``scontrol``), Stop is
``scancel --signal=TERM`` (the steps save a checkpoint and end; a job still
pending is simply removed) and Cancel is ``scancel``. While Slurm holds the job
back, its state, pending reason in words and place in the partition's queue are
reported to the engine (``report``), which shows them in Runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from engine.api.host_spec import LOCAL
from engine.launch.multinode import LaunchError, MultiNodeRun, NodeState
from engine.launch.slurm_ctl import EXIT_FILE
from engine.launch.ssh import RemoteError

TERM_BEFORE_LIMIT_S = 120  # the run is told to save this long before Slurm's time limit ends it
PORT_BASE, PORT_SPAN = 20000, 20000  # each job's rendezvous port, from its job id: two jobs on a node differ


def cluster_host(spec: Any) -> str:
    name = spec.distributed.slurm.cluster
    return LOCAL if name == LOCAL else name


def batch_script(spec: Any, job_id: str, node_dir: str, python: str, env: dict[str, str]) -> str:
    """The sbatch script for ``spec``: one srun task per node, each a torchrun of distributed.nproc workers."""
    d = spec.distributed
    s = d.slurm
    q = shlex.quote
    lines = ["#!/bin/bash", f"#SBATCH --job-name=ember-{job_id}", f"#SBATCH --nodes={s.nodes}",
             # sbatch runs in the run's folder (slurm_ctl submit): the job starts there and its log goes there.
             "#SBATCH --ntasks-per-node=1", "#SBATCH --output=stdout.log", "#SBATCH --open-mode=append"]
    if s.cpus_per_node:
        lines.append(f"#SBATCH --cpus-per-task={s.cpus_per_node}")
    if s.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={s.gpus_per_node}")
    for option, value in (("partition", s.partition), ("account", s.account), ("qos", s.qos)):
        if value:
            lines.append(f"#SBATCH --{option}={value}")
    if s.time_limit:
        lines.append(f"#SBATCH --time={s.time_limit}")
        if s.time_limit * 60 > 2 * TERM_BEFORE_LIMIT_S:
            lines.append(f"#SBATCH --signal=TERM@{TERM_BEFORE_LIMIT_S}")
    lines += ["", "# Written by Ember Studio for this run; resubmitted (with resume) by Resume.",
              f"rm -f {EXIT_FILE}"]
    lines += [f"export {key}={q(value)}" for key, value in sorted(env.items()) if key != "EMBER_NODE_NAME"]
    # The first node hosts the rendezvous, at the address Slurm itself reaches it by (NodeAddr).
    lines += ['head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              'addr=$(scontrol show node "$head" | tr " " "\\n" | sed -n "s/^NodeAddr=//p")',
              'head=${addr:-$head}',
              f"port=$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))"]
    torchrun = [python, "-m", "torch.distributed.run", "--nnodes=$SLURM_JOB_NUM_NODES",
                f"--nproc-per-node={d.nproc}", "--rdzv-backend=c10d", '--rdzv-endpoint="$head:$port"',
                '--rdzv-id="$SLURM_JOB_ID"', f"--max-restarts={d.max_restarts}",
                "-m", "engine.recipes.finetune", "--run-dir", node_dir]
    quoted = " ".join(a if a.startswith("--rdzv") or "$" in a else q(a) for a in torchrun)
    lines += [f"srun --kill-on-bad-exit=1 --ntasks-per-node=1 --export=ALL "
              f"bash -c 'export EMBER_NODE_NAME=${{SLURMD_NODENAME:-$(hostname)}}; exec \"$@\"' ember {quoted}",
              "code=$?", f"echo $code > {EXIT_FILE}.tmp && mv {EXIT_FILE}.tmp {EXIT_FILE}", "exit $code", ""]
    return "\n".join(lines)


class SlurmRun(MultiNodeRun):
    def __init__(self, job_id: str, run_dir: Any, spec: Any, hosts: Any, bus: Any,
                 nodes: list[NodeState] | None = None):
        super().__init__(job_id, run_dir, spec, hosts, bus,
                         nodes if nodes is not None else [NodeState(0, cluster_host(spec), spec.distributed.nproc)])
        self.cluster: dict[str, Any] = {}  # Slurm's view of the job: id, state, reason, position, nodes
        self.report: Callable[[dict[str, Any]], None] | None = None  # the engine's: store and publish it

    def _saved(self) -> dict[str, Any]:
        return {"cluster": self.cluster}

    def _restore(self, doc: dict[str, Any]) -> None:
        self.cluster = doc.get("cluster") or {}

    async def _check_rendezvous(self) -> None:
        """Instead of a port here: does the partition exist, is it up, does the job fit it."""
        s = self.spec.distributed.slurm
        state = self.nodes[0]
        info = await self._ctl(state, "slurm_info", {})
        if info.get("error"):
            raise LaunchError(f"Slurm on {state.host}: {info['error']}", info.get("hint", "") + " Nothing was submitted.")
        parts = {p["name"]: p for p in info["partitions"]}
        name = s.partition or next((p["name"] for p in info["partitions"] if p["default"]), "")
        part = parts.get(name)
        if part is None:
            raise LaunchError(f"Slurm on {state.host} has no partition {name or '(default)'!r}",
                              f"Pick one of {', '.join(sorted(parts)) or 'none'} (slurm.partition). "
                              "Nothing was submitted.")
        problems = []
        if not part["up"]:
            problems.append(f"partition {name} is not up")
        if s.nodes > part["nodes"]:
            problems.append(f"{s.nodes} nodes asked for, partition {name} has {part['nodes']}")
        if s.gpus_per_node > part["gpus_per_node"]:
            problems.append(f"{s.gpus_per_node} GPUs per node asked for, partition {name}'s nodes have "
                            f"{part['gpus_per_node']}")
        if s.cpus_per_node > part["cpus_per_node"] > 0:
            problems.append(f"{s.cpus_per_node} CPUs per node asked for, partition {name}'s nodes have "
                            f"{part['cpus_per_node']}")
        if s.time_limit and part["max_minutes"] and s.time_limit > part["max_minutes"]:
            problems.append(f"time limit {s.time_limit} min is above partition {name}'s {part['max_minutes']} min")
        if problems:
            raise LaunchError(f"The job does not fit Slurm partition {name}: {'; '.join(problems)}",
                              "Change the Slurm settings of the run (or pick another partition). Nothing was submitted.")
        self._cores[state.host] = s.cpus_per_node or part["cpus_per_node"] or 1

    async def _start(self, state: NodeState, spec_text: str) -> None:
        node = self.node(state)
        script = batch_script(self.spec, self.job_id, state.dir, node.python, self._env(state))
        s = self.spec.distributed.slurm
        self.progress(f"Submitting to Slurm on {state.host}: {s.nodes} node(s) x {state.nproc} process(es)")
        try:
            out = await node.ctl("slurm_submit", {"dir": state.dir, "script": script,
                                                  "files": {"spec.yaml": spec_text}})
        except RemoteError as exc:
            raise LaunchError(f"Could not submit to Slurm on {state.host}: {exc}", exc.hint) from None
        if out.get("error"):
            raise LaunchError(f"Slurm refused the job: {out['error']}", out.get("hint", ""))
        state.job_id = str(out["job_id"])
        self._report({"job_id": state.job_id, "state": "PENDING", "host": state.host,
                      "partition": s.partition, "reason": "", "reason_text": "", "position": None})
        self.progress(f"Slurm job {state.job_id} submitted")

    async def _status(self, state: NodeState, node: Any) -> dict[str, Any]:
        out = await node.ctl("slurm_state", {"job_id": state.job_id, "dir": state.dir})
        if out.get("error"):
            raise RemoteError(out["error"], out.get("hint", ""))
        view = {**self.cluster, "state": out["state"], "reason": out.get("reason", ""),
                "reason_text": out.get("reason_text", ""), "position": out.get("position"),
                "nodelist": out.get("nodelist", "")}
        if out.get("partition"):
            view["partition"] = out["partition"]
        was = self.cluster.get("state")
        self._report(view)
        if was == "PENDING" and out["state"] == "RUNNING":
            self.progress(f"Slurm started job {state.job_id} on {out.get('nodelist') or 'its nodes'}")
        return {"running": not out["ended"], "exit_code": out.get("exit_code")}

    def _report(self, view: dict[str, Any]) -> None:
        if view == self.cluster:
            return
        self.cluster = view
        self.save()
        if self.report is not None:
            self.report(dict(view))

    async def signal(self, sig: str) -> None:
        """TERM: the running steps save a checkpoint and end (a pending job is just removed). KILL: scancel."""
        if sig == "KILL":
            self._cancelled = True
        state = self.nodes[0]
        if not state.job_id or state.ended_at is not None:
            return
        pending = self.cluster.get("state") == "PENDING"
        try:
            out = await self.node(state).ctl("slurm_cancel", {"job_id": state.job_id,
                                                              "sig": "KILL" if pending else sig})
        except RemoteError as exc:
            self.warn(f"Could not signal Slurm job {state.job_id} on {state.host}: {exc}", exc.hint)
            return
        if out.get("error"):
            self.warn(f"Could not signal Slurm job {state.job_id}: {out['error']}", out.get("hint", ""))

    def ended(self) -> bool:
        state = self.nodes[0]
        return state.ended_at is not None or not state.job_id
