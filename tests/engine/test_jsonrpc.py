"""The engine speaks all of JSON-RPC 2.0: the specification's own examples (its section 7), sent as raw
lines to a real engine started with EMBER_RPC_EXAMPLES=1 (engine/daemon/rpc_examples.py), then the
notification and batch rules (sections 4.1 and 6) with Ember's own methods.

What the comparison normalises, and nothing else:
- whitespace: the specification spreads some examples over several lines and puts spaces after ':'
  and ','; Ember's frames are one compact line. Requests are sent with the spec's newlines turned into
  spaces; expected replies are compacted (json.loads then compact json.dumps, key order kept), and
  each engine line is first checked to be compact already, so it is compared as sent.
- error.data: Ember adds it to every error (its precise sentence in data.detail, and data.hint);
  the specification leaves data to the server. It is checked to be there, then removed.
- the order of a batch's replies, which the specification leaves open (section 6).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from engine.api import protocol
from engine.api.paths import read_token
from engine.daemon.rpc_examples import ENV
from tests.conftest import RunningEngine, start_engine_process

# (what the client sends, what the spec says comes back or None for nothing), verbatim from section 7.
SPEC_EXAMPLES = {
    "rpc call with positional parameters": [
        ('{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}',
         '{"jsonrpc": "2.0", "result": 19, "id": 1}'),
        ('{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}',
         '{"jsonrpc": "2.0", "result": -19, "id": 2}'),
    ],
    "rpc call with named parameters": [
        ('{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}',
         '{"jsonrpc": "2.0", "result": 19, "id": 3}'),
        ('{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}',
         '{"jsonrpc": "2.0", "result": 19, "id": 4}'),
    ],
    "a Notification": [
        ('{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}', None),
        ('{"jsonrpc": "2.0", "method": "foobar"}', None),
    ],
    "rpc call of non-existent method": [
        ('{"jsonrpc": "2.0", "method": "foobar", "id": "1"}',
         '{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}'),
    ],
    "rpc call with invalid JSON": [
        ('{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]',
         '{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}'),
    ],
    "rpc call with invalid Request object": [
        ('{"jsonrpc": "2.0", "method": 1, "params": "bar"}',
         '{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}'),
    ],
    "rpc call Batch, invalid JSON": [
        ("""[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]""",
         '{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}'),
    ],
    "rpc call with an empty Array": [
        ("[]", '{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}'),
    ],
    "rpc call with an invalid Batch (but not empty)": [
        ("[1]", """[
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
]"""),
    ],
    "rpc call with invalid Batch": [
        ("[1,2,3]", """[
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
]"""),
    ],
    "rpc call Batch": [
        ("""[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]""", """[
        {"jsonrpc": "2.0", "result": 7, "id": "1"},
        {"jsonrpc": "2.0", "result": 19, "id": "2"},
        {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},
        {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}
    ]"""),
    ],
    "rpc call Batch (all notifications)": [
        ("""[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]""", None),
    ],
}

MARKER_ID = "marker"  # a ping sent after each exchange: its reply is the next line unless something came first


class Wire:
    """A raw connection that has said hello; sends lines, reads lines."""

    def __init__(self, paths, hello: bool = True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(15)
        self.sock.connect(str(paths.socket))
        self.buf = b""
        self.token = read_token(paths)
        if hello:
            self.send(protocol.encode(protocol.request(0, "hello", {"token": self.token, "protocol": protocol.PROTOCOL_VERSION})))
            assert "result" in json.loads(self.line())

    def send(self, data: str | bytes) -> None:
        self.sock.sendall(data.encode() if isinstance(data, str) else data)

    def line(self) -> bytes:
        """The next line, without its newline; b"" when the engine closed the connection."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return b""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def replies_to(self, text: str) -> bytes | None:
        """Send one frame and return the line it caused, or None when the engine sent nothing for it."""
        self.send(" ".join(text.splitlines()) + "\n")
        self.send(protocol.encode(protocol.request(MARKER_ID, "ping")))
        first = self.line()
        if is_marker(json.loads(first)):
            return None
        assert is_marker(json.loads(self.line())), "more than one reply to one frame"
        return first

    def call(self, method: str, params=None, req_id: int | str = "c") -> dict:
        self.send(protocol.encode(protocol.request(req_id, method, params)))
        return json.loads(self.line())

    def close(self) -> None:
        self.sock.close()


def is_marker(msg) -> bool:
    return isinstance(msg, dict) and msg.get("id") == MARKER_ID and "result" in msg


def compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def without_error_data(reply: dict) -> dict:
    if "error" in reply:
        data = reply["error"].pop("data")  # Ember always says why, and what to do
        assert data["detail"] and data["hint"], reply
    return reply


@pytest.fixture
def examples_engine(ember_home, monkeypatch) -> Iterator[RunningEngine]:
    monkeypatch.setenv(ENV, "1")
    eng = RunningEngine(ember_home, start_engine_process(ember_home))
    yield eng
    eng.stop()


@pytest.fixture
def wire(engine_proc) -> Iterator[Wire]:
    w = Wire(engine_proc.paths)
    yield w
    w.close()


def test_every_example_of_the_specification(examples_engine):
    w = Wire(examples_engine.paths)
    for title, exchanges in SPEC_EXAMPLES.items():
        for sent, expected in exchanges:
            line = w.replies_to(sent)
            if expected is None:
                assert line is None, f"{title}: the spec expects no reply, got {line!r}"
                continue
            assert line is not None, f"{title}: no reply"
            got = json.loads(line)
            assert compact(got) == line, f"{title}: the engine's line is not compact JSON"
            want = json.loads(expected)
            if isinstance(want, list):
                assert isinstance(got, list), f"{title}: a batch is answered with an array"
                assert sorted(compact(without_error_data(r)) for r in got) == \
                    sorted(compact(r) for r in want), title
            else:
                assert compact(without_error_data(got)) == compact(want), title
    w.close()


def test_example_methods_exist_only_with_the_flag(wire):
    reply = wire.call("subtract", [42, 23])
    assert reply["error"]["code"] == protocol.METHOD_NOT_FOUND
    assert "subtract" not in reply["error"]["data"]["methods"]


def test_notifications_run_but_are_never_answered(engine_proc, wire):
    assert wire.call("engine.status")["result"]["max_concurrent"] != 5
    # A notification that works: it takes effect, and nothing comes back for it.
    assert wire.replies_to('{"jsonrpc":"2.0","method":"queue.configure","params":{"max_concurrent":5}}') is None
    assert wire.call("engine.status")["result"]["max_concurrent"] == 5
    # Notifications that fail: unknown method, bad params, no such job. Still nothing (section 4.1).
    for sent in ('{"jsonrpc":"2.0","method":"jobs.explode"}',
                 '{"jsonrpc":"2.0","method":"jobs.get","params":{"id":"r-none"}}',
                 '{"jsonrpc":"2.0","method":"ping","params":{"x":1}}',
                 '{"jsonrpc":"2.0","method":"jobs.get","params":["r-none"]}'):
        assert wire.replies_to(sent) is None, sent
    # A message that is not a valid request is no notification: it is answered, with id null.
    reply = json.loads(wire.replies_to('{"jsonrpc":"1.0","method":"ping"}'))
    assert (reply["id"], reply["error"]["code"]) == (None, protocol.INVALID_REQUEST)


def test_ids_of_every_kind_are_echoed_and_null_is_still_a_request(wire):
    for req_id in (7, "seven", 7.5, None):
        reply = json.loads(wire.replies_to(json.dumps({"jsonrpc": "2.0", "method": "ping", "id": req_id})))
        assert reply["id"] == req_id and reply["result"]["t"] > 0
    reply = json.loads(wire.replies_to('{"jsonrpc":"2.0","method":"ping","id":true}'))
    assert (reply["id"], reply["error"]["code"]) == (None, protocol.INVALID_REQUEST)


def test_batches_of_embers_own_methods(wire):
    batch = [
        {"jsonrpc": "2.0", "method": "ping", "id": 1},
        {"jsonrpc": "2.0", "method": "queue.configure", "params": {"max_concurrent": 4}},  # notification
        {"jsonrpc": "2.0", "method": "engine.status", "id": 2},
        {"jsonrpc": "2.0", "method": "jobs.get", "params": {"id": "r-none"}, "id": 3},
        {"jsonrpc": "2.0", "method": "jobs.get", "params": {"id": "r-none"}},  # failing notification
        "not a request",
    ]
    replies = json.loads(wire.replies_to(json.dumps(batch)))
    by_id = {r["id"]: r for r in replies}
    assert len(replies) == 4 and set(by_id) == {1, 2, 3, None}
    assert by_id[1]["result"]["t"] > 0
    assert by_id[2]["result"]["max_concurrent"] == 4  # the batch's requests act in the order written
    assert by_id[3]["error"]["code"] == protocol.NOT_FOUND
    assert by_id[None]["error"]["code"] == protocol.INVALID_REQUEST
    # Only notifications, some failing: nothing at all comes back.
    assert wire.replies_to(json.dumps([batch[1], batch[4]])) is None


def test_positional_params_to_embers_methods(wire):
    reply = wire.call("jobs.get", ["r-none"])
    assert reply["error"]["code"] == protocol.INVALID_PARAMS
    assert "named parameters" in reply["error"]["data"]["detail"]
    assert wire.call("ping", [])["result"]["t"] > 0  # an empty array is no parameters
    assert wire.call("jobs.nothing", [1])["error"]["code"] == protocol.METHOD_NOT_FOUND


def test_standard_errors_carry_the_specifications_message_and_embers_detail(wire):
    reply = json.loads(wire.replies_to('{"jsonrpc": "2.0", "method"'))
    assert reply["error"]["message"] == "Parse error"
    assert reply["error"]["data"]["detail"].startswith("Not valid JSON")
    reply = wire.call("jobs.start", {"kind": "system.probe", "spec": {"samples": -1}})
    assert reply["error"]["message"] == "Invalid params"
    assert reply["error"]["data"]["fields"][0]["field"] == "samples"


def test_a_batch_before_hello_is_refused_and_the_connection_closed(engine_proc):
    w = Wire(engine_proc.paths, hello=False)
    hello = {"jsonrpc": "2.0", "method": "hello", "params": {"token": w.token, "protocol": protocol.PROTOCOL_VERSION}, "id": 1}
    w.send(json.dumps([hello]) + "\n")
    reply = json.loads(w.line())
    assert (reply["id"], reply["error"]["code"]) == (None, protocol.HANDSHAKE_REQUIRED)
    assert w.line() == b""
    w.close()


def test_notifications_before_hello(engine_proc):
    # hello as a notification authenticates without a reply.
    w = Wire(engine_proc.paths, hello=False)
    w.send(json.dumps({"jsonrpc": "2.0", "method": "hello", "params": {"token": w.token, "protocol": protocol.PROTOCOL_VERSION}}) + "\n")
    assert w.call("ping")["result"]["t"] > 0
    w.close()
    # Any other notification first: no reply (section 4.1), but the handshake rule holds: closed.
    w = Wire(engine_proc.paths, hello=False)
    w.send('{"jsonrpc":"2.0","method":"jobs.list"}\n')
    assert w.line() == b""
    w.close()
    # So is a hello notification with a wrong token.
    w = Wire(engine_proc.paths, hello=False)
    w.send('{"jsonrpc":"2.0","method":"hello","params":{"token":"nope"}}\n')
    assert w.line() == b""
    w.close()


def test_a_batch_over_the_line_limit_is_refused_and_only_that_connection_closed(engine_proc, wire):
    ping = b'{"jsonrpc":"2.0","method":"ping","id":1},'
    big = b"[" + ping * (protocol.MAX_FRAME_BYTES // len(ping) + 1) + b'{"jsonrpc":"2.0","method":"ping","id":1}]\n'
    try:
        wire.send(big)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the engine may close before the whole line is written
    assert json.loads(wire.line())["error"]["code"] == protocol.FRAME_TOO_LARGE
    with engine_proc.client() as c:
        assert c.call("ping")["t"] > 0


def test_event_notifications_still_arrive_alone(wire):
    sub = wire.call("subscribe", {"topics": ["diag/*"]}, req_id=1)["result"]["subscription"]
    assert sub
    batch = [{"jsonrpc": "2.0", "method": "diag.burst", "params": {"topic": "diag/x", "count": 2}, "id": 2}]
    wire.send(json.dumps(batch) + "\n")
    lines = [json.loads(wire.line()) for _ in range(3)]
    events = [m for m in lines if isinstance(m, dict) and m.get("method") == "event"]
    assert [e["params"]["data"]["i"] for e in events] == [0, 1]
    assert all("id" not in e for e in events)
    [batch_reply] = [m for m in lines if isinstance(m, list)]
    assert batch_reply[0]["id"] == 2
