"""Logging in resists guessing: failed network logins are limited per address, per user and across all
addresses, and a connection that never says hello is closed (docs/security.md).

Guesses come from many loopback addresses (127.0.0.3 and up: all of 127/8 is this machine on Linux), as
someone with many source addresses would send them.
"""

from __future__ import annotations

import json
import socket
import ssl
import time

import pytest

from engine.api import protocol
from engine.cli.client import BlockingClient
from engine.daemon.server import GLOBAL_LOGIN_FAILURES, HELLO_TIMEOUT_ENV, LOGIN_FAILURES
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process

pytestmark = pytest.mark.timeout(120)

HELLO_TIMEOUT_S = 1.5


@pytest.fixture
def team_engine(ember_home, monkeypatch):
    monkeypatch.setenv(HELLO_TIMEOUT_ENV, str(HELLO_TIMEOUT_S))
    eng = RunningEngine(ember_home, start_engine_process(ember_home, "--listen", "127.0.0.1:0"))
    with eng.client("admin") as admin:
        address = admin.call("engine.status")["tls"]["listen"]
    yield eng, address
    eng.stop()
    kill_job_groups(ember_home.home)


def tls_connect(address: str, source: str = "127.0.0.1") -> ssl.SSLSocket:
    host, port = address.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    return ctx.wrap_socket(raw, server_hostname=host)


def read_line(sock: socket.socket) -> bytes:
    """The next line, or b"" when the engine closed the connection first."""
    buf = b""
    while not buf.endswith(b"\n"):
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, ssl.SSLError):
            chunk = b""
        if not chunk:
            return buf
        buf += chunk
    return buf


def hello_from(address: str, source: str, token: str) -> dict:
    """hello over TLS from ``source``: the reply (a refusal right after connecting counts as one too)."""
    sock = tls_connect(address, source)
    try:
        sock.sendall(protocol.encode(protocol.request(1, "hello", {"token": token, "protocol": protocol.PROTOCOL_VERSION})))
        line = read_line(sock)
    finally:
        sock.close()
    return json.loads(line)


def error_message(reply: dict) -> str:
    return reply["error"]["message"] if "error" in reply else ""


def test_guesses_from_many_addresses_are_refused_past_the_limit_for_all(team_engine):
    eng, address = team_engine
    with eng.client("admin") as admin:
        token = admin.call("users.add", name="ann", role="operator")["token"]
    sources = [f"127.0.0.{n}" for n in range(3, 23)]  # 20 addresses, 5 guesses each: under each one's limit
    replies = [hello_from(address, source, f"emb_guess{n}") for source in sources for n in range(LOGIN_FAILURES)]
    wrong = [r for r in replies if error_message(r) == "Wrong token"]
    refused = [r for r in replies if error_message(r).startswith("Too many failed logins on this engine")]
    assert len(wrong) == GLOBAL_LOGIN_FAILURES and len(refused) == len(replies) - GLOBAL_LOGIN_FAILURES
    assert all(r["id"] is None and r["error"]["code"] == protocol.UNAUTHORIZED for r in refused)
    # For the rest of the minute even the right token from a fresh address waits ...
    assert error_message(hello_from(address, "127.0.0.23", token)).startswith("Too many failed logins")
    # ... but the engine's own socket is not affected, for its admin or a user.
    with eng.client("local-admin") as local:
        assert local.call("ping")
    with BlockingClient.connect(eng.paths, token=token, client="ann-here") as c:
        assert c.call("users.me")["name"] == "ann"
    log = (eng.paths.home / "engine.log").read_text()
    assert "Too many failed logins on this engine" in log and "Traceback" not in log


def test_failures_with_a_users_token_count_against_the_user_from_any_address(team_engine):
    eng, address = team_engine
    with eng.client("admin") as admin:
        old = admin.call("users.add", name="bob", role="viewer")["token"]
        admin.call("users.revoke", name="bob")
    # A stolen, revoked token tried from one address after another: each address stays under its limit.
    for n in range(LOGIN_FAILURES):
        reply = hello_from(address, f"127.0.0.{30 + n}", old)
        assert "was revoked" in error_message(reply)
    with eng.client("admin") as admin:
        new = admin.call("users.update", name="bob", new_token=True)["token"]
    # Bob's new token, from an address that never failed, waits out the minute; anyone else does not.
    assert error_message(hello_from(address, "127.0.0.40", new)).startswith("Too many failed logins for bob")
    with eng.client("admin") as admin:
        other = admin.call("users.add", name="cy", role="viewer")["token"]
    assert hello_from(address, "127.0.0.40", other)["result"]["user"]["name"] == "cy"
    with BlockingClient.connect(eng.paths, token=new, client="bob-here") as c:  # the local socket: never
        assert c.call("users.me")["name"] == "bob"


@pytest.mark.parametrize("transport", ["unix", "tls"])
def test_a_connection_without_hello_is_answered_and_closed(team_engine, transport):
    eng, address = team_engine
    if transport == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(eng.paths.socket))
    else:
        sock = tls_connect(address)
    slow = tls_connect(address) if transport == "tls" else None
    start = time.monotonic()
    if slow is not None:
        slow.sendall(b'{"jsonrpc":"2.0",')  # a hello that never ends has the same deadline
    reply = json.loads(read_line(sock))
    waited = time.monotonic() - start
    assert (reply["id"], reply["error"]["code"]) == (None, protocol.HANDSHAKE_REQUIRED)
    assert "No hello within" in reply["error"]["message"]
    assert HELLO_TIMEOUT_S - 0.2 < waited < HELLO_TIMEOUT_S + 5
    assert read_line(sock) == b""  # closed
    sock.close()
    if slow is not None:
        assert json.loads(read_line(slow))["error"]["code"] == protocol.HANDSHAKE_REQUIRED
        assert read_line(slow) == b""
        slow.close()
    # Once hello is said, the deadline no longer applies.
    with eng.client("patient") as c:
        time.sleep(HELLO_TIMEOUT_S + 0.5)
        assert c.call("ping")
    assert "Traceback" not in (eng.paths.home / "engine.log").read_text()
