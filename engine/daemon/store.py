"""The engine's SQLite store: jobs, events, metrics, artifacts, hosts, audit.

One writer (the engine, which holds the engine lock), WAL mode so readers never
block it. The schema is versioned; ``MIGRATIONS[i]`` brings a database from
version ``i`` to ``i + 1`` inside one transaction.

The code says "job" (``get_job``, ``list_jobs``...), but the SQL keeps its first names: the
``runs`` table, ``run_id`` columns and ``runs_state``/``events_run``/``artifacts_run`` indexes.
Renaming them would need a migration and would change files users already have; existing
data folders must open unchanged.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

MIGRATIONS: list[str] = [
    # v1: runs, their events and the audit log.
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        name TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        pid INTEGER,
        pid_started REAL,
        exit_code INTEGER,
        error TEXT,
        run_dir TEXT NOT NULL,
        spec TEXT NOT NULL,
        parent_id TEXT REFERENCES runs(id),
        host TEXT NOT NULL DEFAULT 'local',
        events_offset INTEGER NOT NULL DEFAULT 0,
        reported_state TEXT,
        stop_requested TEXT
    );
    CREATE INDEX runs_state ON runs(state);
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY,
        topic TEXT NOT NULL,
        t REAL NOT NULL,
        run_id TEXT,
        data TEXT NOT NULL
    );
    CREATE INDEX events_run ON events(run_id, seq);
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        t REAL NOT NULL,
        client TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT NOT NULL DEFAULT '',
        params TEXT NOT NULL DEFAULT '{}',
        ok INTEGER NOT NULL,
        error TEXT
    );
    """,
    # v2: numeric metrics for charts, artifacts with lineage, remote hosts.
    """
    CREATE TABLE metrics (
        run_id TEXT NOT NULL REFERENCES runs(id),
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        step INTEGER NOT NULL,
        value REAL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (run_id, kind, name, step)
    ) WITHOUT ROWID;
    CREATE TABLE artifacts (
        id TEXT PRIMARY KEY,
        run_id TEXT REFERENCES runs(id),
        parent_id TEXT REFERENCES artifacts(id),
        kind TEXT NOT NULL,
        path TEXT NOT NULL,
        sha256 TEXT,
        size INTEGER,
        created_at REAL NOT NULL,
        meta TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX artifacts_run ON artifacts(run_id);
    CREATE TABLE hosts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        address TEXT NOT NULL,
        port INTEGER NOT NULL DEFAULT 22,
        user TEXT NOT NULL DEFAULT '',
        key_path TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        meta TEXT NOT NULL DEFAULT '{}'
    );
    """,
    # v3: estimated and measured peak memory per rank, so the estimator's error is visible.
    """
    ALTER TABLE runs ADD COLUMN estimated_peak INTEGER;
    ALTER TABLE runs ADD COLUMN measured_peak INTEGER;
    """,
    # v4: the job queue (docs/queue.md): priority and position of queued runs, the GPUs a run
    # holds (so a restarted engine knows them), and the queue's settings.
    """
    ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN queue_pos REAL;
    ALTER TABLE runs ADD COLUMN gpus TEXT;
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
    # v5: the Playground's saved chats (docs/playground.md): the whole conversation as one JSON document.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        client TEXT NOT NULL DEFAULT '',
        data TEXT NOT NULL
    );
    CREATE INDEX conversations_updated ON conversations(updated_at);
    """,
    # v6: a run on a Slurm cluster: its job id, state, pending reason and place in the queue (docs/slurm.md).
    """
    ALTER TABLE runs ADD COLUMN cluster TEXT;
    """,
    # v7: users and their roles and projects (docs/security.md); who started each job, in which project; who
    # made each audited request. A token is kept only as its sha256.
    """
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        token_sha256 TEXT NOT NULL UNIQUE,
        projects TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        expires_at REAL,
        revoked_at REAL
    );
    ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN project TEXT NOT NULL DEFAULT '';
    ALTER TABLE audit ADD COLUMN user TEXT NOT NULL DEFAULT '';
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)

_JOB_COLUMNS = (
    "id", "kind", "name", "state", "created_at", "started_at", "ended_at", "pid", "pid_started",
    "exit_code", "error", "run_dir", "spec", "parent_id", "host", "events_offset",
    "reported_state", "stop_requested", "estimated_peak", "measured_peak",
    "priority", "queue_pos", "gpus", "cluster", "owner", "project",
)
_JSON_COLUMNS = {"error", "spec", "gpus", "cluster"}
# Secrets never reach the audit log.
_SECRET_KEYS = ("token", "password", "passphrase", "secret", "private_key")


class SchemaTooNew(RuntimeError):
    pass


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("***" if any(s in k.lower() for s in _SECRET_KEYS) else _redact(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def audit_where(action: str | None = None, client: str | None = None, target: str | None = None,
                since: float | None = None, until: float | None = None, ok: bool | None = None,
                text: str | None = None, user: str | None = None) -> tuple[str, list[Any]]:
    """The WHERE clause of an audit query. action, client, target and user match exactly, or as a glob
    when they hold * ? or [ (``jobs.*``); text is a case-insensitive substring of any column."""
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("action", action), ("client", client), ("target", target), ("user", user)):
        if value:
            where.append(f"{column} GLOB ?" if any(c in value for c in "*?[") else f"{column} = ?")
            args.append(value)
    if since is not None:
        where.append("t >= ?")
        args.append(since)
    if until is not None:
        where.append("t < ?")
        args.append(until)
    if ok is not None:
        where.append("ok = ?")
        args.append(int(ok))
    if text:
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append("(" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in ("action", "client", "target", "params",
                                                                             "error", "user")) + ")")
        args += [f"%{escaped}%"] * 6
    return ("WHERE " + " AND ".join(where)) if where else "", args


class Store:
    def __init__(self, path: Path, migrate_to: int = SCHEMA_VERSION):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves so each write is one transaction.
        self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.execute("PRAGMA busy_timeout=5000")
        self._migrate(migrate_to)

    # ---- schema
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self, target: int) -> None:
        current = self.schema_version()
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{self.path} has schema version {current}, newer than this Ember Studio "
                f"understands ({SCHEMA_VERSION}). Upgrade Ember Studio, or point EMBER_HOME elsewhere."
            )
        for version in range(current, target):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for statement in MIGRATIONS[version].split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version={version + 1}")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def journal_mode(self) -> str:
        return str(self.db.execute("PRAGMA journal_mode").fetchone()[0])

    def close(self) -> None:
        self.db.close()

    # ---- jobs (the `runs` table)
    def insert_job(self, job: dict[str, Any]) -> None:
        cols = [c for c in _JOB_COLUMNS if c in job]
        values = [json.dumps(job[c]) if c in _JSON_COLUMNS and job[c] is not None else job[c]
                  for c in cols]
        self.db.execute(
            f"INSERT INTO runs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})", values
        )

    def update_job(self, job_id: str, **fields: Any) -> None:
        if not fields:
            return
        unknown = set(fields) - set(_JOB_COLUMNS)
        if unknown:
            raise KeyError(f"unknown job columns: {sorted(unknown)}")
        sets = ",".join(f"{c}=?" for c in fields)
        values = [json.dumps(v) if c in _JSON_COLUMNS and v is not None else v
                  for c, v in fields.items()]
        self.db.execute(f"UPDATE runs SET {sets} WHERE id=?", [*values, job_id])

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM runs WHERE id=?", (job_id,)).fetchone()
        return self._job(row) if row else None

    def list_jobs(self, state: str | Sequence[str] | None = None, kind: str | None = None,
                  limit: int = 100, oldest_first: bool = False) -> list[dict[str, Any]]:
        where, args = [], []
        if state:
            states = [state] if isinstance(state, str) else list(state)
            where.append(f"state IN ({','.join('?' * len(states))})")
            args += states
        if kind:
            where.append("kind=?")
            args.append(kind)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        order = "ASC" if oldest_first else "DESC"
        rows = self.db.execute(
            f"SELECT * FROM runs {clause} ORDER BY created_at {order}, id {order} LIMIT ?",
            [*args, limit],
        ).fetchall()
        return [self._job(r) for r in rows]

    def queued_jobs(self) -> list[dict[str, Any]]:
        """Queued runs in the order they will be considered: priority (highest first), then position."""
        rows = self.db.execute("SELECT * FROM runs WHERE state='queued' "
                               "ORDER BY priority DESC, queue_pos IS NULL, queue_pos, created_at, id").fetchall()
        return [self._job(r) for r in rows]

    def next_queue_pos(self) -> float:
        return float(self.db.execute("SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM runs").fetchone()[0])

    def get_setting(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_setting(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def child_jobs(self, job_id: str) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT id FROM runs WHERE parent_id=? ORDER BY created_at", (job_id,))]

    def delete_job(self, job_id: str) -> None:
        """Remove a run and everything stored for it, in one transaction."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("metrics", "events", "artifacts"):
                self.db.execute(f"DELETE FROM {table} WHERE run_id=?", (job_id,))
            self.db.execute("UPDATE runs SET parent_id=NULL WHERE parent_id=?", (job_id,))
            self.db.execute("DELETE FROM runs WHERE id=?", (job_id,))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def best_metric(self, job_id: str) -> dict[str, Any] | None:
        """The best evaluation of a run: highest accuracy, else lowest perplexity, else lowest loss."""
        for name, pick in (("accuracy", "MAX"), ("perplexity", "MIN"), ("loss", "MIN")):
            row = self.db.execute(
                f"SELECT value, step FROM metrics WHERE run_id=? AND kind='eval' AND name=? "
                f"AND value = (SELECT {pick}(value) FROM metrics WHERE run_id=? AND kind='eval' AND name=?) "
                f"ORDER BY step LIMIT 1", (job_id, name, job_id, name)).fetchone()
            if row is not None:
                return {"metric": name, "value": row[0], "step": row[1]}
        return None

    def count_jobs_by_state(self) -> dict[str, int]:
        rows = self.db.execute("SELECT state, COUNT(*) FROM runs GROUP BY state").fetchall()
        return {r[0]: r[1] for r in rows}

    @staticmethod
    def _job(row: sqlite3.Row) -> dict[str, Any]:
        job = dict(row)
        for c in _JSON_COLUMNS:
            if job.get(c) is not None:
                job[c] = json.loads(job[c])
        return job

    # ---- events
    def last_seq(self) -> int:
        return int(self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])

    def commit_events(self, rows: Sequence[tuple[int, str, float, str | None, str]],
                      job_updates: dict[str, dict[str, Any]] | None = None) -> None:
        """Store events ``(seq, topic, t, run_id, data_json)`` and their side effects atomically.

        ``job_updates`` (e.g. the followed file offset) commit in the same transaction, so
        an engine crash can neither lose an event nor store it twice.
        """
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany("INSERT INTO events (seq, topic, t, run_id, data) VALUES (?,?,?,?,?)", rows)
            self._insert_metrics(rows)
            for job_id, fields in (job_updates or {}).items():
                self.update_job(job_id, **fields)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def _insert_metrics(self, rows: Iterable[tuple[int, str, float, str | None, str]]) -> None:
        metric_rows = []
        for seq, _topic, _t, job_id, data_json in rows:
            if job_id is None or '"step"' not in data_json:
                continue
            data = json.loads(data_json)
            step, kind = data.get("step"), data.get("kind")
            if not isinstance(step, int) or not isinstance(kind, str):
                continue
            values = data.get("metrics") if isinstance(data.get("metrics"), dict) else data
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in ("step", "t"):
                    metric_rows.append((job_id, kind, name, step, float(value), seq))
        if metric_rows:
            # A step re-run after a resume replaces the earlier value: one row per step.
            self.db.executemany(
                "INSERT OR REPLACE INTO metrics (run_id, kind, name, step, value, seq) VALUES (?,?,?,?,?,?)",
                metric_rows,
            )

    def last_event_t(self, job_id: str, topic: str) -> float | None:
        """The time of a run's newest event on ``topic`` (its own ``t`` when it wrote one)."""
        row = self.db.execute("SELECT t FROM events WHERE run_id=? AND topic=? ORDER BY seq DESC LIMIT 1",
                              (job_id, topic)).fetchone()
        return None if row is None else float(row[0])

    def query_events(self, patterns: Sequence[str], after: int, upto: int | None = None,
                     limit: int = 1000) -> list[tuple[int, str, float, str]]:
        where = " OR ".join("topic GLOB ?" for _ in patterns) or "1"
        args: list[Any] = [*patterns, after]
        upper = ""
        if upto is not None:
            upper = " AND seq <= ?"
            args.append(upto)
        rows = self.db.execute(
            f"SELECT seq, topic, t, data FROM events WHERE ({where}) AND seq > ?{upper} ORDER BY seq LIMIT ?",
            [*args, limit],
        ).fetchall()
        return [tuple(r) for r in rows]

    def metrics(self, job_id: str, kind: str | None = None, names: Sequence[str] | None = None,
                max_points: int | None = None) -> list[dict[str, Any]]:
        """Metric rows by step; with ``max_points``, each (kind, name) series is thinned to about
        that many evenly spaced rows, always keeping its first and last."""
        where, args = "run_id=?", [job_id]
        if kind:
            where += " AND kind=?"
            args.append(kind)
        if names:
            where += f" AND name IN ({','.join('?' * len(names))})"
            args += list(names)
        if not max_points:
            sql = f"SELECT kind, name, step, value FROM metrics WHERE {where} ORDER BY step"
            return [dict(r) for r in self.db.execute(sql, args)]
        sql = f"""SELECT kind, name, step, value FROM (
                    SELECT kind, name, step, value,
                           ROW_NUMBER() OVER (PARTITION BY kind, name ORDER BY step) - 1 AS i,
                           COUNT(*) OVER (PARTITION BY kind, name) AS n
                    FROM metrics WHERE {where})
                  WHERE n <= ? OR i = n - 1 OR i % ((n + ? - 1) / ?) = 0
                  ORDER BY step"""
        return [dict(r) for r in self.db.execute(sql, [*args, max_points, max_points, max_points])]

    # ---- audit
    # ---- hosts (profile columns, the rest of the profile and its last probe in meta)
    def upsert_host(self, name: str, profile: dict[str, Any], meta: dict[str, Any], old_name: str | None = None) -> None:
        cols = {k: profile[k] for k in ("address", "port", "user", "key_path")}
        row = self.db.execute("SELECT id, created_at FROM hosts WHERE name=?", (old_name or name,)).fetchone()
        if row is None:
            self.db.execute("INSERT INTO hosts (id, name, address, port, user, key_path, created_at, meta) "
                            "VALUES (?,?,?,?,?,?,?,?)", (name, name, *cols.values(), time.time(), json.dumps(meta)))
        else:
            self.db.execute("UPDATE hosts SET name=?, address=?, port=?, user=?, key_path=?, meta=? WHERE id=?",
                            (name, *cols.values(), json.dumps(meta), row["id"]))

    def get_host(self, name: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM hosts WHERE name=?", (name,)).fetchone()
        return self._host(row) if row else None

    def list_hosts(self) -> list[dict[str, Any]]:
        return [self._host(r) for r in self.db.execute("SELECT * FROM hosts ORDER BY name")]

    def delete_host(self, name: str) -> None:
        self.db.execute("DELETE FROM hosts WHERE name=?", (name,))

    @staticmethod
    def _host(row: sqlite3.Row) -> dict[str, Any]:
        host = dict(row)
        host["meta"] = json.loads(host["meta"] or "{}")
        return host

    # ---- the Playground's conversations (data: engine.api.playground.Conversation as JSON)
    def save_conversation(self, conv_id: str, title: str, client: str, data: dict[str, Any]) -> float:
        now = time.time()
        self.db.execute("INSERT INTO conversations (id, title, created_at, updated_at, client, data) "
                        "VALUES (?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET title=excluded.title, "
                        "updated_at=excluded.updated_at, data=excluded.data",
                        (conv_id, title, now, now, client, json.dumps(data)))
        return now

    def list_conversations(self, limit: int, offset: int = 0) -> list[dict[str, Any]]:
        """Newest first, each with its data."""
        rows = self.db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, id LIMIT ? OFFSET ?",
                               (limit, offset)).fetchall()
        return [{**dict(r), "data": json.loads(r["data"])} for r in rows]

    def count_conversations(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0])

    def get_conversation(self, conv_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM conversations WHERE id=?", (conv_id,)).fetchone()
        return {**dict(row), "data": json.loads(row["data"])} if row else None

    def delete_conversation(self, conv_id: str) -> bool:
        return self.db.execute("DELETE FROM conversations WHERE id=?", (conv_id,)).rowcount > 0

    def audit(self, client: str, action: str, target: str, params: dict[str, Any], ok: bool,
              error: str | None = None, user: str = "") -> None:
        self.db.execute(
            "INSERT INTO audit (t, client, action, target, params, ok, error, user) VALUES (?,?,?,?,?,?,?,?)",
            (time.time(), client, action, target, json.dumps(_redact(params)), int(ok), error, user),
        )

    # ---- users (engine/daemon/access.py)
    def add_user(self, name: str, role: str, token_sha256: str, projects: list[str],
                 expires_at: float | None) -> None:
        self.db.execute("INSERT INTO users (name, role, token_sha256, projects, created_at, expires_at) "
                        "VALUES (?,?,?,?,?,?)", (name, role, token_sha256, json.dumps(projects), time.time(),
                                                 expires_at))

    def update_user(self, name: str, **fields: Any) -> None:
        allowed = {"role", "token_sha256", "projects", "expires_at", "revoked_at"}
        if set(fields) - allowed:
            raise KeyError(f"unknown user columns: {sorted(set(fields) - allowed)}")
        values = [json.dumps(v) if k == "projects" else v for k, v in fields.items()]
        self.db.execute(f"UPDATE users SET {','.join(f'{k}=?' for k in fields)} WHERE name=?", [*values, name])

    def get_user(self, name: str | None = None, token_sha256: str | None = None) -> dict[str, Any] | None:
        column, value = ("name", name) if name is not None else ("token_sha256", token_sha256)
        row = self.db.execute(f"SELECT * FROM users WHERE {column}=?", (value,)).fetchone()
        return self._user(row) if row else None

    def list_users(self) -> list[dict[str, Any]]:
        return [self._user(r) for r in self.db.execute("SELECT * FROM users ORDER BY name").fetchall()]

    @staticmethod
    def _user(row: sqlite3.Row) -> dict[str, Any]:
        user = dict(row)
        user["projects"] = json.loads(user["projects"])
        return user

    def audit_records(self, limit: int = 100, offset: int = 0, **filters: Any) -> list[dict[str, Any]]:
        """Newest first; ``filters`` as ``audit_where`` takes them."""
        where, args = audit_where(**filters)
        rows = self.db.execute(f"SELECT * FROM audit {where} ORDER BY id DESC LIMIT ? OFFSET ?",
                               [*args, limit, offset]).fetchall()
        out = []
        for r in rows:
            rec = dict(r)
            rec["params"] = json.loads(rec["params"])
            rec["ok"] = bool(rec["ok"])
            out.append(rec)
        return out

    def audit_count(self, **filters: Any) -> int:
        where, args = audit_where(**filters)
        return int(self.db.execute(f"SELECT COUNT(*) FROM audit {where}", args).fetchone()[0])

