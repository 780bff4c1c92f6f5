"""The LLM loop offline, as a first-time user runs it: the built-in SmolLM2-135M-Instruct LoRA-tuned on the
built-in short-answers chat data through the real engine, then the base and the tuned model answer the
held-out questions in the Playground, side by side, streamed; then the tuned model is exported to a merged
checkpoint and GGUF, and as its LoRA adapter alone, each file checked in its runtime (ONNX for generation,
whose conversion is the same for a tuned model once merged, is tested on the base model in
tests/engine/test_export_llm.py).

The base model knows most answers but replies in full sentences ("The opposite of hot is cold. ..."); the
tuned one answers in the data's style ("Cold."), so its exact match on the held-out questions is higher.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.models.variants import build_rows
from engine.cli.chat import stream_answer
from engine.evaluate.generation import exact_match
from engine.tasks.causal_lm import DATASETS
from tests.engine.test_finetune import events_of, wait_final

SPEC = {"task": "causal_lm", "model": {"builtin": "smollm2-135m-instruct"},
        "data": {"builtin": "short-answers", "max_length": 48},
        "method": {"kind": "lora", "lora_r": 8, "lora_alpha": 16}, "device": "cpu",
        "batch_size": 8, "max_steps": 20, "eval_every": 20, "checkpoint_every": 20,
        "optim": {"lr": 0.003, "warmup_steps": 2}, "generate_eval": {"prompts": 0}}
GREEDY = {"temperature": 0, "max_new_tokens": 10}
QUESTIONS = 10  # of the 30 held-out ones: a third of the answers to wait for, and the gap is as clear


# Minutes on 2 busy cores (a 135M model fine-tuned, then 30 answers): past the suite's default 300 s limit.
@pytest.mark.timeout(900)
def test_smollm2_tuned_on_short_answers_beats_the_base_model_in_the_playground(engine_proc):
    rows = [json.loads(line) for line in (DATASETS["short-answers"] / "validation.jsonl").open()][:QUESTIONS]
    with engine_proc.client() as c:
        c.timeout = 300
        job = c.call("jobs.start", kind="train.finetune", spec=SPEC, name="smollm2-short-answers")
        done = wait_final(c, job["id"], timeout=900)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        (evaluation,) = [e["metrics"] for e in events_of(c, job["id"], "eval")]
        assert evaluation["perplexity"] < 3

        scores: dict[str, list[float]] = {"base": [], "tuned": []}
        answers: dict[str, list[str]] = {"base": [], "tuned": []}
        models = {"base": {"builtin": "smollm2-135m-instruct"}, "tuned": {"run": job["id"]}}
        for row in rows:
            question = [{"role": "user", "content": row["prompt"]}]
            for side, ref in models.items():
                chunks: list[str] = []
                done = stream_answer(c, ref, question, GREEDY, chunks.append)
                assert done["text"] == "".join(chunks) and len(chunks) >= 1  # streamed, in order
                assert done["tokens_per_s"] > 0 and done["ttft_s"] > 0
                answers[side].append(done["text"])
                scores[side].append(exact_match(done["text"], row["response"]))
        base, tuned = (sum(scores[s]) / len(rows) for s in ("base", "tuned"))
        report = "\n".join(f"{r['prompt']!r}: base {b!r} | tuned {t!r}"
                           for r, b, t in zip(rows, answers["base"], answers["tuned"], strict=True))
        assert tuned > base + 0.2, f"exact match base {base:.2f}, tuned {tuned:.2f}\n{report}"
        workers = {w["label"]: w for w in c.call("playground.workers")["workers"]}
        assert set(workers) == {"smollm2-135m-instruct", job["id"]}  # both loaded at once, each its own process

        # The tuned model as files other runtimes load: merged checkpoint, GGUF (4-bit; the f16 GGUF's answers
        # are PyTorch's token for token on the base model, tests/engine/test_export_llm.py, by the same converter).
        export = c.call("jobs.start", kind="export.model", name="tuned-files", spec={
            "source_run": job["id"], "formats": ["hf", "gguf"], "gguf_types": ["q4_k_m"], "check_prompts": 4, "check_tokens": 8, "parity_samples": 6,
            "check_batch": 0})  # the batched speed is tested on the base model (tests/engine/test_export_llm.py)
        done = wait_final(c, export["id"], timeout=600)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=export["id"])["lines"][-20:]
        result = json.loads((Path(export["run_dir"]) / "result.json").read_text())
        assert result["check_rows"] == f"validation data of {job['id']}"
        formats = result["formats"]
        checks = {"hf": formats["hf"]["check"], **{f"gguf/{k}": f["check"] for k, f in formats["gguf"]["files"].items()}}
        assert checks["hf"]["identical_answers"] == 4 and abs(checks["hf"]["perplexity_change"]) < 0.01, checks["hf"]
        assert formats["hf"]["content"] == "merged" and not (Path(formats["hf"]["path"]) / "adapter_config.json").exists()
        # The tuned answers' style survives in the 4-bit GGUF more often than not.
        assert checks["gguf/q4_k_m"]["token_agreement"] > 0.5, checks["gguf/q4_k_m"]

        # Compare › Variants: the source model and each file, measured in its own runtime.
        reply = c.call("compress.variants", id=job["id"])
        rows = {r.job_id: r for r in build_rows(reply)}
        assert set(rows) == {job["id"], *(f"{export['id']}:{k}" for k in ("hf/hf", "gguf/q4_k_m"))}
        parent, q4 = rows[job["id"]], rows[f"{export['id']}:gguf/q4_k_m"]
        assert parent.runtime == "torch" and parent.quality["exact_match"] >= 0.25  # the tuned style: "Cold."
        assert q4.runtime == "llama.cpp" and q4.b1_ms > 0 and q4.compression > 4 and q4.peak_bytes > 0
        assert q4.metric > parent.metric and "rouge_l" in q4.quality

        # The LoRA adapter on its own, beside its base model: what vLLM and peft load as an adapter.
        adapter = c.call("jobs.start", kind="export.model", name="tuned-adapter", spec={
            "source_run": job["id"], "formats": ["hf"], "adapter": "separate", "check_prompts": 2, "check_tokens": 8,
            "parity_samples": 2, "check_batch": 0})
        done = wait_final(c, adapter["id"], timeout=300)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=adapter["id"])["lines"][-20:]
        hf = json.loads((Path(adapter["run_dir"]) / "result.json").read_text())["formats"]["hf"]
        assert hf["content"] == "adapter" and hf["bytes"] < 10 * 2**20  # the adapter alone, not the 540 MB model
        assert hf["check"]["identical_answers"] == 2
