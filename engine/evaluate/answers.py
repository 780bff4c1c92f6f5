"""A chat model's greedy answers to a dataset's prompts, scored against the reference answers.

The ``evaluate.model`` job (docs/evaluate.md) reads rows as a fine-tune does (``{"prompt", "response"}`` or
``{"messages": [...]}``, engine/tasks/causal_lm.py) and splits each at its last assistant turn, as the
fine-tune's own evaluation does (engine/tasks/lm_generate.py): the messages before it are the prompt, its
content the reference. The prompt is rendered with the tokenizer's chat template (a tuned run's tokenizer
carries the template it trained with; one without any renders Ember's plain template), so a run is asked
exactly as it was trained. Decoding is greedy, batched with left padding; a prompt longer than the model's
context keeps its end. Scores: engine/evaluate/generation.py's five.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.evaluate.generation import score_pairs
from engine.tasks.lm_generate import clip, render_prompt, shown_prompt, split_row
from engine.training.context import JobFailed

SAMPLES = 10  # {prompt, reference, generated} rows kept in result.json
SHOWN_ISSUES = 5

Messages = list[dict[str, str]]


def read_messages(path: Path) -> list[Messages]:
    """Every row of a prompt/response or messages JSONL file; JobFailed naming the first bad lines."""
    from engine.tasks.causal_lm import ROW_HINT, read_rows

    rows, issues = read_rows(Path(path))
    if issues:
        shown = "; ".join(f"line {i.line}: {i.message}" if i.line else i.message for i in issues[:SHOWN_ISSUES])
        more = f" (and {len(issues) - SHOWN_ISSUES} more)" if len(issues) > SHOWN_ISSUES else ""
        raise JobFailed(f"Cannot use {path}: {shown}{more}", f"Fix the lines named: {ROW_HINT}.")
    return [messages for _line, messages in rows]


def pairs_of(rows: Sequence[Messages]) -> list[tuple[Messages, str]]:
    """(prompt messages, reference answer) of each row."""
    return [split_row(messages) for messages in rows]


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    own = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    value = own if own is not None else tokenizer.eos_token_id
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def generate(model: Any, tokenizer: Any, prompts: Sequence[Messages], max_new_tokens: int, batch_size: int,
             progress: Callable[[int], None] = lambda _done: None,
             stop: Callable[[], bool] = lambda: False) -> list[str] | None:
    """Each prompt's greedy answer, in order; None when ``stop()`` turned true between batches."""
    import torch
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    context = int(getattr(model.config, "max_position_embeddings", 0) or 0) or 2048
    room = max(1, context - max_new_tokens)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (_eos_ids(model, tokenizer) or [0])[0]
    eos = _eos_ids(model, tokenizer)
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, use_cache=True,
                              pad_token_id=pad, eos_token_id=eos or None)
    ids = [tokenizer(render_prompt(tokenizer, p), add_special_tokens=False)["input_ids"][-room:] or [pad]
           for p in prompts]
    answers: list[str] = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            if stop():
                return None
            chunk = ids[start:start + batch_size]
            width = max(len(r) for r in chunk)
            batch = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, row in enumerate(chunk):  # left padding: every answer starts right after its prompt
                batch[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
                mask[i, width - len(row):] = 1
            out = model.generate(input_ids=batch.to(device), attention_mask=mask.to(device), generation_config=config)
            new = out[:, width:].tolist()
            answers += [tokenizer.decode(row, skip_special_tokens=True).strip() for row in new]
            progress(len(answers))
    return answers


def score(pairs: Sequence[tuple[Messages, str]], answers: Sequence[str], seconds: float) -> dict[str, Any]:
    """result.json's ``generation``: the five scores, a few samples, counts and time."""
    scored = [(a, ref) for a, (_p, ref) in zip(answers, pairs, strict=True)]
    samples = [{"prompt": clip(shown_prompt(p)), "reference": clip(ref), "generated": clip(a)}
               for a, (p, ref) in list(zip(answers, pairs, strict=True))[:SAMPLES]]
    return {"metrics": score_pairs(scored), "rows": len(scored), "samples": samples, "seconds": seconds,
            "answers_per_s": len(scored) / seconds if seconds > 0 else None}


def evaluate(model: Any, tokenizer: Any, rows: Sequence[Messages], max_new_tokens: int, batch_size: int,
             progress: Callable[[int], None] = lambda _done: None,
             stop: Callable[[], bool] = lambda: False) -> dict[str, Any] | None:
    """Generate and score in one call (None when stopped)."""
    pairs = pairs_of(rows)
    t0 = time.perf_counter()
    answers = generate(model, tokenizer, [p for p, _ in pairs], max_new_tokens, batch_size, progress, stop)
    if answers is None:
        return None
    return score(pairs, answers, time.perf_counter() - t0)
