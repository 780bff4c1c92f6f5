"""Lineage and the audit log through a real engine: a tiny fine-tune on a CSV, an ONNX export of it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

import engine
from engine.api.job_terms import FINAL_STATES
from engine.cli import main as cli
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.timeout(300)



def write_images(folder: Path) -> None:
    """Two classes of 32x32 grayscale PNGs (dark and light), enough for a two-step fine-tune."""
    from PIL import Image

    for label, shade in (("dark", 40), ("light", 200)):
        (folder / label).mkdir(parents=True)
        for i in range(6):
            Image.new("L", (32, 32), shade + 3 * i).save(folder / label / f"{i}.png")


def folder_hash(folder: Path) -> str:
    """What the lineage promises for a folder, computed here with hashlib alone."""
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.relative_to(folder).as_posix())
    lines = "".join(f"{p.relative_to(folder).as_posix()}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                    for p in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def finish(c, job_id: str) -> dict:
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j,
                    timeout=240, interval=0.3, what=f"job {job_id} to finish")


def test_export_child_names_its_parent_with_hashes_and_the_audit_log_filters(engine_proc, tmp_path, capsys):
    train, val = tmp_path / "shades" / "train", tmp_path / "shades" / "val"
    write_images(train)
    write_images(val)
    spec = {"task": "image_classification", "method": {"kind": "full"}, "device": "cpu", "batch_size": 4,
            "max_steps": 2, "eval_every": 2, "checkpoint_every": 2,
            "data": {"path": str(train), "val_path": str(val)}}
    with engine_proc.client("lineage-test") as c:
        parent = finish(c, c.call("jobs.start", kind="train.finetune", spec=spec, name="tiny")["id"])
        assert parent["state"] == "succeeded", parent
        child = finish(c, c.call("jobs.start", kind="export.model", name="torchscript",
                                 spec={"source_run": parent["id"], "formats": ["torchscript"], "parity_samples": 4})["id"])
        assert child["state"] == "succeeded", child
        rec = c.call("jobs.lineage", id=child["id"])

        # The child: its spec as stored, its parent named and followed, its artifacts hashed.
        assert rec["run"]["id"] == child["id"] and rec["run"]["kind"] == "export.model"
        assert rec["spec"] == child["spec"]
        assert rec["base_model"]["run"] == parent["id"]
        [exported] = [a for a in rec["artifacts"] if a["type"] == "export.torchscript"]
        exported_file = Path(exported["path"])
        assert exported["storage"] == "file"
        assert exported["sha256"] == hashlib.sha256(exported_file.read_bytes()).hexdigest()
        [up] = rec["parents"]
        assert up["relation"] == "source_run" and up["id"] == parent["id"]
        prec = up["lineage"]
        assert prec["run"]["id"] == parent["id"] and prec["spec"] == parent["spec"]
        assert prec["parents"] == []
        by_role = {d["role"]: d for d in prec["data"]}
        for role, folder in (("train", train), ("validation", val)):
            entry = by_role[role]
            assert entry["path"] == str(folder) and entry["storage"] == "folder" and entry["files"] == 12
            assert entry["sha256"] == folder_hash(folder)
            assert entry["size"] == sum(p.stat().st_size for p in folder.rglob("*.png"))
        assert prec["base_model"]["kind"] == "builtin" and prec["base_model"]["builtin"] == "digits-cnn"
        [model] = [a for a in prec["artifacts"] if a["type"] == "model"]
        assert model["storage"] == "folder" and model["sha256"] == folder_hash(Path(model["path"]))
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert rec["code"]["ember_version"] == engine.__version__
        assert rec["code"]["git_commit"] == (head.stdout.strip() if head.returncode == 0 else None)
        assert rec["packages"]["versions"]["torch"]
        assert rec["packages"]["recorded"] == "when the job ran"  # environment.json of the job
        assert rec["code"]["recorded"] == "when the job ran"

        # The audit log: both starts recorded with their targets; filters, paging and a total.
        page = c.call("audit.list", action="jobs.start", client="lineage-test")
        assert page["total"] == 2 and [r["target"] for r in page["records"]] == [child["id"], parent["id"]]
        assert all(r["ok"] and r["client"] == "lineage-test" for r in page["records"])
        with pytest.raises(Exception, match="No job"):
            c.call("jobs.stop", id="no-such-run")
        failed = c.call("audit.list", ok=False)
        assert failed["total"] == 1 and failed["records"][0]["action"] == "jobs.stop"
        assert failed["records"][0]["target"] == "no-such-run" and failed["records"][0]["error"]
        first = c.call("audit.list", limit=1)
        second = c.call("audit.list", limit=1, offset=first["next_offset"])
        assert first["records"][0]["id"] > second["records"][0]["id"]
        assert c.call("audit.list", text="SHADES/TRAIN")["total"] == 1  # the fine-tune's spec names the file
        assert c.call("audit.list", action="jobs.*", since=rec["generated_at"] + 3600)["total"] == 0
        assert c.call("audit.list")["records"]  # the old form still answers

    # The CLI: Markdown and JSON reports, and the audit log as CSV and JSON Lines.
    out = tmp_path / "lineage.md"
    assert cli.main(["lineage", child["id"], "--out", str(out)]) == 0
    text = out.read_text()
    assert parent["id"] in text and by_role["train"]["sha256"] in text and "source_run" in text
    capsys.readouterr()
    assert cli.main(["lineage", child["id"], "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["parents"][0]["id"] == parent["id"]
    csv_file, jsonl = tmp_path / "audit.csv", tmp_path / "audit.jsonl"
    assert cli.main(["audit", "--action", "jobs.start", "--csv", str(csv_file)]) == 0
    lines = csv_file.read_text().splitlines()
    assert lines[0].startswith("time,client,action,target,ok,error") and len(lines) == 3
    assert cli.main(["audit", "--jsonl", str(jsonl)]) == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert {"jobs.start", "jobs.stop"} <= {r["action"] for r in rows}


def test_secrets_stay_out_of_the_audit_log(engine_proc):
    with engine_proc.client("probe-test") as c:
        c.call("hosts.add", host={"name": "box", "address": "127.0.0.1", "port": 1, "auth": "password"})
        with pytest.raises(Exception):  # noqa: B017 - nothing listens on port 1
            c.call("hosts.probe", name="box", password="hunter2-secret")
        [rec] = c.call("audit.list", action="hosts.probe")["records"]
        assert rec["target"] == "box" and rec["ok"] is False and rec["params"]["password"] == "***"
        assert "hunter2" not in json.dumps(c.call("audit.list", limit=100))


def test_digest_of_files_and_folders_follows_their_content(tmp_path):
    from engine.daemon import lineage

    folder = tmp_path / "data"
    write_images(folder)
    first = lineage.digest(folder)
    assert first["storage"] == "folder" and first["files"] == 12 and first["sha256"] == folder_hash(folder)
    assert lineage.digest(folder) == first  # cached by (path, size, mtime): the same answer
    one = folder / "dark" / "0.png"
    one.write_bytes(one.read_bytes()[:-1] + b"\0")  # same size, new content and mtime
    changed = lineage.digest(folder)
    assert changed["sha256"] != first["sha256"] and changed["sha256"] == folder_hash(folder)
    assert lineage.digest(one)["sha256"] == hashlib.sha256(one.read_bytes()).hexdigest()
    assert lineage.digest(tmp_path / "nope")["storage"] == "missing"
