"""Answers a causal LM fine-tune generates for its first validation prompts, at each evaluation.

Each validation row is split at its last assistant turn: the messages before it are the prompt and
that turn's content is the reference answer. The prompt is rendered with the template the run trains
with (``data.chat_template``: the model's own, or the one chosen) and ``add_generation_prompt=True``; a
tokenizer without a template renders ``chat_templates.CHAT_TEMPLATE``, which gives the same text as the
fallback encoding the model trained on.
Prompts longer than ``data.max_length`` tokens keep their end (where the answer starts).

Decoding is greedy, at most ``generate_eval.max_new_tokens`` new tokens, with the KV cache on (the
training config turns it off; prompt tuning decodes without it, one prompt at a time) and the model in
eval mode, restored afterwards. The answers are
scored by a function the caller passes (engine.evaluate.generation.score_pairs: the scores live a
layer above the trainer).

Processes: where the parameters are sharded (FSDP across processes, DeepSpeed ZeRO-3) each forward
gathers them from every rank, so every rank generates the same prompts in lockstep (``synced_gpus``:
the decoding loop ends on all ranks together). Otherwise rank 0 alone generates, with the plain
module (no DDP or DeepSpeed wrapper). Rank 0 scores and shares the scores, so that early stopping on
a generation metric decides the same on every rank.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks import chat_templates
from engine.tasks.causal_lm import load_tokenizer
from engine.training import dist
from engine.training.checkpoint import unwrap

if TYPE_CHECKING:
    from engine.api.train_spec import TrainSpec
    from engine.tasks.base import TaskData

SAMPLES = 8  # {prompt, reference, generated} rows an eval event carries
SAMPLE_CHARS = 400  # longer strings are cut, so an event stays small

Scorer = Callable[[Sequence[tuple[str, str]]], dict[str, float]]


def split_row(messages: list[dict[str, str]]) -> tuple[list[dict[str, str]], str]:
    """(the messages before the last assistant turn, that turn's content)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return messages[:last], messages[last]["content"]


def shown_prompt(prompt: list[dict[str, str]]) -> str:
    """What a person reads as the question: the last user message (else the last message)."""
    users = [m["content"] for m in prompt if m["role"] == "user"]
    return users[-1] if users else (prompt[-1]["content"] if prompt else "")


def render_prompt(tokenizer: Any, prompt: list[dict[str, str]]) -> str:
    """The prompt as training rendered it: the tokenizer's template (the run's choice, applied when it was
    loaded), else the fallback."""
    return chat_templates.render_prompt(tokenizer, prompt, "auto")


def clip(text: str, limit: int = SAMPLE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sharded(spec: TrainSpec, world: dist.World) -> bool:
    """Whether every forward needs every rank (the parameters are spread over the processes)."""
    d = spec.distributed
    return world.distributed and (d.strategy == "fsdp" or d.tensor_parallel > 1
                                  or (d.strategy == "deepspeed" and d.zero_stage == 3))


class AnswerEval:
    """The prompts, references and token ids for one run, prepared once; ``run`` at each evaluation."""

    def __init__(self, spec: TrainSpec, data: TaskData, world: dist.World, scorer: Scorer, rc: Any):
        self.world, self.scorer, self.rc = world, scorer, rc
        self.failed = False
        self.max_new_tokens = spec.generate_eval.max_new_tokens
        # Prompt tuning drops position ids, so a left-padded prompt would sit at the wrong positions: one at a
        # time. And PEFT feeds its virtual tokens again at every cached step, so it decodes without the cache.
        prompt_tuning = spec.method.kind == "prompt_tuning"
        self.batch_size = 1 if prompt_tuning else spec.batch_size
        self.use_cache = not prompt_tuning
        self.lockstep = sharded(spec, world)
        self.tokenizer = tok = load_tokenizer(Path(data.info["model_dir"]), spec.data.chat_template)
        self.pad_id = data.info.get("pad_id", tok.pad_token_id if tok.pad_token_id is not None else 0)
        self.rows: list[dict[str, Any]] = []  # prompt (shown), reference, ids
        for messages in data.val_messages or []:
            if len(self.rows) >= spec.generate_eval.prompts:
                break
            prompt, reference = split_row(messages)
            try:
                text = render_prompt(tok, prompt)
            except Exception:  # noqa: BLE001 - a template may refuse a prompt (e.g. no user turn): skip the row
                continue
            ids = tok(text, add_special_tokens=False)["input_ids"][-spec.data.max_length:]
            if not ids:
                continue
            self.rows.append({"prompt": shown_prompt(prompt), "reference": reference, "ids": list(ids)})

    def __bool__(self) -> bool:
        return bool(self.rows)

    def generate(self, model: Any, autocast: contextlib.AbstractContextManager, step: int = 0) -> list[str] | None:
        """Each prompt's answer on the ranks that generate; None on the others. Rank 0 says how far it is
        (``evaluating`` events: answers done of all), since minutes can pass here on a CPU."""
        if self.failed or not (self.lockstep or self.world.is_main):
            return None
        import torch
        from transformers import GenerationConfig

        module = unwrap(model)
        device = self.world.device
        own = getattr(module, "generation_config", None)
        eos = own.eos_token_id if own is not None and own.eos_token_id is not None else self.tokenizer.eos_token_id
        config = GenerationConfig(max_new_tokens=self.max_new_tokens, do_sample=False, num_beams=1,
                                  use_cache=self.use_cache, pad_token_id=self.pad_id, eos_token_id=eos)
        was_training = module.training
        module.eval()
        answers: list[str] = []
        total = len(self.rows)

        def say(done: int) -> None:
            if self.world.is_main:
                self.rc.emit("evaluating", step=step, what="generating answers", done=done, total=total)

        try:
            say(0)
            with torch.no_grad(), autocast, _eager():
                for start in range(0, len(self.rows), self.batch_size):
                    chunk = [r["ids"] for r in self.rows[start:start + self.batch_size]]
                    ids, mask = _left_pad(chunk, self.pad_id, device)
                    out = module.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                          synced_gpus=self.lockstep)
                    if out.shape[1] >= ids.shape[1] and torch.equal(out[:, :ids.shape[1]], ids):
                        out = out[:, ids.shape[1]:]  # the prompt comes back in front of the answer
                    answers += [self.tokenizer.decode(row, skip_special_tokens=True).strip() for row in out.tolist()]
                    say(len(answers))
        finally:
            module.train(was_training)
        return answers

    def run(self, model: Any, autocast: contextlib.AbstractContextManager, step: int) -> dict[str, Any]:
        """The eval event's extra fields: ``metrics`` on every rank; ``samples`` and ``generation_s`` on rank 0."""
        t0 = time.perf_counter()
        answers, scores = None, None
        try:
            answers = self.generate(model, autocast, step)
            if self.world.is_main and answers is not None:
                scores = self.scorer([(a, r["reference"]) for a, r in zip(answers, self.rows, strict=True)])
        except Exception as exc:
            if self.lockstep:
                raise  # the other ranks wait in the same forward: only ending the run frees them
            self._give_up(exc, step)
            answers = None
        metrics = dist.gather_objects(self.world, scores)[0] if self.world.distributed else scores
        if not self.world.is_main or answers is None:
            return {"metrics": metrics or {}}
        samples = [{"prompt": clip(r["prompt"]), "reference": clip(r["reference"]), "generated": clip(a)}
                   for r, a in zip(self.rows[:SAMPLES], answers, strict=False)]
        return {"metrics": metrics, "samples": samples, "generation_s": time.perf_counter() - t0}

    def _give_up(self, exc: Exception, step: int) -> None:
        """A failure here costs the generated answers, never the run (rank 0 generated alone)."""
        self.failed = True
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        self.rc.emit("warning", step=step,
                     message=f"Generating answers for evaluation failed at step {step} ({type(exc).__name__}: "
                             f"{first}); the run goes on without generation metrics",
                     hint="Lower generate_eval.max_new_tokens or generate_eval.prompts, or set prompts to 0.")
        self.rc.log(f"answer generation failed at step {step}: {type(exc).__name__}: {first}")


def for_run(spec: TrainSpec, data: TaskData, world: dist.World, scorer: Scorer | None,
            rc: Any) -> AnswerEval | None:
    """The run's AnswerEval; None when nothing is to be generated (another task, prompts 0, no scorer)."""
    if scorer is None or spec.task != "causal_lm" or not spec.generate_eval.prompts or not data.val_messages:
        return None
    answers = AnswerEval(spec, data, world, scorer, rc)
    return answers or None


def _left_pad(rows: list[list[int]], pad_id: int, device: Any) -> tuple[Any, Any]:
    """Prompts padded on the left, so every answer starts right after its prompt."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


def _eager() -> contextlib.AbstractContextManager:
    """A compiled model decodes eagerly: each new length would otherwise be compiled again."""
    import torch

    stance = getattr(torch.compiler, "set_stance", None)
    return stance("force_eager") if stance is not None else contextlib.nullcontext()
