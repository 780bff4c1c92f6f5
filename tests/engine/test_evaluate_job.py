"""evaluate.model through the real engine: a LoRA fine-tune of the built-in tiny Llama scored on its validation
data and on two lm-eval tasks defined by local YAML files (offline), its base model beside it through
`ember evaluate`, the results listed together (evaluations.list); a text classifier scored on its validation
data; bad input failing with a fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.api.job_terms import EVALUATE, FINAL_STATES
from engine.api.protocol import RpcError
from engine.cli.main import main as cli
from engine.evaluate.generation import METRICS
from engine.tasks import causal_lm as lm
from tests.conftest import ROOT, wait_for
from tests.fixtures.trained_runs import SPECS

pytestmark = pytest.mark.slow

TASKS_DIR = ROOT / "tests" / "data" / "lm_eval_tasks"
LM_EVAL = {"tasks": ["ember_short_qa", "ember_pick_word"], "include_path": str(TASKS_DIR), "limit": 3}


def finished(c, job_id: str, timeout: float = 240) -> dict:
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j,
                    timeout=timeout, interval=0.3, what=f"job {job_id} to end")


def test_a_run_and_its_base_model_are_evaluated_on_its_validation_data_and_local_lm_eval_tasks(
        engine_with_runs, capsys):
    eng, ids = engine_with_runs("llm")
    run = ids["llm"]
    spec = {"model": {"run": run}, "limit": 4, "max_new_tokens": 6, "lm_eval": LM_EVAL}
    with eng.client(timeout=60) as c:
        job = c.call("jobs.start", kind=EVALUATE, spec=spec, name="eval-run")
        assert job["parent_id"] == run  # recorded as a variant records its source
        # The base model on the same rows, through the CLI (it follows its job, then prints the table).
        assert cli(["evaluate", "tiny-llama", "--validation-of", run, "--limit", "4", "--max-new-tokens", "6",
                    "--quiet"]) == 0
        done = finished(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        result = done["result"]
        family = c.call("evaluations.list", id=run)
        children = c.call("jobs.artifacts", id=run)["children"]
        lineage = c.call("jobs.lineage", id=job["id"])
        variants = c.call("compress.variants", id=run)["variants"]

    # Answers to the run's own validation rows (tiny-instructions, first 4), each scored five ways.
    validation = [m for _, m in lm.read_rows(lm.DATA_DIR / "validation.jsonl")[0]][:4]
    gen = result["generation"]
    assert result["data"] == {"source": "validation", "run": run, "label": f"validation data of {run}",
                              "rows": len(lm.read_rows(lm.DATA_DIR / "validation.jsonl")[0]), "scored": 4}
    assert gen["rows"] == 4 and set(gen["metrics"]) == set(METRICS)
    assert all(0.0 <= gen["metrics"][m] <= 1.0 for m in METRICS)
    assert [s["reference"] for s in gen["samples"]] == [m[-1]["content"] for m in validation]
    assert [s["prompt"] for s in gen["samples"]] == [m[-2]["content"] for m in validation]
    assert result["model"]["kind"] == "chat" and result["model"]["run"] == run

    # lm-eval ran both local tasks on 3 documents each, with their own metrics.
    rows = {(r["task"], r["metric"]): r for r in result["lm_eval"]["tasks"]}
    assert set(rows) == {("ember_short_qa", "exact_match"), ("ember_pick_word", "acc"),
                         ("ember_pick_word", "acc_norm")}
    for row in rows.values():
        assert row["docs"] == 3 and 0.0 <= row["value"] <= 1.0 and row["filter"] == "none"
    assert rows[("ember_short_qa", "exact_match")]["docs_total"] == 8
    # acc over 3 documents is a count of right picks
    assert round(rows[("ember_pick_word", "acc")]["value"] * 3, 6) in (0.0, 1.0, 2.0, 3.0)
    assert not (Path(done["run_dir"]) / "datasets-cache").exists()

    # Stored with the run: its child, its lineage parent, not a variant.
    assert job["id"] in children
    assert [(p["relation"], p["id"]) for p in lineage["parents"]] == [("source_run", run)]
    assert lineage["base_model"]["run"] == run
    assert all(v["job"]["id"] != job["id"] for v in variants)

    # One table: the base model and the run, both scored on the run's validation data.
    assert [r["role"] for r in family["rows"]] == ["base", "run"]
    base, tuned = family["rows"]
    assert base["model"] == {"builtin": "tiny-llama"} and tuned["model"] == {"run": run}
    (base_eval,) = base["evaluations"]
    (run_eval,) = tuned["evaluations"]
    assert base_eval["state"] == run_eval["state"] == "succeeded"
    assert base_eval["data_key"] == run_eval["data_key"] == f"validation:{run}"
    assert run_eval["metrics"] == gen["metrics"] and base_eval["rows"] == 4
    assert {(e["task"], e["metric"]) for e in run_eval["lm_eval"]} == set(rows)

    out = capsys.readouterr().out
    assert "tiny-llama on validation data of" in out and "(4 rows)" in out
    header = next(line for line in out.splitlines() if line.startswith("model"))
    assert header.split()[1:] == ["Exact", "match", "Token", "F1", "ROUGE-L", "BLEU", "chrF"]
    assert any(line.startswith("tiny-llama (base model)") for line in out.splitlines())
    assert any(line.startswith("llm ") for line in out.splitlines())


def test_a_classifier_scores_as_its_own_evaluation_did_and_bad_input_fails_before_the_model_loads(
        engine_with_runs, tmp_path):
    eng, ids = engine_with_runs("text")
    text = ids["text"]
    missing = tmp_path / "nowhere.jsonl"
    with eng.client(timeout=60) as c:
        with pytest.raises(RpcError) as err:  # the spec itself: a base model has no validation data
            c.call("jobs.start", kind=EVALUATE, spec={"model": {"builtin": "tiny-llama"}})
        assert "has no validation data of its own" in json.dumps(err.value.data)
        classify = c.call("jobs.start", kind=EVALUATE, spec={"model": {"run": text}, "limit": 0, "batch_size": 16})
        typo = c.call("jobs.start", kind=EVALUATE, spec={
            "model": {"builtin": "tiny-llama"}, "generation": False,
            "lm_eval": {"tasks": ["ember_short_qaa"], "include_path": str(TASKS_DIR)}})
        no_file = c.call("jobs.start", kind=EVALUATE, spec={"model": {"builtin": "tiny-llama"}, "data": str(missing)})
        classify, typo, no_file = (finished(c, j["id"], 240) for j in (classify, typo, no_file))
        logs = c.call("jobs.logs", id=typo["id"])["lines"]
        own = {r["name"]: r["value"] for r in c.call("jobs.metrics", id=text, kind="eval")["metrics"]
               if r["step"] == SPECS["text"]["max_steps"]}

    # Every validation row of the fine-tune, scored as its last evaluation scored them.
    assert classify["state"] == "succeeded", classify.get("error")
    scored = classify["result"]["classification"]
    assert classify["result"]["data"]["source"] == "validation" and scored["rows"] == classify["result"]["data"]["rows"]
    assert scored["metrics"]["accuracy"] == pytest.approx(own["accuracy"], abs=1e-9)
    assert scored["metrics"]["macro_f1"] == pytest.approx(own["macro_f1"], abs=1e-9)
    assert sum(map(sum, scored["confusion"])) == scored["rows"]

    assert no_file["state"] == "failed"
    assert no_file["error"]["message"] == f"Data file {missing} not found"
    assert "short-answers" in no_file["error"]["hint"] and "leave data empty" in no_file["error"]["hint"]
    assert typo["state"] == "failed", logs[-20:]
    assert typo["error"]["message"] == "Unknown lm-eval task: ember_short_qaa"
    assert "Did you mean ember_short_qa?" in typo["error"]["hint"] and "lm-eval ls tasks" in typo["error"]["hint"]
    assert not any("loading tiny-llama" in line for line in logs)  # failed before loading the model
