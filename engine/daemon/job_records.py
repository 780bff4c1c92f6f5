"""What the run history shows of a job: its summary, checkpoints, artifacts and lineage.

Everything here reads the store and the run directory; nothing imports torch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from engine.api.job_terms import CHAIN, EVALUATE, EXPORT, FINETUNE
from engine.daemon.chains import stage_ids
from engine.daemon.store import Store


def public(job: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "kind", "name", "state", "created_at", "started_at", "ended_at", "pid", "exit_code",
            "error", "run_dir", "spec", "parent_id", "host", "cluster", "owner", "project")
    return {k: job.get(k) for k in keys}


def summary(store: Store, job: dict[str, Any]) -> dict[str, Any]:
    spec = job.get("spec") or {}
    out: dict[str, Any] = {"task": None, "model": None, "method": None, "strategy": None, "nproc": None,
                           "nodes": [],
                           "best": None, "estimated_peak": job.get("estimated_peak"),
                           "measured_peak": job.get("measured_peak")}
    if job.get("kind") == FINETUNE:
        from engine.api.train_spec import TrainSpec

        try:
            parsed = TrainSpec.model_validate(spec)
        except ValueError:  # a record written by an older version; show what is there
            parsed = None
        if parsed is not None:
            out.update(task=parsed.task, model=parsed.model_name(), method=parsed.method.kind,
                       strategy=parsed.distributed.strategy, nproc=parsed.world_size(),
                       nodes=[n.host for n in parsed.distributed.nodes])
        out["best"] = store.best_metric(job["id"])
    return out


def record(store: Store, job: dict[str, Any]) -> dict[str, Any]:
    """The public job record with its summary: what jobs.list/get and the ``jobs`` topic carry."""
    rec = public(job)
    rec["summary"] = summary(store, job)
    return rec


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    try:
        latest = (root / "latest").read_text(encoding="utf-8").strip()
    except OSError:
        latest = ""
    found = []
    for ckpt in sorted(p for p in root.glob("step-*") if p.is_dir()):
        try:
            step = int(ckpt.name.split("-", 1)[1])
        except ValueError:
            continue
        found.append({"step": step, "path": str(ckpt), "bytes": _tree_bytes(ckpt),
                      "created": ckpt.stat().st_mtime, "latest": ckpt.name == latest,
                      "complete": (ckpt / "manifest.json").is_file()})
    return found


def artifacts(store: Store, job: dict[str, Any]) -> dict[str, Any]:
    job_id = job["id"]
    found = []
    for _seq, _topic, t, data in store.query_events([f"run/{job_id}/artifact"], 0, None, 10_000):
        event = json.loads(data)
        path = Path(event.get("path", ""))
        found.append({"type": event.get("type", ""), "path": str(path), "step": event.get("step"), "t": t,
                      "bytes": _tree_bytes(path) if path.exists() else None, "exists": path.exists()})
    return {"checkpoints": checkpoints(Path(job["run_dir"])), "artifacts": found,
            "parent": job.get("parent_id"), "children": store.child_jobs(job_id),
            "memory": {"estimated": job.get("estimated_peak"), "measured": job.get("measured_peak")}}


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def llm_files(result: dict[str, Any]) -> dict[str, Any]:
    """A language-model export's measured files (Compare's rows): the reference, then one entry per file."""
    files = []
    for fmt, entry in (result.get("formats") or {}).items():
        if not isinstance(entry, dict):
            continue
        for kind, f in (entry["files"] if isinstance(entry.get("files"), dict) else {fmt: entry}).items():
            if isinstance(f, dict) and isinstance(f.get("check"), dict):
                files.append({"format": fmt, "kind": kind, "path": f.get("path"), "bytes": f.get("bytes"),
                              "check": f["check"]})
    return {"reference": result.get("reference"), "files": files, "check_rows": result.get("check_rows")}


def deployments(store: Store, job_id: str) -> list[dict[str, Any]]:
    """The export jobs made from a run, newest first, each with its device figures (result.json's device)."""
    out = []
    for child_id in store.child_jobs(job_id):
        child = store.get_job(child_id)
        if child is None or child.get("kind") != EXPORT:
            continue
        result = read_json(Path(child["run_dir"]) / "result.json") or {}
        out.append({"job": child["id"], "name": child.get("name"), "state": child.get("state"),
                    "ended_at": child.get("ended_at"), "formats": sorted(result.get("formats") or {}),
                    "device": result.get("device"), "compat": (result.get("compat") or {}).get("ok"),
                    **({"llm": llm_files(result)} if "reference" in result else {})})
    return sorted(out, key=lambda d: d.get("ended_at") or 0, reverse=True)


def variants(store: Store, job: dict[str, Any]) -> dict[str, Any]:
    """A run and every variant made from it, each with its evaluation.json (None until it is written).

    Export jobs are not variants: they are listed as the deployments of the run they exported; evaluations
    are listed by evaluations.list.
    """
    out = []
    children = [c for c in map(store.get_job, store.child_jobs(job["id"])) if c is not None]
    # A chain is one row (its last stage scored beside the chain's start): its stages are not rows of their own.
    stages = {c["id"]: stage_ids(Path(c["run_dir"])) for c in children if c.get("kind") == CHAIN}
    staged = {i for ids in stages.values() for i in ids}
    for child in children:
        child_id = child["id"]
        if child.get("kind") not in (EXPORT, EVALUATE) and child_id not in staged:
            model_id = (stages.get(child_id) or [child_id])[-1]  # a chain's model (and exports) are its last stage's
            out.append({"job": record(store, child), "evaluation": read_json(Path(child["run_dir"]) / "evaluation.json"),
                        "deployments": deployments(store, model_id)})
    # The parent as measured most recently beside one of its variants.
    latest = max((v for v in out if v["evaluation"]), key=lambda v: v["job"].get("ended_at") or 0, default=None)
    return {"parent": record(store, job), "variants": out,
            "parent_evaluation": latest["evaluation"]["parent"] if latest else None,
            "parent_deployments": deployments(store, job["id"])}


def measured_peak(store: Store, job_id: str) -> int | None:
    """The highest per-rank peak the run's memory events recorded."""
    from engine.estimate.memory import measured_peak as peak_of  # pure Python, no torch

    return peak_of([json.loads(data) for _seq, _topic, _t, data in
                    store.query_events([f"run/{job_id}/memory"], 0, None, 100_000)])


def delete_files(runs_root: Path, run_dir: Path) -> int:
    """Delete a run directory (only one inside the runs folder); returns the bytes freed."""
    run_dir = run_dir.resolve()
    if runs_root.resolve() not in run_dir.parents or not run_dir.is_dir():
        return 0
    freed = _tree_bytes(run_dir)
    shutil.rmtree(run_dir)
    return freed
