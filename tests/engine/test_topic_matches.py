"""Topic globs: one rule (engine/api/protocol.py), used by the engine's event bus and the GUI's client."""

from engine.api.protocol import topic_matches
from engine.daemon.eventbus import Subscriber


def test_globs_match_as_the_protocol_says():
    assert topic_matches("run/r2026-1/status", ["run/*/status"])
    assert topic_matches("run/r2026-1/train", ["jobs", "run/r2026*/*"])
    assert topic_matches("hosts/jetson1", ["hosts/jetson[0-9]"]) and topic_matches("diag/a", ["diag/?"])
    assert not topic_matches("jobs2", ["jobs"]) and not topic_matches("Jobs", ["jobs"])  # whole and case-sensitive
    assert not topic_matches("run/r1/train", ["run/r2/*"]) and not topic_matches("jobs", [])


def test_the_event_bus_uses_that_rule():
    sub = Subscriber(1, ["run/r1/*", "queue"], sink=lambda _frame: None)
    assert sub.matches("run/r1/eval") and sub.matches("queue")
    assert not sub.matches("run/r10/eval") and not sub.matches("queue/x")
