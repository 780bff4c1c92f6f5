"""Which queued jobs may start now, and why the others wait: pure resource logic, no processes.

The job manager (engine/daemon/jobs.py) turns store records into ``Job`` values, asks ``plan`` what to do,
launches what it says and publishes the reasons. Keeping the decision here makes every rule
testable with plain values (tests/engine/test_queue.py). Policy (docs/queue.md):

- Jobs are considered in queue order (priority, highest first, then queue position).
- A job starts when, on every host it uses, its CPU cores and GPUs are free, and fewer than
  ``max_concurrent`` jobs run. GPUs are exclusive unless ``allow_gpu_sharing``.
- A job that fits the hosts' capacity but must wait holds back what is free of what it needs, so
  later, smaller jobs cannot take it first and starve it (no overtaking on a needed resource).
- A job that can never fit (more than a host has) holds nothing back: it waits with that reason,
  and the jobs behind it start as if it were not there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api.job_terms import EVALUATE, FINETUNE, SYSTEM_PROBE, TRAINING_KINDS

LOCAL = "local"
# Kinds that train (or fine-tune to recover) and so take GPUs when the host has them.


@dataclass(frozen=True)
class Capacity:
    """One host's resources; ``None`` means unknown (not probed): nothing is limited there."""

    cores: int | None
    gpus: int | None


@dataclass(frozen=True)
class Settings:
    max_concurrent: int = 2
    allow_gpu_sharing: bool = False


@dataclass
class Job:
    """A job as the scheduler sees it: its needs per host and, when running, the GPUs it holds."""

    id: str
    cores: dict[str, int] = field(default_factory=dict)  # host -> CPU cores
    gpus: int | dict[str, int] = 0  # host -> GPUs (an int: on this machine)
    held: dict[str, list[int]] = field(default_factory=dict)  # running: host -> GPU indices

    def gpu_need(self) -> dict[str, int]:
        return {LOCAL: self.gpus} if isinstance(self.gpus, int) else dict(self.gpus)


@dataclass
class Plan:
    start: list[tuple[str, dict[str, list[int]]]]  # (job id, host -> GPU indices assigned)
    reasons: dict[str, str]  # queued job id -> why it waits
    never_fits: set[str]
    used: dict[str, dict[str, Any]]  # host -> {cores, gpus: {index: [job ids]}} after starting
    free: dict[str, dict[str, Any]]  # host -> {cores, gpus: [free indices]}


def job_need(kind: str, spec: Mapping[str, Any], capacity: Mapping[str, Capacity]) -> tuple[dict, dict]:
    """(cores per host, GPUs per host) a job of ``kind`` with ``spec`` (a dict) takes while it runs.

    A fine-tune takes one core per process, and one GPU per process on a host with GPUs when its
    device is cuda or auto (auto picks CUDA where there is one). A multi-node run counts only on
    its nodes (``local`` is this machine); the engine's own mirroring of it is negligible. A run on a
    Slurm cluster takes nothing here: Slurm's own queue holds it until its nodes are free.
    A probe only samples and sleeps: no core. Compress, export and evaluate jobs take one core; QAT and
    pruning (they train) and evaluations not set to the CPU also take a GPU where the host has one.
    """
    def host_gpus(host: str) -> int:
        cap = capacity.get(host)
        return (cap.gpus or 0) if cap is not None else 0

    if kind == SYSTEM_PROBE:
        return {}, {}
    if kind != FINETUNE:
        wants = kind in TRAINING_KINDS or (kind == EVALUATE and spec.get("device", "auto") != "cpu")
        gpus = {LOCAL: 1} if wants and host_gpus(LOCAL) > 0 else {}
        return {LOCAL: 1}, gpus
    device = spec.get("device", "auto")
    dist = spec.get("distributed") or {}
    if dist.get("slurm"):
        return {}, {}  # Slurm queues and places it; nothing here is held
    nodes = dist.get("nodes") or []
    per_host: dict[str, int] = {}
    if nodes:
        for node in nodes:
            host = str(node.get("host") or LOCAL)
            per_host[host] = per_host.get(host, 0) + int(node.get("nproc") or 1)
    else:
        per_host[LOCAL] = int(dist.get("nproc") or 1)
    gpus = {h: n for h, n in per_host.items()
            if device == "cuda" or (device == "auto" and host_gpus(h) > 0)}
    return per_host, gpus


def threads_per_process(cpu_limit: int, cores: int, used: int, nproc: int = 1) -> int:
    """The CPU threads each of a job's ``nproc`` processes gets: its share of the ``cpu_limit`` cores the engine
    may use on this machine, by the ``cores`` it asked for among the ``used`` cores of every job running with
    it (itself included). Alone, a job gets every core; two one-core jobs get half each. PyTorch, ONNX Runtime
    and llama.cpp all start one thread per core by default, and pools larger than the cores they get wait on
    each other (engine/threads.py): two busy jobs on 2 cores ran 2 to 10 times slower."""
    share = cpu_limit * max(1, cores) // max(1, used, cores)
    return max(1, share // max(1, nproc))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _where(host: str) -> str:
    return "" if host == LOCAL else f" on {host}"


def _machine(host: str) -> str:
    return "this machine" if host == LOCAL else f"host {host}"


def never_fit_reason(job: Job, capacity: Mapping[str, Capacity], cpu_limit: Mapping[str, int | None]) -> str | None:
    """Why ``job`` can never start with these hosts (None when it could, once resources free)."""
    for host, n in job.cores.items():
        limit = cpu_limit.get(host)
        if limit is not None and n > limit:
            return (f"needs {_plural(n, 'CPU core')}{_where(host)} but {_machine(host)} allows {limit}; "
                    f"it cannot start until the spec or the core limit changes")
    for host, n in job.gpu_need().items():
        cap = capacity.get(host)
        have = None if cap is None else cap.gpus
        if have is not None and n > have:
            return (f"needs {_plural(n, 'GPU')}{_where(host)} but {_machine(host)} has {have}; "
                    f"it cannot start until the spec or the machine changes")
    return None


def plan(running: Iterable[Job], queued: Iterable[Job], capacity: Mapping[str, Capacity],
         settings: Settings, cpu_limit: Mapping[str, int | None] | None = None) -> Plan:
    """What to start now (in order) and why each other queued job waits.

    ``running``: jobs holding resources (running or stopping), with ``held`` GPUs. ``queued``: in
    run order. ``capacity``: per host. ``cpu_limit``: cores the scheduler may hand out per host
    (default: the capacity's cores; the user may set fewer, or more, for this machine).
    """
    limits: dict[str, int | None] = {h: c.cores for h, c in capacity.items()}
    limits.update(cpu_limit or {})
    running = list(running)
    cores_used: dict[str, int] = {}
    gpu_users: dict[str, dict[int, list[str]]] = {h: {i: [] for i in range(c.gpus or 0)}
                                                  for h, c in capacity.items()}
    for job in running:
        for host, n in job.cores.items():
            cores_used[host] = cores_used.get(host, 0) + n
        for host, idx in job.held.items():
            users = gpu_users.setdefault(host, {})
            for i in idx:
                users.setdefault(i, []).append(job.id)
    slots = settings.max_concurrent - len(running)
    held_cores: dict[str, int] = {}  # kept back for waiting jobs ahead in the queue
    held_gpus: dict[str, set[int]] = {}
    held_slots = 0
    start: list[tuple[str, dict[str, list[int]]]] = []
    reasons: dict[str, str] = {}
    never: set[str] = set()

    def free_cores(host: str) -> int | None:
        limit = limits.get(host)
        if limit is None:
            return None
        return max(0, limit - cores_used.get(host, 0) - held_cores.get(host, 0))

    def free_gpus(host: str) -> list[int]:
        users = gpu_users.get(host, {})
        held = held_gpus.get(host, set())
        if settings.allow_gpu_sharing:
            # Shared: every GPU may take another job; the least used first.
            return sorted((i for i in users if i not in held), key=lambda i: (len(users[i]), i))
        return [i for i in sorted(users) if not users[i] and i not in held]

    for job in queued:
        why = never_fit_reason(job, capacity, limits)
        if why is not None:
            reasons[job.id] = why
            never.add(job.id)
            continue
        waits: list[str] = []
        if slots - held_slots <= 0:
            waits.append(f"{_plural(len(running), 'job')} already running (limit {settings.max_concurrent})"
                         + (f", {held_slots} held for jobs ahead" if held_slots else ""))
        for host, n in job.cores.items():
            free = free_cores(host)
            if free is not None and n > free:
                text = f"waiting for {_plural(n, 'CPU core')}{_where(host)} ({free} free"
                text += f", {held_cores[host]} held for jobs ahead)" if held_cores.get(host) else ")"
                waits.append(text)
        assign: dict[str, list[int]] = {}
        for host, n in job.gpu_need().items():
            if capacity.get(host) is None or capacity[host].gpus is None:
                continue  # unknown host: torchrun there picks its devices
            free = free_gpus(host)
            if n <= len(free):
                assign[host] = free[:n]
                continue
            busy = [f"GPU {i}{_where(host)} is used by {', '.join(users)}"
                    for i, users in sorted(gpu_users.get(host, {}).items()) if users]
            text = f"waiting for {_plural(n, 'GPU')}{_where(host)} ({len(free)} free"
            if held_gpus.get(host):
                text += f", {len(held_gpus[host])} held for jobs ahead"
            waits.append(text + ")" + (": " + "; ".join(busy) if busy else ""))
        if not waits:
            start.append((job.id, assign))
            slots -= 1
            for host, n in job.cores.items():
                cores_used[host] = cores_used.get(host, 0) + n
            for host, idx in assign.items():
                for i in idx:
                    gpu_users[host][i].append(job.id)
            running.append(job)
            continue
        reasons[job.id] = "; ".join(waits)
        # Keep back what is free of what it needs, so it is first in line for the rest.
        if slots - held_slots > 0:
            held_slots += 1
        for host, n in job.cores.items():
            free = free_cores(host)
            if free is not None:
                held_cores[host] = held_cores.get(host, 0) + min(n, free)
        for host, n in job.gpu_need().items():
            if not settings.allow_gpu_sharing:
                held_gpus.setdefault(host, set()).update(free_gpus(host)[:n])

    used = {h: {"cores": cores_used.get(h, 0), "gpus": {str(i): u for i, u in gpu_users.get(h, {}).items() if u}}
            for h in set(capacity) | set(cores_used)}
    free = {h: {"cores": (None if limits.get(h) is None else max(0, limits[h] - cores_used.get(h, 0))),
                "gpus": [i for i, u in sorted(gpu_users.get(h, {}).items()) if not u]}
            for h in set(capacity) | set(cores_used)}
    return Plan(start=start, reasons=reasons, never_fits=never, used=used, free=free)
