"""Secrets never reach the data dir: not the store (audit, events, runs, hosts), engine.log, run dirs or templates.

A workflow that handles every kind of secret Ember sees: the engine token (and a wrong one a client tries),
a host's login password and a key's passphrase sent in hosts.probe/prepare params, an HF-style token in the
engine's (and so every job's) environment, a private key file's content. Then every byte under the Ember
home and the runtime dir (except the token file itself) is searched for each secret.
"""

from __future__ import annotations

import json
import socket
import sys
import tarfile
from pathlib import Path

import pytest

from engine.api import protocol
from engine.api.paths import read_token
from engine.api.protocol import REMOTE_FAILED, RpcError
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(400)
PASSWORD = "pw-Sup3rSecret-4711"
PASSPHRASE = "pp-An0therSecret-0815"
HF_TOKEN = "hf_SECRETtokenAbCdEfGhIjKlMnOpQrStUv"
WRONG_TOKEN = "f" * 63 + "e"  # what a confused client might send: a token of someone else's engine


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def test_no_secret_is_written_anywhere(engine_proc_env, sshd):
    eng = engine_proc_env
    token = read_token(eng.paths)
    key_body = [ln for ln in Path(sshd.client_key).read_text().splitlines() if ln and "PRIVATE KEY" not in ln][1]
    c = eng.client(timeout=150)

    # A client with a wrong token is refused; the engine logs that, not the token.
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(eng.paths.socket))
    s.sendall(protocol.encode(protocol.request(1, "hello", {"token": WRONG_TOKEN})))
    assert json.loads(s.makefile("rb").readline())["error"]["code"] == protocol.UNAUTHORIZED
    s.close()

    # A password host: sshd here takes keys only, so the login is refused, after the password was sent.
    c.call("hosts.add", host=sshd.host("pw-box", auth="password", key_path="", python=sys.executable))
    c.call("hosts.trust", name="pw-box", fingerprint=c.call("hosts.check_key", name="pw-box")["fingerprint"])
    for method in ("hosts.probe", "hosts.prepare"):
        with pytest.raises(RpcError) as err:
            c.call(method, name="pw-box", password=PASSWORD)
        assert err.value.code == REMOTE_FAILED and PASSWORD not in json.dumps(err.value.data) + err.value.message
    # A key host, with a passphrase given (unused by an unencrypted key, but sent and kept in memory).
    c.call("hosts.add", host=sshd.host("key-box", python=sys.executable))
    c.call("hosts.trust", name="key-box", fingerprint=c.call("hosts.check_key", name="key-box")["fingerprint"])
    assert c.call("hosts.probe", name="key-box", password=PASSPHRASE)["facts"]["cpu_count"] > 0
    with pytest.raises(RpcError):  # a bad request with a secret in it: refused, and still not stored
        c.call("hosts.probe", name="key-box", password=PASSWORD, extra=PASSWORD)

    # A job runs with HF_TOKEN in its environment (inherited from the engine).
    job = c.call("jobs.start", kind="system.probe", spec={}, name="probe")
    done = wait_for(lambda: (j := c.call("jobs.get", id=job["id"]))["state"] in ("succeeded", "failed") and j,
                    timeout=90, interval=0.3, what="the probe job")
    assert done["state"] == "succeeded", done["error"]
    # A fine-tune and its export (ORT package and a Jetson bundle with its .tar.gz), run with the token in
    # their environment: the bundles a user hands on carry no secret either.
    ft = c.call("jobs.start", kind="train.finetune", name="digits",
                spec={"task": "image_classification", "method": {"kind": "full"}, "max_steps": 2, "eval_every": 2,
                      "batch_size": 8, "data": {"image_size": 16}})
    ft = wait_for(lambda: (j := c.call("jobs.get", id=ft["id"]))["state"] in ("succeeded", "failed") and j,
                  timeout=150, interval=0.5, what="the fine-tune")
    assert ft["state"] == "succeeded", ft["error"]
    ex = c.call("jobs.start", kind="export.model", name="export",
                spec={"source_run": ft["id"], "formats": ["ort", "jetson"], "target": "orin_nano",
                      "parity_samples": 8})
    ex = wait_for(lambda: (j := c.call("jobs.get", id=ex["id"]))["state"] in ("succeeded", "failed") and j,
                  timeout=150, interval=0.5, what="the export")
    assert ex["state"] == "succeeded", ex["error"]
    archives = list(Path(ex["run_dir"]).rglob("*.tar.gz"))
    assert archives, "the Jetson bundle's archive"
    c.call("templates.save", name="t", spec={})
    audit = c.call("audit.list", limit=100)["records"]
    assert any(a["action"] == "hosts.prepare" and a["params"]["password"] == "***" for a in audit)
    c.call("engine.shutdown")
    wait_for(lambda: eng.proc.poll() is not None, timeout=20, what="the engine to exit")

    secrets = {"engine token": token, "wrong token": WRONG_TOKEN, "password": PASSWORD, "passphrase": PASSPHRASE,
               "HF token": HF_TOKEN, "private key": key_body}
    files = [f for f in _files(eng.paths.home, eng.paths.runtime) if f.name != "engine.token"]
    assert any(f.name == "ember.db" for f in files) and any(f.name == "engine.log" for f in files)
    assert any(f.name == "events.jsonl" for f in files)
    leaks = [(what, str(f)) for f in files for what, secret in secrets.items() if secret.encode() in f.read_bytes()]
    for archive in archives:  # compressed: look inside, member by member
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                data = tar.extractfile(member).read() if member.isfile() else b""
                leaks += [(what, f"{archive}:{member.name}") for what, secret in secrets.items()
                          if secret.encode() in data]
    assert not leaks, leaks


@pytest.fixture
def engine_proc_env(ember_home, monkeypatch):
    """The shared engine fixture, started with a secret in its environment (as a user's shell would have)."""
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", HF_TOKEN)
    from tests.conftest import RunningEngine, kill_job_groups, start_engine_process

    eng = RunningEngine(ember_home, start_engine_process(ember_home))
    yield eng
    if eng.proc.poll() is None:
        eng.proc.terminate()
        eng.proc.wait(10)
    kill_job_groups(ember_home.home)
