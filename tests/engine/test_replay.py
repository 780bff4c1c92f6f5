"""subscribe(since=N): a reconnecting client misses nothing and sees nothing twice."""

import itertools

from engine.cli.client import BlockingClient


def collect(client: BlockingClient, n: int, timeout: float = 20.0) -> list[dict]:
    return list(itertools.islice(client.events(timeout=timeout), n))


def test_reconnect_with_since_gets_every_later_event_exactly_once(engine_proc):
    total, cut = 5000, 1234
    with engine_proc.client("producer") as producer:
        first = engine_proc.client("subscriber")
        first.subscribe(["diag/replay"], since=producer.call("engine.status")["last_seq"])
        producer.call("diag.burst", topic="diag/replay", count=total)
        seen = collect(first, cut)
        last = seen[-1]["seq"]
        first.close()  # drops whatever else was in flight

        # More events arrive while the subscriber is away.
        producer.call("diag.burst", topic="diag/replay", count=total)
        producer.call("diag.burst", topic="diag/other", count=100)

        second = engine_proc.client("subscriber-again")
        second.subscribe(["diag/replay"], since=last)
        # ...and more while it replays.
        producer.call("diag.burst", topic="diag/replay", count=500)
        rest = collect(second, 2 * total + 500 - cut, timeout=30)
        assert second.next_event(timeout=1.0) is None, "an event was delivered twice"
        second.close()

    seqs = [e["seq"] for e in seen + rest]
    assert len(seqs) == 2 * total + 500
    assert seqs == sorted(set(seqs)), "events out of order or repeated"
    assert all(e["topic"] == "diag/replay" for e in rest)
    indices = [e["data"]["i"] for e in seen + rest]
    assert indices == list(range(total)) * 2 + list(range(500))


def test_replay_survives_an_engine_restart(engine_proc):
    with engine_proc.client() as c:
        first = c.call("diag.burst", topic="diag/persist", count=3000)
    engine_proc.kill()
    engine_proc.restart()
    with engine_proc.client() as c:
        c.subscribe(["diag/persist"], since=first["first_seq"] - 1)
        events = collect(c, 3000)
        assert [e["seq"] for e in events] == list(range(first["first_seq"], first["last_seq"] + 1))
        # Numbering continues after the restart: no seq is reused.
        again = c.call("diag.burst", topic="diag/persist", count=1)
        assert again["first_seq"] == first["last_seq"] + 1


def test_subscription_without_since_is_live_only_and_globs_match(engine_proc):
    with engine_proc.client() as c:
        c.call("diag.burst", topic="diag/a/old", count=10)
        c.subscribe(["diag/a/*"])
        c.call("diag.burst", topic="diag/b/x", count=10)
        c.call("diag.burst", topic="diag/a/new", count=3)
        got = collect(c, 3)
        assert [e["topic"] for e in got] == ["diag/a/new"] * 3
        assert c.next_event(timeout=0.5) is None


def test_events_query_and_unsubscribe(engine_proc):
    with engine_proc.client() as c:
        burst = c.call("diag.burst", topic="diag/q", count=50)
        res = c.call("events.query", topics=["diag/q"], since=burst["first_seq"] + 9, limit=5)
        assert [e["seq"] for e in res["events"]] == list(range(burst["first_seq"] + 10, burst["first_seq"] + 15))
        sub = c.subscribe(["diag/q"])
        assert c.call("unsubscribe", subscription=sub) == {"ok": True}
        c.call("diag.burst", topic="diag/q", count=5)
        assert c.next_event(timeout=0.5) is None
