import json
import sqlite3

import pytest

from engine.daemon.store import MIGRATIONS, SCHEMA_VERSION, SchemaTooNew, Store


def make_run(run_id="r1", **extra):
    return {"id": run_id, "kind": "system.probe", "name": "n", "state": "queued", "created_at": 1.0,
            "run_dir": "/x", "spec": {"samples": 1}, **extra}


def test_new_store_is_wal_and_current(tmp_path):
    s = Store(tmp_path / "ember.db")
    assert s.journal_mode() == "wal"
    assert s.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
    tables = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "events", "metrics", "artifacts", "hosts", "audit"} <= tables


def test_migration_from_v1_keeps_data(tmp_path):
    old = Store(tmp_path / "ember.db", migrate_to=1)
    old.insert_job(make_run())
    old.commit_events([(1, "run/r1/status", 1.0, "r1", '{"kind":"status","state":"running"}')])
    old.close()
    s = Store(tmp_path / "ember.db")
    assert s.schema_version() == SCHEMA_VERSION
    assert s.get_job("r1")["spec"] == {"samples": 1}
    assert s.last_seq() == 1
    s.db.execute("INSERT INTO hosts (id, name, address, created_at) VALUES ('h', 'gpu-box', '10.0.0.2', 0)")


def test_store_from_a_newer_version_is_refused_with_advice(tmp_path):
    db = sqlite3.connect(tmp_path / "ember.db")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(SchemaTooNew, match="Upgrade Ember Studio"):
        Store(tmp_path / "ember.db")


def test_commit_events_is_atomic_with_job_updates(tmp_path):
    s = Store(tmp_path / "ember.db")
    s.insert_job(make_run())
    rows = [(1, "run/r1/train", 1.0, "r1", '{"kind":"train","step":1,"loss":2.5}')]
    with pytest.raises(sqlite3.IntegrityError):
        # A duplicate seq fails the whole batch: neither the events nor the offset are stored.
        s.commit_events(rows + rows, {"r1": {"events_offset": 99}})
    assert s.last_seq() == 0 and s.get_job("r1")["events_offset"] == 0
    s.commit_events(rows, {"r1": {"events_offset": 40}})
    assert s.last_seq() == 1 and s.get_job("r1")["events_offset"] == 40


def test_metrics_rows_come_from_step_events_and_a_rerun_step_replaces(tmp_path):
    s = Store(tmp_path / "ember.db")
    s.insert_job(make_run())
    s.commit_events([
        (1, "run/r1/train", 1.0, "r1", '{"kind":"train","step":1,"loss":2.5,"lr":0.1,"note":"x"}'),
        (2, "run/r1/eval", 1.0, "r1", '{"kind":"eval","step":1,"metrics":{"accuracy":0.5}}'),
        (3, "run/r1/train", 1.0, "r1", '{"kind":"train","step":1,"loss":2.0,"lr":0.1}'),
    ])
    rows = {(m["kind"], m["name"]): m["value"] for m in s.metrics("r1")}
    assert rows == {("train", "loss"): 2.0, ("train", "lr"): 0.1, ("eval", "accuracy"): 0.5}


def test_audit_redacts_secrets(tmp_path):
    s = Store(tmp_path / "ember.db")
    s.audit("gui", "hosts.add", "gpu-box", {"address": "h", "password": "hunter2", "nested": {"api_token": "t"}}, True)
    rec = s.audit_records()[0]
    assert rec["params"] == {"address": "h", "password": "***", "nested": {"api_token": "***"}}
    assert "hunter2" not in json.dumps(s.audit_records())


def test_long_series_are_thinned_to_max_points_keeping_first_and_last(tmp_path):
    s = Store(tmp_path / "ember.db")
    s.insert_job(make_run())
    rows = [(i, "run/r1/train", 0.0, "r1", json.dumps({"kind": "train", "step": i, "loss": 1 / i, "lr": 0.1}))
            for i in range(1, 10_001)]
    s.commit_events(rows)
    s.commit_events([(20_000, "run/r1/eval", 0.0, "r1", json.dumps({"kind": "eval", "step": 10_000,
                                                                    "metrics": {"accuracy": 0.9}}))])
    thin = s.metrics("r1", "train", ["loss"], max_points=100)
    steps = [r["step"] for r in thin]
    assert {r["name"] for r in thin} == {"loss"}
    assert 90 <= len(steps) <= 110 and steps[0] == 1 and steps[-1] == 10_000 and steps == sorted(steps)
    assert len(s.metrics("r1", "train", max_points=100)) == 2 * len(steps)  # loss and lr, each thinned
    assert len(s.metrics("r1", "train")) == 20_000  # no limit: every row
    assert s.metrics("r1", names=["accuracy"], max_points=100) == [
        {"kind": "eval", "name": "accuracy", "step": 10_000, "value": 0.9}]
