"""ember.db damaged between engine runs, after real jobs: the engine starts, restores the newest
good backup, says so, and rebuilds from their folders the runs recorded after that backup, with every
metric row and their true end times. A run that ended while the engine was down keeps its end time."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import psutil

from engine.api.job_terms import FINAL_STATES
from engine.daemon.store import Store
from tests.conftest import wait_for
from tests.faults.conftest import file_events, wait_final

PROBE = {"samples": 12, "interval_s": 0.01}


def _counts(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return (conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0])
    finally:
        conn.close()


def _stop(eng) -> None:
    eng.proc.send_signal(signal.SIGTERM)
    eng.proc.wait(20)


def _damage(db: Path) -> None:
    """Pad the file past the damaged range, then overwrite table pages (the header stays valid)."""
    conn = Store(db)
    conn.db.execute("CREATE TABLE IF NOT EXISTS padding (x BLOB)")
    conn.db.executemany("INSERT INTO padding VALUES (?)", [(b"x" * 1000,) for _ in range(50)])
    conn.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    data[4096:8192] = b"\xde\xad\xbe\xef" * 1024
    db.write_bytes(bytes(data))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _final_status(run_dir: str) -> dict | None:
    if not (Path(run_dir) / "events.jsonl").exists():
        return None
    return next((e for e in reversed(file_events(run_dir))
                 if e.get("kind") == "status" and e.get("state") in FINAL_STATES), None)


def test_a_damaged_store_is_restored_from_its_backup_with_every_row_of_it(start_engine, fault_report):
    eng = start_engine()
    probe = PROBE
    with eng.client() as c:
        before = wait_final(c, c.call("jobs.start", kind="system.probe", spec=probe)["id"])
        assert before["state"] == "succeeded"
    _stop(eng)
    eng.restart()  # the start-up backup holds the first run and its metric rows
    with eng.client() as c:
        backup = Path(wait_for(lambda: c.call("engine.status")["store"]["last_backup"], timeout=20, what="a backup"))
        after = wait_final(c, c.call("jobs.start", kind="system.probe", spec=probe)["id"])
    _stop(eng)
    db = eng.paths.db
    expected = _counts(backup)
    assert expected[0] == 1 and expected[1] > 0
    _damage(db)

    eng.restart()
    with eng.client() as c:
        health = c.call("engine.status")["store"]
        assert health["integrity"] == "recovered" and health["recovered_from"] == str(backup), health
        assert "restored from the backup" in health["message"]
        assert c.call("jobs.get", id=before["id"])["state"] == "succeeded"
        # The run the backup missed is rebuilt from its folder (the test below checks it row by row).
        assert sorted(r["id"] for r in c.call("jobs.list")["jobs"]) == sorted([before["id"], after["id"]])
        # The store works on: a new job runs and is recorded.
        again = wait_final(c, c.call("jobs.start", kind="system.probe", spec=probe)["id"])
        assert again["state"] == "succeeded"
    assert Path(after["run_dir"]).is_dir()  # the run the backup missed keeps its folder
    assert Path(health["damaged_copy"]).is_file()
    stored = _counts(db)
    assert stored[0] == expected[0] + 2  # the backup's run, the rebuilt one, and the new one
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    restored_metrics = conn.execute("SELECT COUNT(*) FROM metrics WHERE run_id=?", (before["id"],)).fetchone()[0]
    conn.close()
    assert restored_metrics == expected[1]
    fault_report("5 store damaged", "4 kB of ember.db overwritten (engine down)",
                 "restored from start-up backup; engine said so", f"{expected[0]} runs, {expected[1]} metric rows",
                 f"{expected[0]} runs, {restored_metrics} metric rows")


def test_runs_recorded_after_the_backup_are_rebuilt_from_their_folders(start_engine, fault_report):
    eng = start_engine()
    with eng.client() as c:
        first = wait_final(c, c.call("jobs.start", kind="system.probe", spec=PROBE, name="first")["id"])
    _stop(eng)
    eng.restart()  # the start-up backup holds the first run only
    with eng.client() as c:
        backup = Path(wait_for(lambda: c.call("engine.status")["store"]["last_backup"], timeout=20, what="a backup"))
        second = wait_final(c, c.call("jobs.start", kind="system.probe", spec=PROBE, name="second")["id"])
        ids = [first["id"], second["id"]]
        jobs = {i: c.call("jobs.get", id=i) for i in ids}
        rows = {i: c.call("jobs.metrics", id=i, max_points=100_000)["metrics"] for i in ids}
    _stop(eng)
    assert _counts(backup)[0] == 1 and all(rows.values())
    _damage(eng.paths.db)

    eng.restart()
    with eng.client() as c:
        health = c.call("engine.status")["store"]
        assert health["integrity"] == "recovered" and health["rebuilt"] == [second["id"]], health
        assert "1 run recorded after that backup was rebuilt from their folders" in health["message"]
        assert sorted(r["id"] for r in c.call("jobs.list")["jobs"]) == sorted(ids)
        for i in ids:
            job = c.call("jobs.get", id=i)
            for key in ("kind", "name", "state", "spec", "owner", "project"):
                assert job[key] == jobs[i][key], (i, key)
            assert abs(job["ended_at"] - jobs[i]["ended_at"]) < 1.0, (i, job["ended_at"], jobs[i]["ended_at"])
            assert c.call("jobs.metrics", id=i, max_points=100_000)["metrics"] == rows[i]
        # The rebuilt run's end is the time its final status carries, not this start's.
        assert c.call("jobs.get", id=second["id"])["ended_at"] == _final_status(second["run_dir"])["t"]
        # Its events are back too, for the charts and logs that replay them.
        events = c.call("events.query", topics=[f"run/{second['id']}/*"], limit=100_000)["events"]
        assert [e["data"] for e in events] == file_events(second["run_dir"])
    fault_report("5b store damaged after a later run", "4 kB of ember.db overwritten (engine down)",
                 "restored from backup; the later run rebuilt from its folder",
                 f"{len(ids)} runs, {sum(map(len, rows.values()))} metric rows",
                 f"{len(ids)} runs, {sum(map(len, rows.values()))} metric rows")


def test_a_run_that_ended_while_the_engine_was_down_keeps_its_end_time(start_engine):
    eng = start_engine()
    with eng.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 20, "interval_s": 0.1})
        job = wait_for(lambda: (j := c.call("jobs.get", id=job["id"]))["pid"] and j, timeout=30, what="the job")
    _stop(eng)  # the job runs on without the engine, and ends
    final = wait_for(lambda: _final_status(job["run_dir"]), timeout=60, what="the job's final status")
    wait_for(lambda: not _alive(job["pid"]), timeout=30, what="the job's process to end")
    time.sleep(1.5)  # a start that dated the end "now" would now be seconds off
    ended = []
    for _ in range(2):
        eng.restart()
        with eng.client() as c:
            ended.append(wait_final(c, job["id"])["ended_at"])
        _stop(eng)
    assert ended == [final["t"], final["t"]]
