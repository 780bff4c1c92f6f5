"""Answers generated at each causal LM evaluation (engine/tasks/lm_generate.py), with the real tiny Llama."""

from __future__ import annotations

import contextlib
import json

import pytest

from engine.api.train_spec import TrainSpec
from engine.evaluate.generation import METRICS, score_pairs
from engine.tasks import causal_lm as lm
from engine.tasks import lm_generate
from engine.training import dist

torch = pytest.importorskip("torch")

SINGLE = dist.World(0, 0, 1, "cpu", "test")
ROWS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"},
     {"role": "assistant", "content": "4."}, {"role": "user", "content": "And 3 + 3?"},
     {"role": "assistant", "content": "6."}],
    [{"role": "user", "content": "What is the capital of Spain?"}, {"role": "assistant", "content": "Madrid."}],
]


class Recorder:
    """Stands in for the rank context: what rank 0 would write to events.jsonl."""

    stop_requested = False

    def __init__(self):
        self.events: list[dict] = []

    def emit(self, kind, **data):
        self.events.append({"kind": kind, **data})

    def log(self, message):
        pass

    def of(self, kind):
        return [e for e in self.events if e["kind"] == kind]


def spec_for(**overrides) -> TrainSpec:
    spec = {"task": "causal_lm", "method": {"kind": "full"}, "batch_size": 8, "max_steps": 24, "eval_every": 12,
            "device": "cpu", "optim": {"lr": 0.003}, "generate_eval": {"prompts": 8, "max_new_tokens": 24}}
    spec.update(overrides)
    return TrainSpec.model_validate(spec)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """24 steps of tiny-llama on tiny-instructions, evaluated (and answering) at steps 12 and 24."""
    from engine.trainer.loop import Trainer

    rec = Recorder()
    trainer = Trainer(spec_for(), SINGLE, rec, tmp_path_factory.mktemp("run"), save_model=False, checkpoints=False,
                      answer_scorer=score_pairs)
    with torch.random.fork_rng(devices=[]):
        assert trainer.run() == "succeeded"
    return trainer, rec


def validation_rows():
    rows, issues = lm.read_rows(lm.DATA_DIR / "validation.jsonl")
    assert not issues
    return [messages for _, messages in rows]


# ---------------------------------------------------------------- prompts and references


def test_prompt_and_reference_come_from_the_last_assistant_turn():
    prompt, reference = lm_generate.split_row(ROWS[0])
    assert reference == "6."
    assert [m["content"] for m in prompt] == ["Be brief.", "What is 2 + 2?", "4.", "And 3 + 3?"]
    assert lm_generate.shown_prompt(prompt) == "And 3 + 3?"  # the user's last message, not the template text
    assert lm_generate.shown_prompt([{"role": "system", "content": "Answer in French."}]) == "Answer in French."
    assert lm_generate.shown_prompt([]) == ""
    assert lm_generate.clip("x" * 500, 10) == "x" * 9 + "…" and lm_generate.clip("short", 10) == "short"


@pytest.mark.parametrize("with_template", [True, False], ids=["chat-template", "fallback"])
def test_the_prompt_is_the_training_text_up_to_the_answer(tmp_path, with_template):
    folder = lm.make_tiny_model_folder(tmp_path / "m", chat_template=with_template)
    tok = lm.load_tokenizer(folder)
    assert bool(getattr(tok, "chat_template", None)) == with_template
    for messages in ROWS:
        prompt, reference = lm_generate.split_row(messages)
        text = lm_generate.render_prompt(tok, prompt)
        full = tok.decode(lm.encode(tok, messages, 512)["input_ids"])  # what the model trained on
        assert full.startswith(text) and full[len(text):] == reference + tok.eos_token
    # A single turn: the prompt is exactly the tokens before the first learned one.
    enc = lm.encode(tok, ROWS[1], 512)
    prompt_ids = tok(lm_generate.render_prompt(tok, ROWS[1][:1]), add_special_tokens=False)["input_ids"]
    assert prompt_ids == enc["input_ids"][:enc["prompt_tokens"]]
    assert lm_generate.render_prompt(tok, ROWS[1][:1]).endswith("### Assistant:\n")


# ---------------------------------------------------------------- at each evaluation


def test_eval_events_carry_generation_metrics_and_samples(trained):
    trainer, rec = trained
    evals = rec.of("eval")
    assert [e["step"] for e in evals] == [12, 24]
    expected = validation_rows()[:8]
    for event in evals:
        metrics = event["metrics"]
        assert {"loss", "perplexity", *METRICS} <= set(metrics)
        assert all(0.0 <= metrics[m] <= 1.0 for m in METRICS)
        samples = event["samples"]
        assert [s["prompt"] for s in samples] == [lm_generate.shown_prompt(m[:-1]) for m in expected]
        assert [s["reference"] for s in samples] == [m[-1]["content"] for m in expected]
        assert all(isinstance(s["generated"], str) and len(s["generated"]) <= lm_generate.SAMPLE_CHARS
                   for s in samples)
        # The scores are those of the answers shown (all 8 prompts are samples here).
        pairs = [(s["generated"], s["reference"]) for s in samples]
        assert {m: metrics[m] for m in METRICS} == pytest.approx(score_pairs(pairs))
        assert 0 < event["generation_s"] < 10  # 8 x 24 tokens of a 2-layer model: well under a second alone
        json.dumps(event)  # the event is plain JSON
    # After 24 steps the model writes words (at random init it only repeats the template's newline).
    assert any(s["generated"] for s in evals[-1]["samples"])
    assert trainer.last_metrics["token_f1"] == evals[-1]["metrics"]["token_f1"]
    # Generation used the cache, but training settings are untouched.
    plain = trainer.model
    assert plain.training and plain.config.use_cache is False


def test_left_padded_batches_answer_as_prompts_alone_do(trained):
    trainer, _ = trained
    spec = spec_for(batch_size=3, generate_eval={"prompts": 7, "max_new_tokens": 16})
    answers = lm_generate.AnswerEval(spec, trainer.data, SINGLE, score_pairs, Recorder())
    assert len(answers.rows) == 7
    batched = answers.generate(trainer.model, contextlib.nullcontext())
    model, tok = trainer.model, answers.tokenizer
    model.eval()
    alone = []
    with torch.no_grad():
        for row in answers.rows:
            ids = torch.tensor([row["ids"]])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=16,
                                 do_sample=False, use_cache=True, pad_token_id=tok.pad_token_id)
            alone.append(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip())
    model.train()
    assert batched == alone
    assert any(batched)


def test_generation_is_off_without_prompts_a_scorer_or_the_causal_lm_task(trained):
    trainer, _ = trained
    assert lm_generate.for_run(spec_for(generate_eval={"prompts": 0}), trainer.data, SINGLE, score_pairs, None) is None
    assert lm_generate.for_run(spec_for(), trainer.data, SINGLE, None, None) is None
    text = TrainSpec(task="text_classification")
    assert lm_generate.for_run(text, trainer.data, SINGLE, score_pairs, None) is None
    on = lm_generate.for_run(spec_for(generate_eval={"prompts": 3}), trainer.data, SINGLE, score_pairs, None)
    assert on is not None and len(on.rows) == 3


def test_a_failure_costs_the_answers_not_the_run(trained):
    trainer, _ = trained
    rec = Recorder()
    calls = []

    def broken(pairs):
        calls.append(len(pairs))
        raise RuntimeError("scorer broke")

    answers = lm_generate.AnswerEval(spec_for(generate_eval={"prompts": 2, "max_new_tokens": 4}), trainer.data,
                                     SINGLE, broken, rec)
    assert answers.run(trainer.model, contextlib.nullcontext(), step=7) == {"metrics": {}}
    [warning] = rec.of("warning")
    assert warning["step"] == 7
    assert warning["message"].startswith("Generating answers for evaluation failed at step 7 (RuntimeError: "
                                         "scorer broke)")
    assert "generate_eval" in warning["hint"]
    assert answers.run(trainer.model, contextlib.nullcontext(), step=8) == {"metrics": {}}
    assert calls == [2] and len(rec.of("warning")) == 1  # not tried again, not warned again


def test_prompt_tuning_answers_match_a_plain_greedy_loop(tmp_path):
    """PEFT feeds prompt tuning's virtual tokens again at each cached step (peft 0.21, transformers 5), so
    its answers are decoded without the cache, one prompt at a time: the same tokens as re-running the
    whole sequence for every new token."""
    from engine.training import methods

    spec = spec_for(method={"kind": "prompt_tuning", "num_virtual_tokens": 4},
                    generate_eval={"prompts": 2, "max_new_tokens": 6})
    data = lm.load_data(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = methods.apply(lm.build_model(spec, data), spec, lm)
        with torch.no_grad():  # away from random init, where every answer repeats the template's newline
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.5)
    answers = lm_generate.AnswerEval(spec, data, SINGLE, score_pairs, Recorder())
    assert (answers.batch_size, answers.use_cache) == (1, False)
    got = answers.generate(model, contextlib.nullcontext())
    model.eval()
    want = []
    with torch.no_grad():
        for row in answers.rows:
            seq = torch.tensor([row["ids"]])
            for _ in range(6):
                logits = model(input_ids=seq, attention_mask=torch.ones_like(seq)).logits
                seq = torch.cat([seq, logits[:, -1:].argmax(-1)], dim=1)
                if seq[0, -1].item() == answers.tokenizer.eos_token_id:
                    break
            want.append(answers.tokenizer.decode(seq[0, len(row["ids"]):], skip_special_tokens=True).strip())
    assert got == want and any(got)
