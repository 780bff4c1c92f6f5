"""The CLI against a team engine over TLS: a certificate seen for the first time, or a changed one, is a plain
message with the fingerprints and the exact commands that go on, a non-zero exit code, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from engine.api.remote_engine import KnownEngines
from engine.cli.main import main
from tests.conftest import ROOT, RunningEngine, kill_job_groups, start_engine_process

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def team_engine(ember_home, tmp_path, monkeypatch):
    eng = RunningEngine(ember_home, start_engine_process(ember_home, "--listen", "127.0.0.1:0"))
    with eng.client("admin") as admin:
        tls = admin.call("engine.status")["tls"]
        token = admin.call("users.add", name="remote-cli", role="operator", projects=["vision"])["token"]
    known = tmp_path / "known_engines.json"
    env = {"EMBER_ENGINE": tls["listen"], "EMBER_TOKEN": token, "EMBER_KNOWN_ENGINES": str(known)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("EMBER_ENGINE_FINGERPRINT", raising=False)
    yield tls["listen"], tls["fingerprint"], KnownEngines(known)
    eng.stop()
    kill_job_groups(ember_home.home)


def ember(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, in its own process, with this test's environment (plus ``env``)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=full)


def test_first_use_shows_the_fingerprint_and_the_command_that_accepts_it(team_engine):
    address, fingerprint, known = team_engine
    out = ember("jobs", "list")
    assert out.returncode == 1 and "Traceback" not in out.stderr + out.stdout
    assert f"The engine at {address} is not known on this machine yet." in out.stderr
    assert f"\n  {fingerprint}\n" in out.stderr
    command = f"EMBER_ENGINE_FINGERPRINT={fingerprint} ember jobs list"
    assert f"\n  {command}\n" in out.stderr
    assert known.get(address) is None

    # The command it names works, and the certificate is remembered.
    accepted = ember("jobs", "list", EMBER_ENGINE_FINGERPRINT=fingerprint)
    assert accepted.returncode == 0, accepted.stderr
    assert known.get(address) == fingerprint


def test_a_changed_certificate_is_a_warning_with_both_fingerprints_and_the_way_to_forget_it(team_engine):
    address, fingerprint, known = team_engine
    pinned = "AB:" * 31 + "CD"
    known.accept(address, pinned)  # as if the engine's certificate had been replaced since
    out = ember("jobs", "list", EMBER_ENGINE_FINGERPRINT=fingerprint)  # never a silent re-trust
    assert out.returncode == 1 and "Traceback" not in out.stderr + out.stdout
    assert f"WARNING: the engine at {address} presents a DIFFERENT certificate" in out.stderr
    assert f"accepted before: {pinned}" in out.stderr and f"presented now:   {fingerprint}" in out.stderr
    assert f"\n  ember engine forget {address}\n" in out.stderr and "Your token was not sent" in out.stderr
    assert known.get(address) == pinned

    # The commands it names, in order: forget the old one, accept the new one.
    assert main(["engine", "forget", address]) == 0 and known.get(address) is None
    assert main(["engine", "forget", address]) == 1  # nothing left to forget
    os.environ["EMBER_ENGINE_FINGERPRINT"] = fingerprint
    try:
        assert main(["jobs", "list"]) == 0
    finally:
        del os.environ["EMBER_ENGINE_FINGERPRINT"]
    assert known.get(address) == fingerprint


def test_a_fingerprint_that_does_not_match_and_an_engine_that_is_not_there_are_plain_errors(
        team_engine, monkeypatch, capsys):
    address, fingerprint, _known = team_engine
    monkeypatch.setenv("EMBER_ENGINE_FINGERPRINT", "12:" * 31 + "34")
    assert main(["jobs", "list"]) == 1
    err = capsys.readouterr().err
    assert f"EMBER_ENGINE_FINGERPRINT is {'12:' * 31 + '34'}, but the engine at {address} presents" in err
    assert fingerprint in err

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    out = ember("jobs", "list", EMBER_ENGINE=f"127.0.0.1:{free}")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: Cannot reach the engine at 127.0.0.1:{free} (EMBER_ENGINE)")
