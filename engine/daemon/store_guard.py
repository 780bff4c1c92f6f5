"""The store's safety net: an integrity check before opening, rotated backups, recovery from the newest good one.

The store (``ember.db``) holds every run's record, events and metrics. A file damaged
by a full disk, a bad sector or a copy made mid-write must not take all of that with
it, nor stop the engine from starting:

- ``check`` runs SQLite's ``PRAGMA quick_check`` on a separate read-only connection.
- ``open_store`` checks the file first. A damaged one is moved aside (with its -wal and
  -shm files) as ``ember.db.damaged-<time>``, never deleted, and the newest backup that
  passes the check is copied in its place; with no good backup, a new empty store
  starts (the run folders are still on disk) and the report says so.
- Either way, the jobs the store then lacks or holds stale are rebuilt from their run folders
  (engine/daemon/store_rebuild.py); the report lists them (``rebuilt``) and its message counts them.
- ``backup`` writes a consistent copy with SQLite's online backup API (safe while the
  engine writes) into ``backups/ember-<time>.db`` and keeps the newest ``KEEP``.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from engine.daemon.store import Store
from engine.daemon.store_rebuild import rebuild

log = logging.getLogger(__name__)

KEEP = 5  # backups kept; older ones are removed after each new one
BACKUP_EVERY_S = 3600.0  # while the engine runs; one is also made at every start
SIDE_FILES = ("-wal", "-shm")


def backups_dir(db: Path) -> Path:
    return db.parent / "backups"


def check(db: Path) -> str:
    """'ok', or what SQLite says is wrong with the file (missing file: 'ok', a new store starts)."""
    if not db.exists():
        return "ok"
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
    return "ok" if not problems else "; ".join(problems[:5])


def backup(store: Store, keep: int = KEEP) -> Path:
    """A consistent copy of the open store in backups/, then rotation; returns the new file."""
    folder = backups_dir(store.path)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
    target = folder / f"ember-{stamp}.db"
    n = 1
    while target.exists():  # two backups within a second
        target = folder / f"ember-{stamp}-{n}.db"
        n += 1
    tmp = target.with_name(target.name + ".tmp")
    dest = sqlite3.connect(str(tmp))
    try:
        store.db.backup(dest)
    finally:
        dest.close()
    tmp.replace(target)  # only a whole copy ever carries the .db name
    for old in sorted(folder.glob("ember-*.db"), key=lambda p: p.stat().st_mtime, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return target


def _move_aside(db: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
    aside = db.with_name(f"{db.name}.damaged-{stamp}")
    db.replace(aside)
    for suffix in SIDE_FILES:
        side = db.with_name(db.name + suffix)
        if side.exists():
            side.replace(aside.with_name(aside.name + suffix))
    return aside


def _rebuilt_sentence(rebuilt: list[str], restored: bool) -> str:
    runs = "1 run" if len(rebuilt) == 1 else f"{len(rebuilt)} runs"
    if restored:
        return f"{runs} recorded after that backup {'was' if len(rebuilt) == 1 else 'were'} rebuilt from their folders."
    return f"{runs} {'was' if len(rebuilt) == 1 else 'were'} rebuilt from their folders."


def open_store(db: Path, runs: Path | None = None) -> tuple[Store, dict[str, Any]]:
    """The store at ``db``, checked (and recovered when damaged); the report goes into engine.status.
    With ``runs`` (the run folders), a recovered store gets back the jobs it lacks from them."""
    report: dict[str, Any] = {"integrity": "ok", "checked_at": time.time(), "recovered_from": None,
                              "damaged_copy": None, "last_backup": None, "message": "", "rebuilt": []}
    problem = check(db)
    if problem == "ok":
        return Store(db), report
    aside = _move_aside(db)
    report.update(integrity="recovered", damaged_copy=str(aside))
    log.error("the store %s is damaged (%s); moved aside to %s", db, problem, aside)
    good = next((b for b in sorted(backups_dir(db).glob("ember-*.db"), key=lambda p: p.stat().st_mtime,
                                   reverse=True) if check(b) == "ok"), None)
    if good is not None:
        shutil.copyfile(good, db)
        report["recovered_from"] = str(good)
        report["message"] = (f"The store was damaged ({problem}); it was restored from the backup of "
                             f"{time.ctime(good.stat().st_mtime)}.")
    else:
        report["integrity"] = "replaced"
        report["message"] = (f"The store was damaged ({problem}) and no good backup existed: a new, empty "
                             f"store was started.")
    store = Store(db)
    if runs is not None:
        report["rebuilt"] = rebuild(store, runs)
        report["message"] += " " + _rebuilt_sentence(report["rebuilt"], restored=good is not None)
    else:
        report["message"] += " Runs not in it are missing from the list; their folders are kept."
    report["message"] += f" The damaged file is at {aside}."
    log.error("%s", report["message"])
    return store, report
