"""The engine over TCP with TLS (ember engine serve --listen): the certificate pinned like an SSH host key,
user tokens only, failed logins rate-limited, and what a plain-TCP client, an oversized or malformed frame
over TLS do (the engine answers or closes that one connection, and goes on)."""

from __future__ import annotations

import json
import socket
import ssl
import time

import pytest

from engine.api.protocol import (
    FRAME_TOO_LARGE,
    MAX_FRAME_BYTES,
    PARSE_ERROR,
    UNAUTHORIZED,
    RpcError,
)
from engine.api.remote_engine import CertificateMismatch, KnownEngines, UnknownCertificate
from engine.cli.client import BlockingClient
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def tls_engine(ember_home):
    eng = RunningEngine(ember_home, start_engine_process(ember_home, "--listen", "127.0.0.1:0"))
    with eng.client("admin") as admin:
        status = admin.call("engine.status")
        token = admin.call("users.add", name="remote-ann", role="operator", projects=["vision"])["token"]
    yield eng, status["tls"], token
    eng.stop()
    kill_job_groups(ember_home.home)


def test_the_certificate_is_pinned_like_an_ssh_host_key(tls_engine, tmp_path):
    _eng, tls, token = tls_engine
    address, fingerprint = tls["listen"], tls["fingerprint"]
    assert len(fingerprint.split(":")) == 32
    known = KnownEngines(tmp_path / "known_engines.json")
    with pytest.raises(UnknownCertificate) as unknown:
        BlockingClient.connect_tls(address, token, known)
    assert unknown.value.fingerprint == fingerprint and fingerprint in str(unknown.value)
    with BlockingClient.connect_tls(address, token, known, accept=fingerprint, client="gui-laptop") as c:
        assert c.server["user"] == {"name": "remote-ann", "role": "operator", "projects": ["vision"]}
        assert c.call("ping")
    assert known.get(address) == fingerprint and oct((tmp_path / "known_engines.json").stat().st_mode)[-3:] == "600"
    with BlockingClient.connect_tls(address, token, known) as c:  # remembered
        assert c.call("users.me")["name"] == "remote-ann"
    # The engine's certificate is replaced (or someone sits in between): refused, both fingerprints named.
    other = "AB:" * 31 + "CD"
    known.accept(address, other)
    with pytest.raises(CertificateMismatch) as changed:
        BlockingClient.connect_tls(address, token, known, accept=fingerprint)  # no silent re-trust either
    assert fingerprint in str(changed.value) and other in str(changed.value)


def test_only_user_tokens_over_the_network_and_failed_logins_are_rate_limited(tls_engine, tmp_path):
    eng, tls, _token = tls_engine
    known = KnownEngines(tmp_path / "k.json")
    known.accept(tls["listen"], tls["fingerprint"])
    with pytest.raises(RpcError) as err:  # the local admin's token, from another machine
        BlockingClient.connect_tls(tls["listen"], eng.paths.token.read_text().strip(), known)
    assert err.value.code == UNAUTHORIZED and "only on its machine" in err.value.message
    for _ in range(4):
        with pytest.raises(RpcError, match="Wrong token"):
            BlockingClient.connect_tls(tls["listen"], "emb_guess", known)
    with pytest.raises((RpcError, ConnectionError)) as locked:
        c = BlockingClient.connect_tls(tls["listen"], _token, known)  # even the right token, for a while
        c.close()
    assert "Too many failed logins from 127.0.0.1" in str(locked.value)
    with eng.client("local-admin") as admin:  # the local socket is not affected
        assert admin.call("ping")


def _tls_socket(address: str) -> ssl.SSLSocket:
    host, port = address.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10), server_hostname=host)


def test_plain_tcp_oversized_and_malformed_frames_close_only_that_connection(tls_engine, tmp_path):
    eng, tls, token = tls_engine
    host, port = tls["listen"].rsplit(":", 1)
    plain = socket.create_connection((host, int(port)), timeout=10)
    plain.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "hello", "params": {"token": token}}).encode()
                  + b"\n")
    try:
        answer = plain.recv(4096)
    except ConnectionResetError:
        answer = b""
    assert b"jsonrpc" not in answer  # no JSON-RPC without TLS: the handshake fails and the socket closes
    plain.close()

    known = KnownEngines(tmp_path / "k.json")
    known.accept(tls["listen"], tls["fingerprint"])
    with BlockingClient.connect_tls(tls["listen"], token, known) as c:
        c.send_raw(b'{"jsonrpc": "2.0", "id": 5, "method": \n')
        reply = c.read_message(10)
        assert reply["error"]["code"] == PARSE_ERROR
        assert c.call("ping")  # a malformed frame costs nothing else
        c.send_raw(b"x" * (MAX_FRAME_BYTES + 10) + b"\n")
        reply = c.read_message(10)
        assert reply["error"]["code"] == FRAME_TOO_LARGE
        with pytest.raises((ConnectionError, OSError)):
            for _ in range(50):
                c.call("ping")
                time.sleep(0.05)
    with BlockingClient.connect_tls(tls["listen"], token, known) as c2:  # the engine goes on
        assert c2.call("ping")
    assert eng.proc.poll() is None
