"""The methods the GUI's wizard and run history use, against a real engine and real runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from engine.api.job_terms import FINAL_STATES
from engine.api.protocol import INVALID_STATE, NOT_FOUND, RpcError
from tests.conftest import wait_for

# Real fine-tunes on two shared cores: minutes when the machine is busy.
pytestmark = pytest.mark.timeout(600)

TINY = {"task": "text_classification", "method": {"kind": "lora"}, "batch_size": 8,
        "data": {"max_length": 32}, "max_steps": 4, "eval_every": 2, "checkpoint_every": 2, "memory_every": 1}


def test_data_inspect_shows_rows_classes_and_issues(engine_proc, tmp_path):
    with engine_proc.client() as c:
        text = c.call("data.inspect", spec={"task": "text_classification"}, n=5)
        assert text["kind"] == "table" and len(text["rows"]) == 5 and text["issues"] == []
        assert sum(text["class_counts"].values()) == text["n_train"] == 640 and text["n_val"] == 160
        images = c.call("data.inspect", spec={"task": "image_classification"}, n=10)
        assert images["kind"] == "images" and len(images["thumbnails"]) == 10
        assert {t["label"] for t in images["thumbnails"]} == {str(d) for d in range(10)}  # one per class first
        chat = c.call("data.inspect", spec={"task": "causal_lm"}, n=3)
        assert chat["kind"] == "chat" and chat["rows"][0]["response"]

        bad = tmp_path / "bad.csv"
        bad.write_text('text,label\n"fine row",a\n"no label here",\n"another",b\n"more",a\n"b too",b\n')
        found = c.call("data.inspect", spec={"task": "text_classification", "data": {"path": str(bad)}})
        assert found["issues"], found
        issue = found["issues"][0]
        assert issue["field"] == "data.path" and issue["file"] == str(bad) and issue["line"] == 3
        missing = c.call("data.inspect", spec={"data": {"path": str(tmp_path / "nope.csv")}})
        assert missing["issues"][0]["field"] == "data.path" and "not found" in missing["issues"][0]["message"]


def test_templates_round_trip_as_job_files(engine_proc, ember_home):
    with engine_proc.client() as c:
        assert c.call("templates.list")["templates"] == []
        c.call("templates.save", name="Tickets LoRA", spec=TINY)
        saved = c.call("templates.list")["templates"]
        assert [t["name"] for t in saved] == ["Tickets LoRA"]
        assert saved[0]["spec"]["method"]["kind"] == "lora" and saved[0]["spec"]["max_steps"] == 4
        doc = yaml.safe_load(Path(saved[0]["path"]).read_text())
        assert doc["kind"] == "train.finetune" and doc["name"] == "Tickets LoRA"  # what `ember run` reads
        with pytest.raises(RpcError) as err:
            c.call("templates.save", name="broken", spec={"batch_size": 0})
        assert err.value.data["fields"][0]["field"] == "batch_size"
        c.call("templates.delete", name="Tickets LoRA")
        assert c.call("templates.list")["templates"] == []
        with pytest.raises(RpcError) as err:
            c.call("templates.delete", name="Tickets LoRA")
        assert err.value.code == NOT_FOUND


def test_machine_info_reports_this_machine(engine_proc):
    with engine_proc.client() as c:
        info = c.call("machine.info")
    assert info["cpu"]["cores"] == os.cpu_count()
    assert 0 < info["ram"]["available"] <= info["ram"]["total"]
    assert info["disk_free"] > 0 and isinstance(info["gpus"], list)


def test_finished_run_has_summary_checkpoints_and_can_be_deleted(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=TINY, name="tiny")
        done = wait_for(lambda: (j := c.call("jobs.get", id=job["id"]))["state"] in FINAL_STATES and j,
                        timeout=180, what="the run to finish")
        assert done["state"] == "succeeded", done
        summary = done["summary"]
        assert (summary["task"], summary["model"], summary["method"], summary["strategy"]) == \
            ("text_classification", "minilm", "lora", "single")
        evals = [m for m in c.call("jobs.metrics", id=job["id"], kind="eval")["metrics"] if m["name"] == "accuracy"]
        best = max(evals, key=lambda m: (m["value"], -m["step"]))
        assert summary["best"] == {"metric": "accuracy", "value": best["value"], "step": best["step"]}
        assert summary["measured_peak"] > 100 * 2**20  # a CPU run's peak RSS, from its memory events
        # The fit estimate made at jobs.start is stored with the run (it may land after the run ends).
        summary = wait_for(lambda: (s := c.call("jobs.get", id=job["id"])["summary"])["estimated_peak"] and s,
                           timeout=120, what="the stored estimate")
        ratio = summary["estimated_peak"] / summary["measured_peak"]
        sys.stdout.write(f"\nMiniLM LoRA CPU run: estimated peak {summary['estimated_peak'] / 2**20:.0f} MiB, "
                         f"measured {summary['measured_peak'] / 2**20:.0f} MiB, ratio {ratio:.3f}\n")
        assert 0.85 <= ratio <= 1.15
        assert (Path(done["run_dir"]) / "estimate.json").is_file()
        listed = c.call("jobs.list")["jobs"][0]
        assert listed["id"] == job["id"] and listed["summary"] == summary

        found = c.call("jobs.artifacts", id=job["id"])
        assert [ck["step"] for ck in found["checkpoints"]] == [2, 4]
        assert [ck["latest"] for ck in found["checkpoints"]] == [False, True]
        assert all(ck["complete"] and ck["bytes"] > 0 for ck in found["checkpoints"])
        assert [a["type"] for a in found["artifacts"]] == ["model"] and found["artifacts"][0]["exists"]
        assert found["parent"] is None and found["children"] == []

        run_dir = Path(done["run_dir"])
        gone = c.call("jobs.delete", id=job["id"])
        assert gone["ok"] and gone["freed_bytes"] > 0 and not run_dir.exists()
        assert all(j["id"] != job["id"] for j in c.call("jobs.list")["jobs"])
        assert c.call("events.query", topics=[f"run/{job['id']}/*"])["events"] == []
        with pytest.raises(RpcError) as err:
            c.call("jobs.metrics", id=job["id"])
        assert err.value.code == NOT_FOUND


def test_an_active_run_cannot_be_deleted(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 600, "interval_s": 0.2})
        with pytest.raises(RpcError) as err:
            c.call("jobs.delete", id=job["id"])
        assert err.value.code == INVALID_STATE and "Cancel it first" in err.value.data["hint"]
        c.call("jobs.cancel", id=job["id"])
        wait_for(lambda: c.call("jobs.get", id=job["id"])["state"] in FINAL_STATES, what="the cancel")
        assert c.call("jobs.delete", id=job["id"])["ok"]
