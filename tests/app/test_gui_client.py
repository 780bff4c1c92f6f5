"""EngineClient against the real engine: requests, errors, and events across reconnects."""

from __future__ import annotations

import os
import signal

import pytest

from app.connection.engine_client import NOT_CONNECTED, EngineClient
from engine.api.protocol import METHOD_NOT_FOUND
from engine.cli.client import BlockingClient
from tests.app.conftest import CONNECT_TIMEOUT_MS, wait_connected

pytestmark = pytest.mark.slow


def collect(client, topics):
    seen: list[tuple[int, int]] = []  # (seq, i) in arrival order
    client.subscribe(topics, lambda _topic, seq, data: seen.append((seq, data["i"])))
    return seen


def burst(paths, count: int, topic: str = "diag/gui") -> tuple[int, int]:
    with BlockingClient.connect(paths, client="publisher", timeout=30) as other:
        reply = other.call("diag.burst", topic=topic, count=count)
    return reply["first_seq"], reply["last_seq"]


def test_requests_get_results_and_errors(qtbot, make_window):
    window = make_window()
    wait_connected(qtbot, window)
    client = window.engine.client
    results, errors = [], []
    client.request("engine.status", {}, results.append, errors.append)
    client.request("no.such.method", {}, results.append, errors.append)
    qtbot.waitUntil(lambda: len(results) + len(errors) == 2, timeout=10_000)
    assert results[0]["pid"] == window.engine.engine_pid
    assert errors[0].code == METHOD_NOT_FOUND and errors[0].hint


def test_a_request_while_disconnected_fails_on_the_next_turn(qtbot):
    client = EngineClient()
    errors = []
    assert client.request("ping", {}, None, errors.append) is None
    assert errors == []  # never inside the call: callers need not guard against re-entry
    qtbot.waitUntil(lambda: len(errors) == 1, timeout=2000)
    assert errors[0].code == NOT_CONNECTED and errors[0].hint


def test_events_missed_while_disconnected_are_replayed_once(qtbot, make_window, gui_home):
    window = make_window()
    wait_connected(qtbot, window)
    client = window.engine.client
    seen = collect(client, ["diag/*"])
    overlapping = collect(client, ["diag/gui"])  # a second subscription that sees the same events
    qtbot.wait(300)  # let the subscribe requests be answered

    first, last = burst(gui_home, 200)
    qtbot.waitUntil(lambda: len(seen) == 200, timeout=20_000)

    # Drop the connection; while the GUI cannot read, more events are committed.
    client._socket.abort()
    missed_first, missed_last = burst(gui_home, 300)
    qtbot.waitUntil(lambda: window.engine.state == "connected" and len(seen) >= 500,
                    timeout=CONNECT_TIMEOUT_MS)
    live_first, live_last = burst(gui_home, 50)
    qtbot.waitUntil(lambda: len(seen) >= 550, timeout=20_000)
    qtbot.wait(300)

    expected = list(range(first, last + 1)) + list(range(missed_first, missed_last + 1)) + \
        list(range(live_first, live_last + 1))
    assert [seq for seq, _ in seen] == expected  # nothing missed, nothing twice, in order
    assert [seq for seq, _ in overlapping] == expected
    assert client.last_seq >= live_last


@pytest.mark.own_engine  # the window restarts this machine's engine after the crash
def test_subscriptions_survive_an_engine_crash(qtbot, make_window, gui_home):
    window = make_window()
    wait_connected(qtbot, window)
    seen = collect(window.engine.client, ["diag/*"])
    qtbot.wait(300)
    burst(gui_home, 20)
    qtbot.waitUntil(lambda: len(seen) == 20, timeout=20_000)

    os.kill(window.engine.engine_pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: window.engine.state == "reconnecting", timeout=10_000)
    wait_connected(qtbot, window)
    qtbot.wait(300)
    first, last = burst(gui_home, 20)
    qtbot.waitUntil(lambda: len(seen) == 40, timeout=20_000)
    seqs = [seq for seq, _ in seen]
    assert seqs[20:] == list(range(first, last + 1))
    assert seqs == sorted(set(seqs))  # the seq counter lives in the store: it never goes back
