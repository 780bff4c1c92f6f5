"""compress.lora_merge against a real engine: merge a LoRA fine-tune, refuse what cannot be merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from engine.api.job_terms import FINAL_STATES
from engine.api.protocol import NOT_FOUND, RpcError
from tests.conftest import wait_for
from tests.fixtures.trained_runs import SPECS

# Real fine-tunes on two shared cores: minutes when the machine is busy.
pytestmark = pytest.mark.timeout(600)

# The finished runs are the session's shared fine-tunes (tests/fixtures/trained_runs.py): a LoRA MiniLM
# to merge and the full digits CNN to refuse. This one is only started, to be refused while it trains.
LORA = SPECS["lora"]


def finish(c, job_id: str, timeout: float = 240) -> dict:
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j,
                    timeout=timeout, interval=0.5, what=f"job {job_id} to finish")


def test_lora_merge_writes_a_plain_model_with_parity_and_lineage(engine_with_runs):
    eng, runs = engine_with_runs("lora", "digits")
    with eng.client() as c:
        training = c.call("jobs.start", kind="train.finetune", spec=LORA, name="lora")
        # While it trains it has no model/ yet: nothing to merge.
        early = finish(c, c.call("jobs.start", kind="compress.lora_merge",
                                 spec={"source_run": training["id"]})["id"], timeout=60)
        assert early["state"] == "failed" and "resume or finish the run first" in early["error"]["hint"], early
        c.call("jobs.cancel", id=training["id"])
        lora, full = c.call("jobs.get", id=runs["lora"]), c.call("jobs.get", id=runs["digits"])
        assert full["spec"]["method"]["kind"] == "full" and lora["spec"]["method"]["kind"] == "lora"

        with pytest.raises(RpcError) as err:
            c.call("jobs.start", kind="compress.lora_merge", spec={"source_run": "r-no-such-run"})
        assert err.value.code == NOT_FOUND and "r-no-such-run" in str(err.value)

        assert full["state"] == "succeeded"
        refused = finish(c, c.call("jobs.start", kind="compress.lora_merge",
                                   spec={"source_run": full["id"]})["id"], timeout=60)
        assert refused["state"] == "failed"
        assert "nothing to merge: the run trained full" in refused["error"]["message"], refused
        assert refused["parent_id"] == full["id"]
        assert not (Path(refused["run_dir"]) / "model").exists()

        assert lora["state"] == "succeeded"
        source_model = Path(lora["run_dir"]) / "model"
        before = {p.name: p.stat().st_mtime_ns for p in source_model.iterdir()}
        merge = c.call("jobs.start", kind="compress.lora_merge", name="merge",
                       spec={"source_run": lora["id"], "parity_samples": 16,
                             "eval": {"samples": 32, "batch_size": 8, "warmup": 1, "repeats": 3}})
        assert merge["parent_id"] == lora["id"]
        done = finish(c, merge["id"], timeout=120)
        assert done["state"] == "succeeded", done
        assert done["parent_id"] == lora["id"]
        result = done["result"]
        assert result["parity"]["top1_agreement"] == 1.0 and result["parity"]["samples"] == 16
        assert result["parity"]["max_abs_logit_diff"] <= 1e-4
        assert result["params_after"] < result["params_before"] and result["lora_params"] > 0
        assert result["bytes_after"] < result["bytes_before"]

        out = Path(done["run_dir"]) / "model"
        with safe_open(str(out / "weights.safetensors"), "pt") as f:
            keys = list(f.keys())
        assert keys and not [k for k in keys if "lora_" in k or k.startswith("base_model.")]
        meta = json.loads((out / "ember_model.json").read_text())
        assert meta["method"]["kind"] == "full" and meta["method"]["merged_from"]["kind"] == "lora"
        assert meta["parent_run"] == lora["id"] and meta["parity"]["top1_agreement"] == 1.0
        assert meta["data_info"]["num_labels"] == 5
        assert {p.name: p.stat().st_mtime_ns for p in source_model.iterdir()} == before  # source untouched

        arts = c.call("jobs.artifacts", id=merge["id"])
        evaluation = Path(done["run_dir"]) / "evaluation.json"
        assert [(a["type"], a["path"], a["exists"]) for a in arts["artifacts"]] == [
            ("model", str(out), True), ("evaluation", str(evaluation), True)]
        doc = json.loads(evaluation.read_text())
        # In ONNX Runtime the merged model and the parent (merged in memory) are one graph.
        assert doc["agreement"] == 1.0 and doc["variant"]["metrics"] == doc["parent"]["metrics"]
        assert arts["parent"] == lora["id"]
        assert merge["id"] in c.call("jobs.artifacts", id=lora["id"])["children"]
