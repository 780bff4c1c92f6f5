"""The store's integrity check, rotated backups and recovery, on real SQLite files and a real engine process."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from engine.daemon.store import Store
from engine.daemon.store_guard import backup, backups_dir, check, open_store
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
