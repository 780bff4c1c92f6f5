"""Paths a user chooses may hold spaces, unicode, quotes and shell metacharacters: they work, and run nothing.

Locally: an EMBER_HOME and a dataset under such a folder (data.inspect and a tiny fine-tune through a real
engine). Over SSH against a real sshd: the host's Python, its workdir, a dataset and a command argument
under such names go through every remote operation a run uses (probe, mkdir, upload, start, status, read,
fetch, remove); no PWNED file appears anywhere and each operation did its work.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(240)
WEIRD = "ünï $(touch PWNED); `touch PWNED` 'q' \"dq\" & | > x < * ? [a] {b,c} ~ # !"
TICKETS = Path(__file__).resolve().parents[2] / "engine" / "resources" / "datasets" / "support_tickets" / "train.jsonl"


def _no_pwned(*roots: Path) -> None:
    for root in {*roots, Path.home(), Path.cwd(), Path("/tmp")}:
        assert not (root / "PWNED").exists(), f"PWNED in {root}"
    for root in roots:
        found = [p for p in root.rglob("PWNED")]
        assert not found, found


def _images(folder: Path) -> None:
    from PIL import Image

    for cls, colour in (("cat", (250, 10, 10)), ("dög $(id)", (10, 10, 250))):
        (folder / cls).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (8, 8), tuple(min(255, c + 3 * i) for c in colour)).save(folder / cls / f"{i} 'x'.png")


def test_local_home_and_dataset_with_shell_characters(tmp_path, monkeypatch):
    from engine.api import paths as paths_mod
    from tests.conftest import RunningEngine, start_engine_process

    root = tmp_path / "my data" / WEIRD
    monkeypatch.setenv("EMBER_HOME", str(root / "home"))
    monkeypatch.delenv("EMBER_RUNTIME_DIR", raising=False)
    csv = root / "tïckets $(touch PWNED) `id` 'q'.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    csv.write_text("text,label\n" + "".join(f"row {i} about billing,{'billing' if i % 2 else 'bug'}\n"
                                              for i in range(20)), encoding="utf-8")
    images = root / "imgs; rm -rf ~" / "pets $(touch PWNED)"
    _images(images)
    eng = RunningEngine(paths_mod.resolve(), start_engine_process(paths_mod.resolve()))
    try:
        c = eng.client(timeout=120)
        seen = c.call("data.inspect", spec={"task": "text_classification", "data": {"path": str(csv)}}, n=3)
        assert seen["n_train"] + seen["n_val"] == 20 and not seen["issues"], seen["issues"]
        spec = {"task": "image_classification", "method": {"kind": "full"}, "device": "cpu", "batch_size": 4,
                "max_steps": 2, "eval_every": 2, "checkpoint_every": 2, "data": {"path": str(images), "image_size": 16}}
        job = c.call("jobs.start", kind="train.finetune", spec=spec, name=WEIRD)
        assert Path(job["run_dir"]).parent == root / "home" / "runs"
        done = wait_for(lambda: (j := c.call("jobs.get", id=job["id"]))["state"] in
                        ("succeeded", "failed", "cancelled") and j, timeout=150, interval=0.5, what="the fine-tune")
        assert done["state"] == "succeeded", (done["error"], c.call("jobs.logs", id=job["id"])["lines"][-20:])
        assert done["name"] == WEIRD
        steps = [m["step"] for m in c.call("jobs.metrics", id=job["id"], kind="train", names=["loss"])["metrics"]]
        assert steps == [1, 2]
        assert c.call("jobs.artifacts", id=job["id"])["checkpoints"]
        c.close()
    finally:
        eng.proc.terminate()
        eng.proc.wait(10)
    _no_pwned(tmp_path)


def test_remote_operations_with_shell_characters_over_ssh(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_SSH_KNOWN_HOSTS", "")
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "home"))
    from engine.api import paths as paths_mod
    from engine.api.host_spec import HostSpec
    from engine.daemon.eventbus import EventBus
    from engine.daemon.hosts import Hosts
    from engine.daemon.store import Store
    from engine.launch import ssh
    from engine.launch.nodes import SshNode

    weird = tmp_path / WEIRD
    bindir = weird / "bin $(touch PWNED)"
    bindir.mkdir(parents=True)
    python = bindir / "python 'q'"
    os.symlink(os.path.realpath(sys.executable), python)  # node operations need only the stdlib
    key = weird / "key `id`"
    shutil.copy(sshd.client_key, key)
    key.chmod(0o600)
    workdir = weird / "work dir; touch PWNED"
    data = weird / "my data $(touch PWNED).jsonl"
    shutil.copy(TICKETS, data)
    p = paths_mod.resolve()
    p.home.mkdir(parents=True)
    store = Store(p.db)

    async def scenario() -> None:
        hosts = Hosts(p, store, EventBus(store))
        spec = HostSpec.model_validate(sshd.host("odd", key_path=str(key), python=str(python), workdir=str(workdir)))
        hosts.add(spec)
        status = await hosts.check_key("odd")
        await hosts.trust("odd", status["fingerprint"])
        node = SshNode(hosts, "odd")
        try:
            facts = await node.ctl("probe", {"workdir": str(workdir), "import_torch": False})
            assert facts["workdir"] == str(workdir) and facts["python"]["version"]
            # An argument reaches the remote program byte for byte, unexpanded.
            rc, out, err = await ssh.run(await hosts.connection("odd"), spec,
                                         [str(python), "-c", "import sys; print(sys.argv[1])", WEIRD])
            assert rc == 0 and out.rstrip("\n") == WEIRD, err
            node_dir = (await node.ctl("mkdir", {"dir": f"{workdir}/runs/r1/node0"}))["dir"]
            assert Path(node_dir) == workdir / "runs" / "r1" / "node0" and Path(node_dir).is_dir()
            remote_data = f"{node_dir}/inputs/data-path-{data.name}"
            await node.put(data, remote_data)
            copy = "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])"
            info = await node.ctl("start", {"dir": node_dir, "argv": [str(python), "-c", copy, remote_data,
                                                                       f"copied {WEIRD}.jsonl"], "env": {"X": WEIRD},
                                            "files": {"spec.yaml": "x: 1\n"}})
            for _ in range(200):
                st = await node.ctl("status", {"dir": node_dir, "pid": info["pid"], "started": info["started"]})
                if not st["running"]:
                    break
                await asyncio.sleep(0.1)
            assert st["exit_code"] == 0, (Path(node_dir) / "stdout.log").read_text()
            got = await node.read(f"{node_dir}/copied {WEIRD}.jsonl", 0, 1 << 20)
            assert got == TICKETS.read_bytes()[: 1 << 20]
            back = tmp_path / "back" / WEIRD
            await node.get_tree(node_dir, back, ("stdout.log",))
            assert (back / f"copied {WEIRD}.jsonl").read_bytes() == TICKETS.read_bytes()
            removed = await node.ctl("remove", {"dir": f"{workdir}/runs/r1", "run_id": "r1"})
            assert removed["removed"] and not (workdir / "runs" / "r1").exists()
        finally:
            await hosts.close()

    asyncio.run(scenario())
    store.db.close()
    _no_pwned(tmp_path)
