"""Rebuild, from the run folders, the jobs a restored store lacks or holds stale.

A store restored from a backup (or started empty when no backup was good) misses what happened after
that backup, yet every run folder under ``runs/`` still says what its job was and did:

- ``spec.yaml``: the kind, name and spec (written when the job is submitted);
- ``job.json``: owner, project, parent and creation time, then the process once it is launched
  (``record_in_folder``, written by the engine);
- ``events.jsonl``: every event the job wrote, ending with its final status and the time it ended.

``rebuild`` inserts each job the store lacks and reads its events file with the engine's own Follower
and event bus, so its events, metric rows, reported state and error are stored exactly as if the engine
had followed it live; a job the store holds is read on from its stored offset when its file holds more.
A job whose folder shows it ended since (a missing one, a queued one, an ended one that ran again) takes
the final state its events give, dated by its final status event (``Follower.end_time``). One that
started since and wrote no end yet is put back to ``running`` with the process ``job.json`` names: the
engine's start re-attaches to it if that process still lives, or settles it, as after any restart
(engine/daemon/jobs.py). A job the store holds as running is left to that same start.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml

from engine.api.job_terms import LIVE_STATES
from engine.api.specs import JOB_KINDS
from engine.daemon.access import DEFAULT_PROJECT
from engine.daemon.eventbus import EventBus
from engine.daemon.follower import Follower
from engine.daemon.run_files import write_state
from engine.daemon.store import Store

log = logging.getLogger(__name__)

JOB_FILE = "job.json"
NOT_STARTED = {"message": "The store lost this job's record before the job started, so it was not run.",
               "hint": "Start it again if it is still wanted."}


def record_in_folder(run_dir: Path, **fields: Any) -> None:
    """Add ``fields`` to the run folder's job.json (replaced in one rename). A failure costs only a later
    rebuild's detail, so it is logged, never raised into the job's start."""
    try:
        write_state(run_dir, JOB_FILE, {**read_job_file(run_dir), **fields})
    except OSError as exc:
        log.warning("could not write %s in %s: %s", JOB_FILE, run_dir, exc)


def read_job_file(run_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((run_dir / JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


class _Bus(EventBus):
    """The engine's event bus before the engine's loop runs (the store is rebuilt while it opens): nothing
    schedules a flush, the rebuild flushes after each read. Events are numbered and stored as live ones are."""

    def _schedule(self) -> None:
        pass


def _read_events(bus: EventBus, job: dict[str, Any]) -> tuple[Follower, int]:
    """Store the lines of the job's events file past its stored offset; returns the follower and how many."""
    follower = Follower(bus, job["id"], Path(job["run_dir"]), job["events_offset"])
    follower.reported_state = job.get("reported_state")
    total = 0
    while (count := follower.poll()):
        total += count
        bus.flush()
    bus.flush()  # a poll that read only blank lines still moved the offset
    return follower, total


def _new_job(store: Store, run_dir: Path) -> dict[str, Any] | None:
    """The record of a run folder the store lacks, inserted as not started (never queued: one left so by a
    failed rebuild would run again) until its events say more; None when the folder holds no job."""
    try:
        doc = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") not in JOB_KINDS or not isinstance(doc.get("spec"), dict):
        return None
    meta = read_job_file(run_dir)
    created = meta.get("created_at") or (run_dir / "spec.yaml").stat().st_mtime
    parent = meta.get("parent_id") or doc["spec"].get("source_run")
    store.insert_job({
        "id": run_dir.name, "kind": doc["kind"], "name": doc.get("name") or doc["kind"], "state": "cancelled",
        "created_at": created, "ended_at": created, "error": NOT_STARTED, "run_dir": str(run_dir), "spec": doc["spec"],
        # A parent whose record and folder are both gone cannot be linked (the column references it).
        "parent_id": parent if parent and store.get_job(parent) is not None else None,
        "owner": meta.get("owner") or "", "project": meta.get("project") or DEFAULT_PROJECT,
    })
    return store.get_job(run_dir.name)


def _bring_up_to_date(store: Store, before: dict[str, Any], follower: Follower, new_lines: int) -> None:
    """Set the state the folder shows for a job the store held as queued or ended, or did not hold.
    A job it shows as never started again keeps the state it has (queued, ended, or not started)."""
    meta = read_job_file(Path(before["run_dir"]))
    # The same launch wrote started_at into job.json and the store: a later one in job.json is a later start.
    launched = new_lines > 0 or (meta.get("started_at") or 0) > (before.get("started_at") or 0)
    # The folder tells the latest attempt: its error (or none), its process.
    latest = {"started_at": meta.get("started_at") or before.get("started_at"), "pid": meta.get("pid"),
              "pid_started": meta.get("pid_started"), "queue_pos": None, "exit_code": None,
              "error": follower.last_error}
    if new_lines > 0 and follower.reported_state:
        # It ended, and said so: that state, at the time its final status carries.
        store.update_job(before["id"], state=follower.reported_state, ended_at=follower.end_time(), **latest)
    elif launched:
        # Started since, with no end written yet: the engine's start re-attaches to its process if that
        # still lives, or settles it from its events file.
        store.update_job(before["id"], state="running", ended_at=None, **latest)


def rebuild(store: Store, runs: Path) -> list[str]:
    """Bring the store up to what the run folders under ``runs`` hold; returns the ids rebuilt."""
    if not runs.is_dir():
        return []
    rebuilt = []
    bus = _Bus(store)
    # Ids begin with their start time, so a parent is rebuilt before the jobs made from it.
    for run_dir in sorted(p for p in runs.iterdir() if (p / "spec.yaml").is_file()):
        try:
            before = store.get_job(run_dir.name)
            inserted = before is None
            if before is None:
                before = _new_job(store, run_dir)
                if before is None:
                    continue
            follower, new_lines = _read_events(bus, before)
            if before["state"] not in LIVE_STATES:  # a live one the engine follows on and settles itself
                _bring_up_to_date(store, before, follower, new_lines)
            after = store.get_job(before["id"])
            if inserted or new_lines or (after["state"], after["ended_at"]) != (before["state"], before["ended_at"]):
                rebuilt.append(before["id"])
        except Exception:  # noqa: BLE001 - one unreadable folder must not stop the engine or the other rebuilds
            log.exception("could not rebuild the job in %s", run_dir)
    return rebuilt
