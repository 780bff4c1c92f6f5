"""Property-based: whatever a client sends, the engine answers with a structured reply and keeps serving."""

import json
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api import protocol
from engine.api.paths import read_token
from tests.conftest import start_engine_process

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
methods = st.sampled_from(sorted(protocol.METHODS) + ["", "nope", "jobs.", "hello"])


@pytest.fixture(scope="module")
def fuzz_engine(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_HOME", str(tmp_path_factory.mktemp("fuzz") / "home"))
    from engine.api import paths as paths_mod

    p = paths_mod.resolve()
    proc = start_engine_process(p)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(p.socket))
    f = s.makefile("rb")
    s.sendall(protocol.encode(protocol.request(0, "hello", {"token": read_token(p)})))
    assert "result" in json.loads(f.readline())
    yield s, f, proc
    s.close()
    proc.terminate()
    proc.wait(10)
    mp.undo()


def exchange(s, f, frame: bytes) -> dict | list:
    s.sendall(frame)
    reply = json.loads(f.readline())
    for one in reply if isinstance(reply, list) else [reply]:  # a batch is answered with an array
        assert isinstance(one, dict) and one.get("jsonrpc") == "2.0"
        assert ("result" in one) != ("error" in one)
        if "error" in one:
            assert isinstance(one["error"]["code"], int) and one["error"]["message"]
    return reply


# Methods that would change state for real are left out of the random params.
SAFE = st.sampled_from(["ping", "engine.status", "engine.methods", "jobs.kinds", "jobs.list", "jobs.get",
                        "jobs.logs", "events.query", "audit.list", "unsubscribe", "nope", "", "hello"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=SAFE, params=json_values, req_id=st.integers(1, 10**9))
def test_any_params_get_a_structured_reply(fuzz_engine, method, params, req_id):
    s, f, proc = fuzz_engine
    frame = protocol.encode({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
    reply = exchange(s, f, frame)
    assert reply["id"] == req_id
    assert proc.poll() is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300).filter(lambda b: b"\n" not in b))
def test_any_bytes_get_a_structured_reply(fuzz_engine, raw):
    s, f, proc = fuzz_engine
    reply = exchange(s, f, raw + b"\n")
    if isinstance(reply, list) or "result" in reply:  # by chance a valid request or batch
        return
    assert reply["error"]["code"] in (protocol.PARSE_ERROR, protocol.INVALID_REQUEST, protocol.INVALID_PARAMS,
                                      protocol.METHOD_NOT_FOUND)
    assert proc.poll() is None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msg=json_values)
def test_any_json_value_gets_a_structured_reply(fuzz_engine, msg):
    s, f, proc = fuzz_engine
    exchange(s, f, protocol.encode(msg) if not isinstance(msg, str) else json.dumps(msg).encode() + b"\n")
    assert proc.poll() is None
