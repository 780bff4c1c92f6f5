"""``ember queue``: the job queue as the Runs page's Queue panel shows it, and its controls."""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli.client import ensure_engine


def show(q: dict[str, Any]) -> None:
    s = q.get("settings") or {}
    cores = f"{s['cpu_cores']} CPU cores" if s.get("cpu_cores") else "every CPU core"
    print(f"limits: {s.get('max_concurrent')} jobs at once, {cores}, "
          f"GPU sharing {'on' if s.get('allow_gpu_sharing') else 'off'}")
    for host, r in sorted((q.get("resources") or {}).items()):
        free = r.get("free") or {}
        print(f"{host}: {r.get('cpu_limit')} of {r.get('cores')} cores usable, {free.get('cores')} free; "
              f"{len(r.get('gpus') or [])} GPUs, free {free.get('gpus') or []}")
    running = q.get("running") or []
    print(f"running ({len(running)}):" if running else "running: none")
    for j in running:
        print(f"  {j['id']}  {j['name']:<24} {j['kind']}")
    queued = q.get("jobs") or []
    print(f"queued ({len(queued)}), in the order they will run:" if queued else "queued: none")
    for n, j in enumerate(queued, start=1):
        print(f"  {n:>2}. {j['id']}  {j['name']:<24} priority {j['priority']:>4}  {j.get('reason') or ''}")


def cmd_queue(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        if args.queue_action == "move":
            q = c.call("queue.move", id=args.id, to=args.to)
        elif args.queue_action == "priority":
            q = c.call("jobs.prioritize", id=args.id, priority=args.priority)
        elif args.queue_action == "configure":
            params: dict[str, Any] = {}
            if args.max_jobs is not None:
                params["max_concurrent"] = args.max_jobs
            if args.cores is not None:
                params["cpu_cores"] = args.cores
            if args.gpu_sharing is not None:
                params["allow_gpu_sharing"] = args.gpu_sharing == "on"
            q = c.call("queue.configure", **params)
        else:
            q = c.call("queue.get")
    show(q)
    return 0


def add_parser(sub: Any) -> None:
    q = sub.add_parser("queue", help="the job queue: order, wait reasons, resources; move, prioritize, limits")
    qs = q.add_subparsers(dest="queue_action")
    qs.add_parser("list", help="queued and running jobs, why each waits (the default)")
    m = qs.add_parser("move", help="move a queued job")
    m.add_argument("id")
    m.add_argument("to", choices=["top", "up", "down", "bottom"])
    p = qs.add_parser("priority", help="set a queued job's priority (higher runs first; default 0)")
    p.add_argument("id")
    p.add_argument("priority", type=int)
    c = qs.add_parser("configure", help="change the limits (kept across engine restarts)")
    c.add_argument("--max-jobs", type=int, help="jobs running at once")
    c.add_argument("--cores", type=int, help="CPU cores jobs may use on this machine (0: every core)")
    c.add_argument("--gpu-sharing", choices=["on", "off"], help="let two trainings share a GPU")
    q.set_defaults(fn=cmd_queue, queue_action=None)
