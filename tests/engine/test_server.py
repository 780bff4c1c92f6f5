"""The server survives bad clients, and only its owner gets in."""

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from engine.api import paths as paths_mod
from engine.api import protocol
from engine.api.job_terms import FINAL_STATES
from engine.api.paths import read_token
from engine.api.protocol import RpcError
from engine.cli.client import BlockingClient
from tests.conftest import start_engine_process, wait_for


def raw_socket(paths):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(paths.socket))
    return s


def read_reply(s) -> dict:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return json.loads(buf.split(b"\n")[0])


def authed_raw(paths):
    s = raw_socket(paths)
    s.sendall(protocol.encode(protocol.request(1, "hello", {"token": read_token(paths), "protocol": protocol.PROTOCOL_VERSION})))
    assert "result" in read_reply(s)
    return s


def assert_engine_serves(engine_proc):
    with engine_proc.client("good") as c:
        assert c.call("ping")["t"] > 0
    assert engine_proc.proc.poll() is None


def test_hello_and_status(engine_proc):
    with engine_proc.client() as c:
        assert c.server["server"] == "ember-engine"
        assert c.server["protocol"] == protocol.PROTOCOL_VERSION
        st = c.call("engine.status")
        assert st["pid"] == engine_proc.proc.pid
        assert set(c.call("engine.methods")) == set(protocol.METHODS)


def test_malformed_json_gets_parse_error_and_connection_stays_usable(engine_proc):
    s = authed_raw(engine_proc.paths)
    s.sendall(b'{"jsonrpc": "2.0", "id": 2, "method": \n')
    assert read_reply(s)["error"]["code"] == protocol.PARSE_ERROR
    s.sendall(b"\xff\xfe garbage\n")
    assert read_reply(s)["error"]["code"] == protocol.PARSE_ERROR
    s.sendall(protocol.encode(protocol.request(3, "ping")))
    assert "result" in read_reply(s)
    assert_engine_serves(engine_proc)


def test_oversized_frame_is_refused_and_only_that_client_closed(engine_proc):
    bystander = engine_proc.client("bystander")
    s = authed_raw(engine_proc.paths)
    big = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"' + b"a" * (protocol.MAX_FRAME_BYTES + 10)
    try:
        s.sendall(big + b'"}}\n')
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close before we finish writing
    reply = read_reply(s)
    assert reply["error"]["code"] == protocol.FRAME_TOO_LARGE
    assert bystander.call("ping")["t"] > 0
    assert_engine_serves(engine_proc)


def test_frame_just_under_the_limit_is_accepted(engine_proc):
    s = authed_raw(engine_proc.paths)
    head = b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"'
    tail = b'"}}\n'
    filler = b"a" * (protocol.MAX_FRAME_BYTES - len(head) - len(tail))
    s.sendall(head + filler + tail)
    reply = read_reply(s)
    assert reply["id"] == 5
    assert reply["error"]["code"] == protocol.INVALID_PARAMS  # ping takes no params: parsed, then refused


def test_unknown_method_lists_known_ones(engine_proc):
    with engine_proc.client() as c:
        with pytest.raises(RpcError) as exc:
            c.call("jobs.explode")
        assert exc.value.code == protocol.METHOD_NOT_FOUND
        assert "jobs.start" in exc.value.data["methods"]
    assert_engine_serves(engine_proc)


def test_invalid_params_list_every_field(engine_proc):
    with engine_proc.client() as c:
        with pytest.raises(RpcError) as exc:
            c.call("jobs.start", kind="system.probe", spec={"samples": -1, "interval_s": 0, "colour": "red"})
    assert exc.value.code == protocol.INVALID_PARAMS
    fields = {f["field"] for f in exc.value.data["fields"]}
    assert fields == {"samples", "interval_s", "colour"}
    assert exc.value.hint


def test_wrong_token_is_refused_and_connection_closed(engine_proc):
    with pytest.raises(RpcError) as exc:
        BlockingClient.connect(engine_proc.paths, token="0" * 64)
    assert exc.value.code == protocol.UNAUTHORIZED
    s = raw_socket(engine_proc.paths)
    s.sendall(protocol.encode(protocol.request(1, "hello", {"token": "nope"})))
    assert read_reply(s)["error"]["code"] == protocol.UNAUTHORIZED
    assert s.recv(10) == b""  # closed by the server
    assert_engine_serves(engine_proc)


def test_request_before_hello_is_refused(engine_proc):
    s = raw_socket(engine_proc.paths)
    s.sendall(protocol.encode(protocol.request(1, "jobs.list")))
    assert read_reply(s)["error"]["code"] == protocol.HANDSHAKE_REQUIRED
    assert s.recv(10) == b""
    assert_engine_serves(engine_proc)


def test_abrupt_disconnects_mid_frame_and_mid_subscription(engine_proc):
    for _ in range(20):
        s = authed_raw(engine_proc.paths)
        s.sendall(b'{"jsonrpc":"2.0","id":3,"meth')  # half a frame, then gone
        s.close()
    s = authed_raw(engine_proc.paths)
    s.sendall(protocol.encode(protocol.request(2, "subscribe", {"topics": ["diag/*"], "since": 0})))
    s.close()
    with engine_proc.client() as c:
        c.call("diag.burst", topic="diag/after-disconnect", count=2000)
    assert_engine_serves(engine_proc)


def test_client_that_never_reads_does_not_block_others(engine_proc):
    slow = authed_raw(engine_proc.paths)
    slow.sendall(protocol.encode(protocol.request(2, "subscribe", {"topics": ["diag/*"]})))
    time.sleep(0.2)
    with engine_proc.client() as fast:
        sub = fast.subscribe(["diag/*"])
        assert sub
        t0 = time.monotonic()
        fast.call("diag.burst", topic="diag/flood", count=20_000, payload_bytes=2000)
        got = sum(1 for _ in zip(range(20_000), fast.events(timeout=10), strict=False))
        assert got == 20_000
        assert time.monotonic() - t0 < 60
    assert_engine_serves(engine_proc)
    slow.close()


def test_runtime_files_are_private(engine_proc):
    p = engine_proc.paths
    assert stat.S_IMODE(p.runtime.stat().st_mode) == 0o700
    assert stat.S_IMODE(p.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(p.token.stat().st_mode) == 0o600
    assert len(read_token(p)) == 64


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another Unix user")
def test_other_unix_user_cannot_connect(engine_proc):
    script = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({str(engine_proc.paths.socket)!r})\n"
        "except PermissionError:\n"
        "    print('refused'); sys.exit(0)\n"
        "print('connected'); sys.exit(1)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "refused", out.stderr
    assert_engine_serves(engine_proc)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another Unix user")
def test_peer_credentials_refuse_another_user_even_with_open_permissions(ember_home, monkeypatch):
    # Even if someone loosens every mode, the engine checks SO_PEERCRED and hangs up.
    runtime = Path(tempfile.mkdtemp(prefix="ember-peercred-"))
    monkeypatch.setenv("EMBER_RUNTIME_DIR", str(runtime))
    p = paths_mod.resolve()
    proc = start_engine_process(p)
    try:
        os.chmod(runtime, 0o777)
        os.chmod(p.socket, 0o777)
        os.chmod(p.token, 0o644)
        script = (
            "import os, socket, sys, json\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX); s.settimeout(5)\n"
            f"s.connect({str(p.socket)!r})\n"
            f"tok = open({str(p.token)!r}).read()\n"
            "try:\n"
            "    s.sendall(json.dumps({'jsonrpc':'2.0','id':1,'method':'hello','params':{'token':tok}}).encode()+b'\\n')\n"
            "except (ConnectionResetError, BrokenPipeError):\n"
            "    print('closed'); sys.exit(0)\n"
            "try:\n"
            "    print('reply' if s.recv(100) else 'closed')\n"
            "except (ConnectionResetError, BrokenPipeError):\n"
            "    print('closed')\n"
        )
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "closed", out.stdout + out.stderr
        with BlockingClient.connect(p) as c:
            assert c.call("ping")
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(runtime, ignore_errors=True)


def test_second_engine_refuses_to_start(engine_proc):
    out = subprocess.run([sys.executable, "-m", "engine", "serve"], capture_output=True, text=True, timeout=30,
                         env=dict(os.environ))
    assert out.returncode == 3
    assert "already running" in out.stderr
    assert_engine_serves(engine_proc)


def test_a_slow_input_check_does_not_hold_up_the_connection(engine_proc):
    s = authed_raw(engine_proc.paths)
    s.settimeout(120)
    # data.inspect runs a subprocess (seconds); ping, sent after it on the same connection, answers first.
    s.sendall(protocol.encode(protocol.request(2, "data.inspect", {"spec": {"task": "image_classification"}})))
    s.sendall(protocol.encode(protocol.request(3, "ping", {})))
    buf = b""
    while buf.count(b"\n") < 2:
        buf += s.recv(1 << 20)
    first, second = (json.loads(line) for line in buf.split(b"\n")[:2])
    assert (first["id"], second["id"]) == (3, 2)
    assert second["result"]["kind"] == "images"
    s.close()


def test_jobs_lineage_answers_and_runs_lineage_stays_its_older_name(engine_proc):
    with engine_proc.client() as c:
        for method in ("jobs.lineage", "runs.lineage"):
            with pytest.raises(RpcError) as exc:
                c.call(method, id="r-missing")
            assert exc.value.code == protocol.NOT_FOUND
        job = c.call("jobs.start", kind="system.probe", spec={})
        wait_for(lambda: c.call("jobs.get", id=job["id"])["state"] in FINAL_STATES, timeout=120,
                 what="the probe job to end")
        new, old = c.call("jobs.lineage", id=job["id"]), c.call("runs.lineage", id=job["id"])
    assert new["run"]["id"] == old["run"]["id"] == job["id"]
    new.pop("generated_at"), old.pop("generated_at")
    assert new == old
