"""The store's integrity check, rotated backups and recovery, on real SQLite files and a real engine process."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from engine.daemon.store import Store
from engine.daemon.store_guard import backup, backups_dir, check, open_store
from engine.daemon.store_rebuild import NOT_STARTED, record_in_folder
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(120)


def _run(run_id: str, run_dir: Path) -> dict:
    return {"id": run_id, "kind": "system.probe", "name": run_id, "state": "succeeded", "created_at": time.time(),
            "run_dir": str(run_dir), "spec": {}, "parent_id": None}


def _damage(db: Path) -> None:
    """Overwrite the middle of the file, where the tables' pages are (the header stays valid)."""
    data = bytearray(db.read_bytes())
    assert len(data) > 8192
    data[4096:8192] = b"\xde\xad\xbe\xef" * 1024
    db.write_bytes(bytes(data))


def test_backups_are_consistent_copies_and_rotate(tmp_path):
    store = Store(tmp_path / "ember.db")
    store.insert_job(_run("r-1", tmp_path))
    made = [backup(store, keep=3) for _ in range(5)]
    kept = sorted(backups_dir(store.path).glob("ember-*.db"))
    assert len(kept) == 3 and set(kept) == set(made[-3:])
    assert not list(backups_dir(store.path).glob("*.tmp"))
    copy = Store(made[-1])
    assert copy.get_job("r-1")["name"] == "r-1" and check(made[-1]) == "ok"
    copy.close()
    store.close()


def test_a_damaged_store_is_restored_from_the_newest_good_backup(tmp_path):
    db = tmp_path / "ember.db"
    store = Store(db)
    for i in range(200):  # enough rows for several pages
        store.insert_job(_run(f"r-{i:03d}", tmp_path / f"runs/r-{i}"))
    backup(store)
    store.insert_job(_run("r-after-backup", tmp_path))
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    _damage(db)
    assert check(db) != "ok"

    restored, report = open_store(db)
    assert report["integrity"] == "recovered" and report["recovered_from"]
    assert "restored from the backup" in report["message"] and "r-after-backup" not in report["message"]
    assert restored.get_job("r-150") is not None and restored.get_job("r-after-backup") is None
    assert Path(report["damaged_copy"]).is_file()  # kept for inspection, never deleted
    assert check(db) == "ok"
    restored.close()


def test_no_good_backup_starts_a_new_store_and_says_so(tmp_path):
    db = tmp_path / "ember.db"
    store = Store(db)
    for i in range(200):
        store.insert_job(_run(f"r-{i:03d}", tmp_path))
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    _damage(db)
    fresh, report = open_store(db)
    assert report["integrity"] == "replaced" and "no good backup" in report["message"]
    assert fresh.list_jobs() == [] and Path(report["damaged_copy"]).is_file()
    fresh.insert_job(_run("r-new", tmp_path))  # and it works
    assert fresh.get_job("r-new") is not None
    fresh.close()


def _folder(runs: Path, run_id: str, events: list[dict] | None = None, **meta) -> Path:
    """A run folder as the engine and a probe job leave it: spec.yaml, job.json, events.jsonl."""
    run_dir = runs / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "spec.yaml").write_text(f"kind: system.probe\nname: {run_id}-name\nspec:\n  samples: 3\n")
    if meta:
        record_in_folder(run_dir, **meta)
    if events is not None:
        (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run_dir


def _probe_events(t0: float, state: str = "succeeded", samples: int = 3) -> list[dict]:
    events = [{"t": t0, "kind": "status", "state": "running"}]
    events += [{"t": t0 + i, "kind": "sample", "step": i, "cpu": 10.0 + i, "rss": 1000 + i} for i in range(samples)]
    return events + [{"t": t0 + samples + 0.25, "kind": "status", "state": state}]


def _damaged_with_backup(db: Path, runs: Path, *held: dict) -> None:
    """A store holding ``held`` jobs, backed up, then damaged (whatever it held after the backup is lost)."""
    store = Store(db)
    for i in range(200):  # enough rows for several pages
        store.insert_job(_run(f"r-filler-{i:03d}", runs / "none"))
    for job in held:
        store.insert_job(job)
    backup(store)
    store.insert_job(_run("r-lost", runs / "none"))
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    _damage(db)


def test_a_restore_rebuilds_the_runs_recorded_after_the_backup_from_their_folders(tmp_path):
    db, runs = tmp_path / "ember.db", tmp_path / "runs"
    _folder(runs, "r20250101-000000-aaaaaa", _probe_events(1000.0))
    parent = _run("r20250101-000000-aaaaaa", runs / "r20250101-000000-aaaaaa")
    _damaged_with_backup(db, runs, {**parent, "events_offset": (runs / parent["id"] / "events.jsonl").stat().st_size})
    _folder(runs, "r20250101-000100-bbbbbb", _probe_events(2000.0, "failed", samples=4)[:-1]
            + [{"t": 2004.5, "kind": "status", "state": "failed", "message": "out of memory", "hint": "smaller"}],
            owner="ana", project="vision", parent_id=parent["id"], created_at=1990.0, started_at=1995.0,
            pid=None, pid_started=None)
    _folder(runs, "r20250101-000200-cccccc")  # submitted, never started: no job.json, no events
    (runs / "not-a-run").mkdir()  # a folder without spec.yaml is not a job

    store, report = open_store(db, runs)
    assert report["integrity"] == "recovered"
    assert report["rebuilt"] == ["r20250101-000100-bbbbbb", "r20250101-000200-cccccc"]
    assert "2 runs recorded after that backup were rebuilt from their folders" in report["message"]
    failed = store.get_job("r20250101-000100-bbbbbb")
    assert (failed["kind"], failed["name"], failed["spec"]) == ("system.probe", "r20250101-000100-bbbbbb-name",
                                                                {"samples": 3})
    assert (failed["state"], failed["ended_at"], failed["created_at"], failed["started_at"]) == (
        "failed", 2004.5, 1990.0, 1995.0)
    assert failed["error"] == {"message": "out of memory", "hint": "smaller"}
    assert (failed["owner"], failed["project"], failed["parent_id"]) == ("ana", "vision", parent["id"])
    assert len(store.metrics(failed["id"])) == 4 * 2  # cpu and rss at 4 steps
    assert failed["events_offset"] == (runs / failed["id"] / "events.jsonl").stat().st_size
    assert store.last_event_t(failed["id"], f"run/{failed['id']}/status") == 2004.5
    never = store.get_job("r20250101-000200-cccccc")
    assert never["state"] == "cancelled" and never["error"] == NOT_STARTED and never["project"] == "default"
    assert store.get_job("r-lost") is None  # no folder: nothing to rebuild it from
    assert store.metrics(parent["id"]) == []  # the backup held it whole: it is not read twice
    store.close()


def test_a_restore_brings_stale_jobs_up_to_date(tmp_path):
    db, runs = tmp_path / "ember.db", tmp_path / "runs"
    ended = _folder(runs, "r20250101-000000-aaaaaa", _probe_events(1000.0)[:2])
    started = _folder(runs, "r20250101-000100-bbbbbb", started_at=1500.0, pid=4_000_000, pid_started=1.0)
    queued_then_ran = {**_run(ended.name, ended), "state": "queued", "ended_at": None}
    held_queued = {**_run(started.name, started), "state": "queued", "ended_at": None}
    _damaged_with_backup(db, runs, queued_then_ran, held_queued)
    with open(ended / "events.jsonl", "a") as f:  # it ran to its end after the backup
        f.writelines(json.dumps(e) + "\n" for e in _probe_events(1000.0)[2:])

    store, report = open_store(db, runs)
    assert report["rebuilt"] == [ended.name, started.name]
    job = store.get_job(ended.name)
    assert (job["state"], job["ended_at"], len(store.metrics(ended.name))) == ("succeeded", 1003.25, 3 * 2)
    # Started after the backup and said nothing yet: running with its process, for the engine's start to
    # re-attach to it or settle it; never queued again to run twice.
    job = store.get_job(started.name)
    assert (job["state"], job["pid"], job["started_at"], job["ended_at"]) == ("running", 4_000_000, 1500.0, None)
    store.close()


def test_the_engine_starts_on_a_damaged_store_and_reports_the_recovery(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={})
        wait_for(lambda: c.call("jobs.get", id=job["id"])["state"] == "succeeded", timeout=60, what="the probe")
        assert c.call("engine.status")["store"]["integrity"] == "ok"
    # A restart backs the store up (the run is in that copy); then the file is damaged while the engine is down.
    engine_proc.proc.send_signal(signal.SIGTERM)
    engine_proc.proc.wait(20)
    engine_proc.restart()
    with engine_proc.client() as c:
        wait_for(lambda: c.call("engine.status")["store"]["last_backup"], timeout=20, what="the start-up backup")
    engine_proc.proc.send_signal(signal.SIGTERM)
    engine_proc.proc.wait(20)
    db = engine_proc.paths.db
    conn = Store(db)  # pad the file past the damaged range (a new store is only a few pages)
    conn.db.execute("CREATE TABLE IF NOT EXISTS padding (x BLOB)")
    conn.db.executemany("INSERT INTO padding VALUES (?)", [(b"x" * 1000,) for _ in range(50)])
    conn.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    _damage(db)
    engine_proc.restart()
    with engine_proc.client() as c:
        health = c.call("engine.status")["store"]
        assert health["integrity"] == "recovered", health
        assert c.call("jobs.get", id=job["id"])["state"] == "succeeded"  # the run survived, from the backup
