"""The job queue's state and controls: order, priorities, settings, and what `queue.get` shows.

engine/daemon/scheduler.py decides (pure); this module reads the store and the machine into the
scheduler's terms, and changes order, priorities and settings in the store (so they survive an
engine restart). engine/daemon/jobs.py calls ``plan_now`` from ``schedule`` and launches what it says.
See docs/queue.md.
"""

from __future__ import annotations

from typing import Any, Protocol

import psutil

from engine.api.job_terms import IN_ENGINE, LIVE_STATES
from engine.api.protocol import INVALID_PARAMS, INVALID_STATE, RpcError
from engine.daemon.scheduler import LOCAL, Capacity, Job, Plan, Settings, job_need, plan
from engine.daemon.store import Store
from engine.estimate import machine


class JobManager(Protocol):
    """What the queue uses of engine/daemon/jobs.py's JobManager (which imports this module)."""

    store: Store
    max_concurrent: int

    def get(self, job_id: str) -> dict[str, Any]: ...


# Keys in the store's settings table.
MAX_CONCURRENT = "queue.max_concurrent"
CPU_CORES = "queue.cpu_cores"
GPU_SHARING = "queue.allow_gpu_sharing"
MOVES = ("top", "up", "down", "bottom")


def _spec_hosts(spec: dict[str, Any]) -> set[str]:
    if isinstance((spec or {}).get("host"), str) and "bind" in spec:
        return {spec["host"]}  # a server on an SSH host (serve.model's host)
    nodes = ((spec or {}).get("distributed") or {}).get("nodes") or []
    return {str(n.get("host") or LOCAL) for n in nodes if isinstance(n, dict)}


def capacity(jm: JobManager, jobs: list[dict[str, Any]]) -> dict[str, Capacity]:
    """This machine's cores and GPUs, and those of every host a job uses (from its last probe)."""
    caps = {LOCAL: Capacity(cores=psutil.cpu_count(logical=True) or 1, gpus=len(machine.gpus()))}
    for host in set().union(*(_spec_hosts(r.get("spec") or {}) for r in jobs)) - {LOCAL}:
        row = jm.store.get_host(host)
        facts = ((row or {}).get("meta") or {}).get("facts") or {}
        cores = facts.get("cpu_count")
        gpus = facts.get("gpus")
        caps[host] = Capacity(cores=int(cores) if isinstance(cores, int) else None,
                              gpus=len(gpus) if isinstance(gpus, list) else None)
    return caps


def settings(jm: JobManager) -> dict[str, Any]:
    """What `queue.get` and `queue.configure` return; cpu_cores None = every core of this machine."""
    return {"max_concurrent": jm.max_concurrent,
            "cpu_cores": jm.store.get_setting(CPU_CORES),
            "allow_gpu_sharing": bool(jm.store.get_setting(GPU_SHARING, False))}


def _job(job: dict[str, Any], caps: dict[str, Capacity]) -> Job:
    cores, gpus = job_need(job["kind"], job.get("spec") or {}, caps)
    held = job.get("gpus")
    if not isinstance(held, dict):
        # Started before the engine recorded GPUs (or on an unknown host): assume the first ones.
        held = {h: list(range(n)) for h, n in gpus.items()}
    return Job(id=job["id"], cores=cores, gpus=gpus, held=held)


def plan_now(jm: JobManager) -> tuple[Plan, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(plan, running runs, queued runs in order, facts) from the store as it is now."""

    # A sweep or chain holds no resources and no slot: its jobs are the ones that wait and run.
    running = [r for r in jm.store.list_jobs(state=LIVE_STATES, limit=100_000, oldest_first=True)
               if r["kind"] not in IN_ENGINE]
    queued = [r for r in jm.store.queued_jobs() if r["kind"] not in IN_ENGINE]
    caps = capacity(jm, running + queued)
    conf = settings(jm)
    cpu_limit = {LOCAL: conf["cpu_cores"] or caps[LOCAL].cores}
    p = plan([_job(r, caps) for r in running], [_job(r, caps) for r in queued], caps,
             Settings(max_concurrent=conf["max_concurrent"], allow_gpu_sharing=conf["allow_gpu_sharing"]),
             cpu_limit)
    facts = {"capacity": {h: {"cores": c.cores, "gpus": c.gpus} for h, c in caps.items()},
             "cpu_limit": cpu_limit, "settings": conf,
             "needs": {r["id"]: job_need(r["kind"], r.get("spec") or {}, caps) for r in running + queued}}
    return p, running, queued, facts


def _entry(job: dict[str, Any], position: int | None, need: tuple[dict, dict], reason: str | None,
           never: bool = False) -> dict[str, Any]:
    cores, gpus = need
    return {"id": job["id"], "kind": job["kind"], "name": job.get("name") or job["kind"], "state": job["state"],
            "created_at": job["created_at"], "started_at": job.get("started_at"), "priority": job.get("priority") or 0,
            "position": position, "need": {"cores": cores, "gpus": gpus}, "gpus": job.get("gpus"),
            "reason": reason, "never_fits": never}


def snapshot(jm: JobManager) -> dict[str, Any]:
    """The `queue.get` reply (also the `queue` topic's event)."""
    p, running, queued, facts = plan_now(jm)
    starting = {job_id for job_id, _ in p.start}
    jobs = [_entry(r, i, facts["needs"][r["id"]],
                   p.reasons.get(r["id"], "starting" if r["id"] in starting else None), r["id"] in p.never_fits)
            for i, r in enumerate(queued)]
    resources = {host: {"cores": cap["cores"], "cpu_limit": facts["cpu_limit"].get(host, cap["cores"]),
                        "gpus": cap["gpus"], "used": p.used.get(host, {"cores": 0, "gpus": {}}),
                        "free": p.free.get(host, {"cores": None, "gpus": []})}
                 for host, cap in facts["capacity"].items()}
    return {"jobs": jobs, "running": [_entry(r, None, facts["needs"][r["id"]], None) for r in running],
            "resources": resources, "settings": facts["settings"]}


def _queued(jm: JobManager, job_id: str) -> dict[str, Any]:
    job = jm.get(job_id)
    if job["state"] != "queued":
        raise RpcError(INVALID_STATE, f"Job {job_id} is {job['state']}; only a queued job has a place in the queue",
                       {"hint": "Priorities and order apply to queued jobs (queue.get lists them)."})
    return job


def _write_order(jm: JobManager, order: list[dict[str, Any]]) -> None:
    """Positions 1..n in this order (priorities already consistent with it)."""
    for i, job in enumerate(order, start=1):
        if job.get("queue_pos") != float(i) or "new_priority" in job:
            fields: dict[str, Any] = {"queue_pos": float(i)}
            if "new_priority" in job:
                fields["priority"] = job["new_priority"]
            jm.store.update_job(job["id"], **fields)


def move(jm: JobManager, job_id: str, to: str) -> None:
    """Move a queued job to the top, up one, down one or to the bottom of the run order.

    The order is priority first: a job moved past one of another priority takes that
    priority (clamped between its new neighbours), so the stored order stays what is shown.
    """
    if to not in MOVES:
        raise RpcError(INVALID_PARAMS, f"Unknown move {to!r}", {"hint": f"Use one of {', '.join(MOVES)}."})
    _queued(jm, job_id)
    order = jm.store.queued_jobs()
    index = next(i for i, r in enumerate(order) if r["id"] == job_id)
    job = order.pop(index)
    target = {"top": 0, "up": max(0, index - 1), "down": min(len(order), index + 1), "bottom": len(order)}[to]
    order.insert(target, job)
    prio = job.get("priority") or 0
    if target > 0:
        prio = min(prio, order[target - 1].get("priority") or 0)
    if target + 1 < len(order):
        prio = max(prio, order[target + 1].get("priority") or 0)
    if prio != (job.get("priority") or 0):
        job["new_priority"] = prio
    _write_order(jm, order)


def prioritize(jm: JobManager, job_id: str, priority: int) -> None:
    """Set a queued job's priority; it goes behind the jobs that already have that priority."""
    _queued(jm, job_id)
    jm.store.update_job(job_id, priority=priority, queue_pos=jm.store.next_queue_pos())
    _write_order(jm, jm.store.queued_jobs())


def configure(jm: JobManager, max_concurrent: int | None, cpu_cores: int | None, gpu_sharing: bool | None,
              fields: set[str]) -> None:
    """Change and persist the queue's settings (only those given; cpu_cores null: every core)."""
    if "max_concurrent" in fields and max_concurrent is not None:
        jm.store.set_setting(MAX_CONCURRENT, max_concurrent)
        jm.max_concurrent = max_concurrent
    if "cpu_cores" in fields:
        jm.store.set_setting(CPU_CORES, cpu_cores or None)
    if "allow_gpu_sharing" in fields and gpu_sharing is not None:
        jm.store.set_setting(GPU_SHARING, gpu_sharing)
