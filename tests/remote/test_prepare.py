"""Prepare: Ember's wheel copied over SFTP and installed into a host's own venv (no index, no internet)."""

from __future__ import annotations

import subprocess

import pytest

import engine
from tests.conftest import wait_for
from tests.sshd import host_venv

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def test_version_mismatch_is_refused_then_prepare_installs_the_matching_ember(engine_proc, sshd, tmp_path):
    python = host_venv(tmp_path / "venv", "0.0.1")
    client = engine_proc.client(timeout=240)
    client.call("hosts.add", host=sshd.host("old", python=str(python), workdir=str(tmp_path / "work")))
    client.call("hosts.trust", name="old", fingerprint=client.call("hosts.check_key", name="old")["fingerprint"])
    facts = client.call("hosts.probe", name="old")["facts"]
    assert facts["ember_version"] == "0.0.1" and facts["ready"] is False
    assert facts["problems"][0]["message"] == f"Ember 0.0.1 on the host, {engine.__version__} here"
    assert "Prepare" in facts["problems"][0]["hint"]

    spec = {"task": "text_classification", "max_steps": 2, "device": "cpu",
            "distributed": {"strategy": "ddp", "nodes": [{"host": "old", "nproc": 1}, {"host": "old", "nproc": 1}]}}
    job = client.call("jobs.start", kind="train.finetune", spec=spec)
    done = wait_for(lambda: (j := client.call("jobs.get", id=job["id"]))["state"] in ("failed", "succeeded") and j,
                    timeout=120, interval=0.5, what="the run to be refused")
    assert done["state"] == "failed"
    assert f"old cannot run this: Ember 0.0.1 on the host, {engine.__version__} here" in done["error"]["message"]
    assert not (tmp_path / "work" / "runs").exists()  # nothing started, nothing written there

    sub = client.subscribe(["hosts/old"])
    assert sub
    rec = client.call("hosts.prepare", name="old")
    assert rec["facts"]["ember_version"] == engine.__version__ and rec["facts"]["ready"] is True, rec["facts"]
    progress = [e["data"] for e in client.call("events.query", topics=["hosts/old"], limit=100)["events"]]
    assert any("Copying ember_studio-" in p["message"] for p in progress) and progress[-1]["fraction"] == 1.0
    # Ember now imports from the host venv's own copy, installed from the wheel, not from this checkout.
    where = subprocess.run([str(python), "-c", "import engine; print(engine.__file__)"], cwd=tmp_path,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(tmp_path / "venv")), where
    assert list((tmp_path / "work" / "wheels").glob("ember_studio-*.whl"))
