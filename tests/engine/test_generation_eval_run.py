"""A causal LM fine-tune through the engine: its eval events carry generation scores and samples, and
both reach the store (events replayed to the GUI, scores as metric rows)."""

from __future__ import annotations

import pytest

from engine.api.job_terms import FINAL_STATES
from engine.tasks import causal_lm as lm
from tests.conftest import wait_for

pytestmark = pytest.mark.slow

METRICS = ("exact_match", "token_f1", "rouge_l", "bleu", "chrf")


def test_causal_lm_evaluations_score_generated_answers_through_the_engine(engine_proc):
    spec = {"task": "causal_lm", "method": {"kind": "lora"}, "batch_size": 8, "max_steps": 4, "eval_every": 2,
            "checkpoint_every": 100, "device": "cpu", "generate_eval": {"prompts": 5, "max_new_tokens": 16}}
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec, name="answers")
        done = wait_for(lambda: (j := c.call("jobs.get", id=job["id"]))["state"] in FINAL_STATES and j,
                        timeout=240, interval=0.2, what="the fine-tune to end")
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        evals = [e["data"] for e in c.call("events.query", topics=[f"run/{job['id']}/eval"])["events"]]
        # While it evaluates, it says what it does and how far it is: the loss, then answer after answer.
        saying = [e["data"] for e in c.call("events.query", topics=[f"run/{job['id']}/evaluating"])["events"]]
        setup = [e["data"]["stage"] for e in c.call("events.query", topics=[f"run/{job['id']}/setup"])["events"]]
        rows = c.call("jobs.metrics", id=job["id"], kind="eval")["metrics"]
    # Before the first step it says what it sets up (a large model loads for minutes).
    assert setup == ["reading the data", "loading the model (tiny-llama)", "placing it on cpu"], setup

    validation = [m for _, m in lm.read_rows(lm.DATA_DIR / "validation.jsonl")[0]][:5]
    assert [e["step"] for e in evals] == [2, 4]
    at_2 = [(e["what"], e.get("done"), e.get("total")) for e in saying if e["step"] == 2]
    assert at_2[0] == ("validation loss", None, None) and at_2[1] == ("generating answers", 0, 5)
    assert at_2[-1] == ("generating answers", 5, 5) and [d for _w, d, _t in at_2[1:]] == sorted(d for _w, d, _t in at_2[1:])
    for event in evals:
        assert set(METRICS) <= set(event["metrics"])
        assert all(0.0 <= event["metrics"][m] <= 1.0 for m in METRICS)
        assert [s["reference"] for s in event["samples"]] == [m[-1]["content"] for m in validation]
        assert [s["prompt"] for s in event["samples"]] == [m[-2]["content"] for m in validation]
        assert all(isinstance(s["generated"], str) for s in event["samples"])
        assert event["generation_s"] > 0
    # Each score is a metric row per evaluation, as loss is (the Runs page and comparisons read these).
    stored = {(r["name"], r["step"]): r["value"] for r in rows}
    for m in METRICS:
        assert stored[(m, 2)] == pytest.approx(evals[0]["metrics"][m])
        assert stored[(m, 4)] == pytest.approx(evals[1]["metrics"][m])
    assert ("generation_s", 2) not in stored  # a timing, not a score
