"""Host profiles against a real OpenSSH server on loopback: keys, probe, bad input."""

from __future__ import annotations

import os
import platform
import sys

import pytest

from engine.api.protocol import INVALID_PARAMS, REMOTE_FAILED, RpcError
from tests.sshd import free_port, keygen, make_sshd

pytestmark = pytest.mark.timeout(180)


def _add(client, host: dict) -> dict:
    return client.call("hosts.add", **{"host": host})


def test_first_contact_trust_then_probe_reports_real_facts(engine_proc, sshd):
    client = engine_proc.client(timeout=150)
    rec = _add(client, sshd.host("box", python=sys.executable))
    assert rec["key"]["status"] is None and rec["facts"] is None
    # Not trusted yet: no login happens.
    with pytest.raises(RpcError) as err:
        client.call("hosts.probe", **{"name": "box"})
    assert err.value.code == REMOTE_FAILED and "not trusted yet" in err.value.message
    status = client.call("hosts.check_key", **{"name": "box"})
    assert status["status"] == "unknown"
    assert status["fingerprint"] == sshd.fingerprint and status["key_type"] == "ssh-ed25519"
    with pytest.raises(RpcError, match="different key"):
        client.call("hosts.trust", **{"name": "box", "fingerprint": "SHA256:not-the-one-shown"})
    assert client.call("hosts.trust", **{"name": "box", "fingerprint": status["fingerprint"]})["status"] == "trusted"
    assert client.call("hosts.check_key", **{"name": "box"})["status"] == "trusted"
    known = (engine_proc.paths.home / "known_hosts")
    assert oct(known.stat().st_mode & 0o777) == "0o600" and f"[127.0.0.1]:{sshd.port}" in known.read_text()

    facts = client.call("hosts.probe", **{"name": "box"})["facts"]
    assert facts["cpu_count"] == os.cpu_count()
    assert facts["python"]["version"] == platform.python_version()
    assert facts["python"]["path"] == sys.executable
    import torch

    assert facts["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert facts["ember_version"] == facts["local_ember_version"]
    assert facts["ram_bytes"] > 0 and facts["disk_free_bytes"] > 0
    assert facts["ready"] is True, facts["problems"]
    listed = client.call("hosts.list")["hosts"]
    assert [h["name"] for h in listed] == ["box"] and listed[0]["facts"]["hostname"] == facts["hostname"]
    audit = [a["action"] for a in client.call("audit.list", limit=20)["records"]]
    assert "hosts.trust" in audit and "hosts.add" in audit


def test_changed_host_key_is_refused(engine_proc, tmp_path):
    first = make_sshd(tmp_path / "a").start()
    client = engine_proc.client(timeout=150)
    try:
        _add(client, first.host("moved", python=sys.executable))
        status = client.call("hosts.check_key", **{"name": "moved"})
        client.call("hosts.trust", **{"name": "moved", "fingerprint": status["fingerprint"]})
        first.stop()
        # The same address and port now answer with another key (a reinstall, or someone in between).
        second = make_sshd(tmp_path / "a", port=first.port).start()
        try:
            status = client.call("hosts.check_key", **{"name": "moved"})
            assert status["status"] == "changed" and status["fingerprint"] == second.fingerprint
            assert status["known_fingerprints"] == [first.fingerprint]
            with pytest.raises(RpcError) as err:
                client.call("hosts.probe", **{"name": "moved"})
            assert "CHANGED" in err.value.message and "Forget key" in err.value.hint
            listed = client.call("hosts.list")["hosts"][0]["key"]
            assert listed == {"status": "changed", "fingerprint": second.fingerprint}
            with pytest.raises(RpcError, match="CHANGED"):
                client.call("hosts.trust", **{"name": "moved", "fingerprint": second.fingerprint})
            # Only after the user forgets the old key can the new one be trusted.
            client.call("hosts.forget_key", **{"name": "moved"})
            client.call("hosts.trust", **{"name": "moved", "fingerprint": second.fingerprint})
            assert client.call("hosts.probe", **{"name": "moved"})["facts"]["cpu_count"] > 0
        finally:
            second.stop()
    finally:
        first.stop()


def test_bad_hosts_get_clear_messages(engine_proc, sshd, tmp_path):
    client = engine_proc.client(timeout=150)
    with pytest.raises(RpcError) as err:
        _add(client, {"name": "local", "address": "x y"})
    assert err.value.code == INVALID_PARAMS
    assert {f["field"] for f in err.value.data["fields"]} == {"name", "address"}

    _add(client, {"name": "nobody-home", "address": "127.0.0.1", "port": free_port()})
    with pytest.raises(RpcError) as err:
        client.call("hosts.check_key", **{"name": "nobody-home"})
    assert "refused the connection" in err.value.message and "SSH server runs" in err.value.hint

    _add(client, sshd.host("wrong-user", user="ember-no-such-user", python=sys.executable))
    status = client.call("hosts.check_key", **{"name": "wrong-user"})
    client.call("hosts.trust", **{"name": "wrong-user", "fingerprint": status["fingerprint"]})
    with pytest.raises(RpcError) as err:
        client.call("hosts.probe", **{"name": "wrong-user"})
    assert "refused the login as ember-no-such-user" in err.value.message and "authorized_keys" in err.value.hint

    # A key the host does not know.
    other_key = keygen(tmp_path / "not_authorized_ed25519")
    _add(client, sshd.host("wrong-key", key_path=str(other_key)))
    with pytest.raises(RpcError) as err:
        client.call("hosts.probe", name="wrong-key")
    assert f"refused the login as {sshd.user} with the key {other_key}" in err.value.message

    _add(client, sshd.host("no-key", key_path="/nonexistent/id_ed25519"))
    with pytest.raises(RpcError, match="does not exist"):
        client.call("hosts.probe", **{"name": "no-key"})

    _add(client, sshd.host("no-python", python="/opt/no/such/python3"))
    with pytest.raises(RpcError) as err:
        client.call("hosts.probe", **{"name": "no-python"})
    assert "was not found" in err.value.message


def test_hosts_from_the_command_line(engine_proc, sshd):
    import subprocess

    from tests.conftest import ROOT

    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def ember(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "engine.cli.main", "hosts", *args], capture_output=True, text=True,
                              input=stdin, timeout=180, env=env)

    added = ember("add", "cli-box", "127.0.0.1", "--port", str(sshd.port), "--user", sshd.user,
                  "--key", str(sshd.client_key), "--python", sys.executable)
    assert added.returncode == 0, added.stderr
    assert "not probed yet" in added.stdout and "ember hosts trust cli-box" in added.stdout
    refused = ember("trust", "cli-box", stdin="n\n")
    assert refused.returncode == 1 and sshd.fingerprint in refused.stdout and "Not trusted" in refused.stdout
    trusted = ember("trust", "cli-box", stdin="y\n")
    assert trusted.returncode == 0 and "Trusted" in trusted.stdout
    probed = ember("probe", "cli-box")
    assert probed.returncode == 0, probed.stdout + probed.stderr
    assert f"{os.cpu_count()} CPUs" in probed.stdout and f"Python {platform.python_version()}" in probed.stdout
    assert probed.stdout.rstrip().endswith("ready")
    listed = ember("list", "--json")
    assert [h["name"] for h in __import__("json").loads(listed.stdout)] == ["cli-box"]
    missing = ember("probe", "nope")
    assert missing.returncode == 2 and "No host named 'nope'" in missing.stderr
