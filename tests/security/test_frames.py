"""Hostile frames never drop a connection: each gets the JSON-RPC error the specification prescribes (or,
over the size limit, an error and the end of that connection only), before and after hello, over the Unix
socket and over TLS, and the engine log has no traceback. What the engine writes is strict JSON.

Then the specification's examples over TLS, and a bounded fuzz of a few thousand frames (hypothesis,
derandomized so CI sees the same frames every run).
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api import protocol
from engine.api.paths import read_token
from engine.daemon.rpc_examples import ENV as EXAMPLES_ENV
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process
from tests.engine.test_jsonrpc import SPEC_EXAMPLES, compact, without_error_data

pytestmark = pytest.mark.timeout(120)

MARKER = "marker-7f3a"
# After hello, a ping is the marker: its reply ends what one frame caused. Before hello a ping would end
# the handshake, so the marker is an invalid request with an id, which is answered and changes nothing.
MARKER_AFTER = protocol.encode(protocol.request(MARKER, "ping"))
MARKER_BEFORE = b'{"jsonrpc":"2.0","id":"' + MARKER.encode() + b'","method":1}\n'
# Errors after which the engine closes the connection on purpose, having said why.
CLOSING = {protocol.UNAUTHORIZED, protocol.HANDSHAKE_REQUIRED, protocol.UNSUPPORTED_VERSION,
           protocol.FRAME_TOO_LARGE}


def strict_loads(data: bytes):
    """Parse as a strict JSON parser does: valid UTF-8, no NaN or Infinity, no lone surrogates."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    value = json.loads(data.decode("utf-8"), parse_constant=refuse)
    json.dumps(value, ensure_ascii=False).encode("utf-8")  # a lone surrogate cannot be UTF-8
    return value


@dataclass
class Team:
    engine: RunningEngine
    address: str  # the TLS listener
    token: str  # an operator's, as the user who found these had

    @property
    def log(self) -> str:
        return (self.engine.paths.home / "engine.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> Iterator[Team]:
    """One engine for the file: the Unix socket, a TLS listener, and the specification's example methods."""
    with pytest.MonkeyPatch.context() as mp:
        home = tmp_path_factory.mktemp("frames") / "home"
        mp.setenv("EMBER_HOME", str(home))
        mp.setenv("EMBER_SSH_KNOWN_HOSTS", "")
        mp.delenv("EMBER_RUNTIME_DIR", raising=False)
        mp.setenv(EXAMPLES_ENV, "1")
        from engine.api import paths as paths_mod

        p = paths_mod.resolve()
        eng = RunningEngine(p, start_engine_process(p, "--listen", "127.0.0.1:0"))
        try:
            with eng.client("admin") as admin:
                address = admin.call("engine.status")["tls"]["listen"]
                token = admin.call("users.add", name="ops", role="operator", projects=["vision"])["token"]
            yield Team(eng, address, token)
        finally:
            eng.stop()
            kill_job_groups(home)


class Conn:
    """A raw connection, Unix socket or TLS, that sends bytes and reads lines."""

    def __init__(self, team: Team, transport: str, hello: bool):
        if transport == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(15)
            sock.connect(str(team.engine.paths.socket))
            self.token = read_token(team.engine.paths)
        else:
            host, port = team.address.rsplit(":", 1)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            sock = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=15), server_hostname=host)
            self.token = team.token
        self.sock: socket.socket = sock
        self.buf = b""
        self.authenticated = False
        if hello:
            self.hello()

    def hello(self) -> None:
        self.send(protocol.encode(protocol.request("h", "hello", {"token": self.token, "protocol": protocol.PROTOCOL_VERSION})))
        reply = json.loads(self.line())
        assert reply.get("id") == "h" and "result" in reply, reply
        self.authenticated = True

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes:
        """The next line without its newline; b"" once the engine has closed the connection."""
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                chunk = b""
            if not chunk:
                return b""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def exchange(self, frame: bytes) -> tuple[list[bytes], bool]:
        """Send one frame (newline added) and the marker: (the lines the frame caused, whether still open)."""
        try:
            self.send(frame + b"\n" + (MARKER_AFTER if self.authenticated else MARKER_BEFORE))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the engine may close before reading everything (an oversized frame); its reply is read below
        lines = []
        while True:
            line = self.line()
            if not line:
                return lines, False
            msg = strict_loads(line)
            if isinstance(msg, dict) and msg.get("id") == MARKER:
                return lines, True
            lines.append(line)

    def ping(self) -> bool:
        self.send(protocol.encode(protocol.request("p", "ping")))
        reply = json.loads(self.line())
        return reply.get("id") == "p" and reply["result"]["t"] > 0

    def close(self) -> None:
        self.sock.close()


def assert_no_traceback(team: Team) -> None:
    log = team.log
    assert "Traceback" not in log, log[log.index("Traceback") - 300:][:3000]


# (what the user sent, the error code, the reply's id)
HOSTILE = {
    "method is an object": (b'{"jsonrpc":"2.0","id":1,"method":{}}', protocol.INVALID_REQUEST, 1),
    "method is an array": (b'{"jsonrpc":"2.0","id":2,"method":["ping"]}', protocol.INVALID_REQUEST, 2),
    "id with a lone surrogate": (b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', protocol.PARSE_ERROR, None),
    "surrogate in UTF-8 bytes": (b'{"jsonrpc":"2.0","id":"\xed\xa0\x80","method":"ping"}', protocol.PARSE_ERROR, None),
    "invalid UTF-8": (b'{"jsonrpc":"2.0","id":3,"method":"pi\xffng"}', protocol.PARSE_ERROR, None),
    "1,100 nested brackets": (b"[" * 1100 + b"]" * 1100, protocol.PARSE_ERROR, None),
    "65 nested objects": (b'{"a":' * 65 + b"1" + b"}" * 65, protocol.PARSE_ERROR, None),
    "id 1e400": (b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}', protocol.INVALID_REQUEST, None),
    "id NaN": (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', protocol.PARSE_ERROR, None),
    "id -Infinity": (b'{"jsonrpc":"2.0","id":-Infinity,"method":"ping"}', protocol.PARSE_ERROR, None),
    "id of 5,000 digits": (b'{"jsonrpc":"2.0","id":' + b"7" * 5000 + b',"method":"ping"}', protocol.PARSE_ERROR, None),
    "params a number": (b'{"jsonrpc":"2.0","id":4,"method":"ping","params":5}', protocol.INVALID_REQUEST, 4),
}


@pytest.mark.parametrize("transport", ["unix", "tls"])
@pytest.mark.parametrize("before_hello", [True, False], ids=["before-hello", "after-hello"])
def test_each_hostile_frame_is_answered_and_the_connection_goes_on(team, transport, before_hello):
    c = Conn(team, transport, hello=not before_hello)
    for name, (frame, code, req_id) in HOSTILE.items():
        lines, still_open = c.exchange(frame)
        assert still_open and len(lines) == 1, (name, lines)
        reply = strict_loads(lines[0])
        assert (reply["error"]["code"], reply["id"]) == (code, req_id), (name, reply)
        assert reply["error"]["data"]["hint"], name
    if before_hello:
        c.hello()  # the connection is as good as new
    assert c.ping()
    c.close()
    assert_no_traceback(team)


@pytest.mark.parametrize("transport", ["unix", "tls"])
@pytest.mark.parametrize("before_hello", [True, False], ids=["before-hello", "after-hello"])
def test_an_oversized_frame_closes_only_that_connection(team, transport, before_hello):
    bystander = Conn(team, transport, hello=True)
    c = Conn(team, transport, hello=not before_hello)
    lines, still_open = c.exchange(b"[" * (protocol.MAX_FRAME_BYTES + 10))
    assert not still_open
    assert [strict_loads(line)["error"]["code"] for line in lines] == [protocol.FRAME_TOO_LARGE]
    c.close()
    assert bystander.ping()
    bystander.close()
    assert_no_traceback(team)


@pytest.mark.parametrize("raw_id", [b"1e400", b"-1e400", b"NaN", b"Infinity", b"1e308"])
def test_ids_are_answered_with_strict_json(team, raw_id):
    c = Conn(team, "tls", hello=True)
    lines, still_open = c.exchange(b'{"jsonrpc":"2.0","method":"ping","id":' + raw_id + b"}")
    assert still_open and len(lines) == 1
    reply = strict_loads(lines[0])  # raises on a bare NaN or Infinity
    if raw_id == b"1e308":
        assert reply["id"] == 1e308 and "result" in reply  # a large finite number is a fine id
    else:
        assert reply["id"] is None and reply["error"]["code"] in (protocol.PARSE_ERROR, protocol.INVALID_REQUEST)
    c.close()


def test_the_specifications_examples_over_tls(team):
    """tests/engine/test_jsonrpc.py sends them over the Unix socket; the same engine code answers TLS."""
    c = Conn(team, "tls", hello=True)
    for title, exchanges in SPEC_EXAMPLES.items():
        for sent, expected in exchanges:
            lines, still_open = c.exchange(" ".join(sent.splitlines()).encode())
            assert still_open, title
            if expected is None:
                assert lines == [], title
                continue
            assert len(lines) == 1, title
            got, want = strict_loads(lines[0]), json.loads(expected)
            if isinstance(want, list):
                assert sorted(compact(without_error_data(r)) for r in got) == sorted(compact(r) for r in want), title
            else:
                assert compact(without_error_data(got)) == compact(want), title
    c.close()


# ---- the fuzz
# Methods a fuzzed frame may name: none changes what the others see or stops the engine. "hello" is left out
# before hello: a wrong token over TLS is a failed login, and five of those refuse 127.0.0.1 for a minute.
METHODS = ["ping", "engine.methods", "users.me", "jobs.list", "jobs.get", "queue.get", "engine.status",
           "subtract", "sum", "get_data", "update", "no.such.method", "", "event"]
VALID = [b'{"jsonrpc":"2.0","id":1,"method":"ping"}', b'{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"a"}',
         b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"update"}]',
         b'{"jsonrpc":"2.0","id":2,"method":"jobs.get","params":{"id":"r-none"}}']
RAW_NUMBERS = [b"1e400", b"-1e400", b"1e-400", b"NaN", b"Infinity", b"-Infinity", b"9" * 4400, b"-0", b"1E+2",
               b"0x10", b"01", b"1.", b".5", b"+1", b"18446744073709551616"]

surrogates = st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\ud83d", "\U0001f4a5", "\u202e", "\x00"])
texts = st.text(max_size=12) | surrogates | st.sampled_from(METHODS)
numbers = st.integers() | st.floats() | st.sampled_from([10**30, 2**63, -(2**63) - 1, 10**400, -0.0])
scalars = st.none() | st.booleans() | numbers | texts
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                      max_leaves=8)
requests = st.fixed_dictionaries({}, optional={
    "jsonrpc": st.just("2.0") | values, "id": values, "method": st.sampled_from(METHODS) | values,
    "params": values})


@st.composite
def as_json(draw, value_strategy) -> bytes:
    """A value written as JSON the way some client might: NaN allowed, surrogates possibly raw."""
    text = json.dumps(draw(value_strategy), ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


@st.composite
def mutated(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(VALID)))
    for pos, data, overwrite in draw(st.lists(st.tuples(st.integers(0, 200), st.binary(max_size=3), st.booleans()),
                                              min_size=1, max_size=4)):
        pos %= len(frame) + 1
        frame[pos:pos + (len(data) if overwrite else 0)] = data
    return bytes(frame[:draw(st.integers(1, len(frame)))] if draw(st.booleans()) else frame)


deep = st.tuples(st.integers(50, 5000), st.sampled_from([(b"[", b"]"), (b'{"a":', b"}"), (b"[", b"")])).map(
    lambda d: d[1][0] * d[0] + b"0" + d[1][1] * d[0])
raw_numbers = st.tuples(st.sampled_from(RAW_NUMBERS), st.sampled_from(["id", "method", "params", "jsonrpc"])).map(
    lambda n: b'{"jsonrpc":"2.0","id":1,"method":"ping","%s":%s}' % (n[1].encode(), n[0]))
frames = (as_json(requests) | as_json(st.lists(requests, max_size=4)) | as_json(values) | mutated()
          | st.binary(max_size=120) | deep | raw_numbers).map(lambda b: b.replace(b"\n", b" "))


@dataclass
class Tally:
    frames: int = 0
    dropped: list[tuple[bytes, list[bytes]]] = field(default_factory=list)  # closed without saying why
    unanswered: list[bytes] = field(default_factory=list)  # a frame that needed a reply got none


def parses_strictly(frame: bytes):
    try:
        return True, strict_loads(frame)
    except (ValueError, RecursionError):
        return False, None


def only_notifications(value) -> bool:
    """Whether a frame could be answered with nothing: a request object without id, or a batch of them."""
    if isinstance(value, dict):
        return "id" not in value
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and "id" not in v for v in value)


def judge(tally: Tally, frame: bytes, lines: list[bytes], still_open: bool, before_hello: bool) -> None:
    tally.frames += 1
    ok, value = parses_strictly(frame)
    replies = [strict_loads(line) for line in lines]  # every line the engine writes is strict JSON
    for reply in replies:
        for r in reply if isinstance(reply, list) else [reply]:
            assert r["jsonrpc"] == "2.0" and "id" in r and ("result" in r) != ("error" in r), (frame, r)
    if len(replies) > 1:
        tally.unanswered.append(frame)  # one frame, one line
    if not ok:  # not JSON, not Unicode, or too deep for Python's own parser: exactly one parse error
        if [(r.get("error", {}).get("code"), r.get("id")) for r in replies] != [(protocol.PARSE_ERROR, None)]:
            tally.unanswered.append(frame)
    elif not replies and not only_notifications(value):
        tally.unanswered.append(frame)
    if not still_open:
        last = replies[-1] if replies and isinstance(replies[-1], dict) else {}
        said_why = last.get("error", {}).get("code") in CLOSING
        # Before hello, a notification other than hello ends the handshake without a reply (section 4.1).
        if not said_why and not (before_hello and only_notifications(value)):
            tally.dropped.append((frame, lines))


def run_fuzz(team: Team, transport: str, before_hello: bool, batch: list[bytes]) -> Tally:
    tally = Tally()
    c = Conn(team, transport, hello=not before_hello)
    for frame in batch:
        lines, still_open = c.exchange(frame)
        judge(tally, frame, lines, still_open, before_hello)
        if not still_open:
            c.close()
            c = Conn(team, transport, hello=not before_hello)
    if not c.authenticated:
        c.hello()
    assert c.ping()  # the engine answers afterwards
    c.close()
    return tally


FUZZ = settings(max_examples=20, deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])


@pytest.mark.parametrize("transport", ["unix", "tls"])
@pytest.mark.parametrize("before_hello", [True, False], ids=["before-hello", "after-hello"])
def test_fuzzed_frames_are_answered_and_never_drop_a_connection(team, transport, before_hello):
    totals = Tally()

    @FUZZ
    @given(batch=st.lists(frames, min_size=25, max_size=40))
    def fuzz(batch):
        tally = run_fuzz(team, transport, before_hello, batch)
        totals.frames += tally.frames
        assert not tally.dropped, f"dropped without a reply: {tally.dropped[:3]}"
        assert not tally.unanswered, f"not answered as the specification says: {tally.unanswered[:3]}"

    fuzz()
    assert totals.frames >= 500
    assert_no_traceback(team)
    assert team.engine.proc.poll() is None
