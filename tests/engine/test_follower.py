"""The follower reads only complete lines, skips malformed ones with a warning, and resumes exactly."""

import asyncio
import json

from engine.daemon.eventbus import EventBus
from engine.daemon.follower import Follower
from engine.daemon.store import Store


def run_dir_with_run(tmp_path, store):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store.insert_job({"id": "r1", "kind": "system.probe", "state": "running", "created_at": 0.0,
                      "run_dir": str(run_dir), "spec": {}})
    return run_dir


def test_partial_and_malformed_lines(tmp_path):
    store = Store(tmp_path / "ember.db")
    run_dir = run_dir_with_run(tmp_path, store)
    events = run_dir / "events.jsonl"

    async def scenario():
        bus = EventBus(store)
        f = Follower(bus, "r1", run_dir, offset=0)
        assert f.poll() == 0  # no file yet
        events.write_text('{"kind":"status","state":"running"}\n{"kind":"train","step":1,"lo')
        assert f.poll() == 1
        bus.flush()
        assert store.get_job("r1")["events_offset"] == len('{"kind":"status","state":"running"}\n')
        with open(events, "a") as fh:
            fh.write('ss":2.0}\nnot json at all\n[1,2]\n{"kind":"status","state":"succeeded"}\n')
        assert f.poll() == 4
        bus.flush()
        return f

    f = asyncio.run(scenario())
    rows = store.query_events(["run/r1/*"], 0)
    topics = [r[1] for r in rows]
    assert topics == ["run/r1/status", "run/r1/train", "run/r1/warning", "run/r1/warning", "run/r1/status"]
    assert json.loads(rows[1][3]) == {"kind": "train", "step": 1, "loss": 2.0}
    assert "not a JSON object" in json.loads(rows[2][3])["message"]
    run = store.get_job("r1")
    assert run["events_offset"] == events.stat().st_size
    assert run["reported_state"] == "succeeded" and f.bad_lines == 2
    assert store.metrics("r1") == [{"kind": "train", "name": "loss", "step": 1, "value": 2.0}]


def test_resume_from_committed_offset_stores_each_line_once(tmp_path):
    store = Store(tmp_path / "ember.db")
    run_dir = run_dir_with_run(tmp_path, store)
    lines = [json.dumps({"kind": "sample", "step": i}) + "\n" for i in range(100)]
    (run_dir / "events.jsonl").write_text("".join(lines[:60]))

    async def follow_once():
        bus = EventBus(store)
        f = Follower(bus, "r1", run_dir, offset=store.get_job("r1")["events_offset"])
        f.poll()
        bus.flush()

    asyncio.run(follow_once())
    with open(run_dir / "events.jsonl", "a") as fh:
        fh.write("".join(lines[60:]))
    asyncio.run(follow_once())  # a new engine, starting from the stored offset
    steps = [json.loads(r[3])["step"] for r in store.query_events(["run/r1/*"], 0, limit=1000)]
    assert steps == list(range(100))


def test_a_failure_keeps_its_reason_on_the_job(tmp_path):
    """A diverged run's final status says why (reason), and the job's error keeps it for lists and notices."""
    store = Store(tmp_path / "ember.db")
    run_dir = run_dir_with_run(tmp_path, store)
    (run_dir / "events.jsonl").write_text(
        '{"kind":"status","state":"running"}\n'
        '{"kind":"status","state":"failed","message":"Training diverged at step 5","hint":"Lower optim.lr",'
        '"reason":"diverged"}\n')

    async def scenario():
        bus = EventBus(store)
        f = Follower(bus, "r1", run_dir, offset=0)
        f.poll()
        bus.flush()
        return f

    f = asyncio.run(scenario())
    assert f.reported_state == "failed"
    assert f.last_error == {"message": "Training diverged at step 5", "hint": "Lower optim.lr", "reason": "diverged"}
