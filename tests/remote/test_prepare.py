"""Prepare: Ember's wheel copied over SFTP and installed into a host's own venv (no index, no internet)."""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from tests.conftest import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _host_venv(root: Path, old_version: str) -> Path:
    """A venv with pip whose packages come from this one (torch...), but with an older Ember's metadata."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "from-test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    info = purelib / f"ember_studio-{old_version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ember-studio\nVersion: {old_version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n")
    return python


def test_version_mismatch_is_refused_then_prepare_installs_the_matching_ember(engine_proc, sshd, tmp_path):
    python = _host_venv(tmp_path / "venv", "0.0.1")
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
