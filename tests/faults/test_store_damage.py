"""ember.db damaged between engine runs, after real jobs: the engine starts, restores the newest
good backup, says so, and holds exactly the runs and metric rows that backup holds."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

from engine.daemon.store import Store
from tests.conftest import wait_for
from tests.faults.conftest import wait_final


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


def test_a_damaged_store_is_restored_from_its_backup_with_every_row_of_it(start_engine, fault_report):
    eng = start_engine()
    probe = {"samples": 12, "interval_s": 0.01}
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
    conn = Store(db)  # pad the file past the damaged range, then overwrite table pages
    conn.db.execute("CREATE TABLE IF NOT EXISTS padding (x BLOB)")
    conn.db.executemany("INSERT INTO padding VALUES (?)", [(b"x" * 1000,) for _ in range(50)])
    conn.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    data[4096:8192] = b"\xde\xad\xbe\xef" * 1024
    db.write_bytes(bytes(data))

    eng.restart()
    with eng.client() as c:
        health = c.call("engine.status")["store"]
        assert health["integrity"] == "recovered" and health["recovered_from"] == str(backup), health
        assert "restored from the backup" in health["message"]
        assert c.call("jobs.get", id=before["id"])["state"] == "succeeded"
        assert [r["id"] for r in c.call("jobs.list")["jobs"]] == [before["id"]]
        # The store works on: a new job runs and is recorded.
        again = wait_final(c, c.call("jobs.start", kind="system.probe", spec=probe)["id"])
        assert again["state"] == "succeeded"
    assert Path(after["run_dir"]).is_dir()  # the run the backup missed keeps its folder
    assert Path(health["damaged_copy"]).is_file()
    stored = _counts(db)
    assert stored[0] == expected[0] + 1  # the backup's run, plus the new one
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    restored_metrics = conn.execute("SELECT COUNT(*) FROM metrics WHERE run_id=?", (before["id"],)).fetchone()[0]
    conn.close()
    assert restored_metrics == expected[1]
    fault_report("5 store damaged", "4 kB of ember.db overwritten (engine down)",
                 "restored from start-up backup; engine said so", f"{expected[0]} runs, {expected[1]} metric rows",
                 f"{expected[0]} runs, {restored_metrics} metric rows")
