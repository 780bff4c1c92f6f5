"""Preference data: reading, rendering and tokenizing the rows of objectives dpo, orpo and kto.

Rows (JSONL, one object a line):

- dpo, orpo: ``{"prompt": ..., "chosen": ..., "rejected": ...}``
- kto: ``{"prompt": ..., "completion": ..., "label": true|false}``; a dpo pair is read as two kto
  rows (chosen true, rejected false), so the same file serves every objective.

The prompt is a string (one user message) or a list of ``{"role", "content"}`` messages; an answer is a
string or a list of assistant messages. A row is rendered with the tokenizer's chat template (or the
causal LM task's fallback template, engine/tasks/causal_lm.py) twice, as TRL does: the prompt alone
with the generation prompt, and the prompt followed by the answer. The answer's tokens are those after
the longest common prefix, taken over both answers of a pair, so chosen and rejected share exactly the
same prompt tokens. A row longer than ``data.max_length`` loses the end of its answer; a row whose
prompt alone fills ``data.max_length`` is reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks import causal_lm as lm
from engine.tasks.base import Issue

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

BUILTIN = "tiny-preferences"
DATA_DIR = Path(__file__).resolve().parent.parent / "resources" / "datasets" / "tiny_preferences"
_FORMS = ('the prompt a string or a list of {"role", "content"} messages, each answer a string or a list '
          'of assistant messages')
PAIR_HINT = f'each line must be {{"prompt": ..., "chosen": ..., "rejected": ...}}, {_FORMS}'
KTO_HINT = (f'each line must be {{"prompt": ..., "completion": ..., "label": true or false}} or a '
            f'{{"prompt", "chosen", "rejected"}} pair, {_FORMS}')


# ---------------------------------------------------------------- rows


def _messages(value: Any, key: str, answer: bool) -> tuple[list[dict[str, str]] | None, str | None]:
    """A prompt or an answer as chat messages, or the problem with it."""
    if isinstance(value, str):
        if answer and not value.strip():
            return None, f'"{key}" is empty'
        return [{"role": "assistant" if answer else "user", "content": value}], None
    if not isinstance(value, list) or not value:
        return None, f'"{key}" must be a string or a non-empty list of {{"role", "content"}} messages'
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            return None, f'{key}[{i}] needs "role" and "content"'
        if m["role"] not in lm.ROLES:
            return None, f'unknown role "{m["role"]}" in {key}[{i}] (use system, user or assistant)'
        if answer and m["role"] != "assistant":
            return None, f'{key}[{i}] has role "{m["role"]}": an answer holds assistant messages only'
        if not isinstance(m["content"], str):
            return None, f"{key}[{i}].content must be a string"
        if answer and not m["content"].strip():
            return None, f"{key}[{i}] is an empty answer"
        out.append({"role": m["role"], "content": m["content"]})
    if not answer and out[-1]["role"] == "assistant":
        return None, f'the last message of "{key}" is the assistant\'s; the prompt must end before the answer'
    return out, None


def parse_pair(obj: Any) -> tuple[dict | None, str | None]:
    """{"prompt", "chosen", "rejected"} as message lists, or the problem with the row."""
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    missing = [k for k in ("prompt", "chosen", "rejected") if k not in obj]
    if missing:
        extra = ' (a "completion" and "label" row is for objective kto)' if "completion" in obj else ""
        return None, "missing field " + " and ".join(f'"{k}"' for k in missing) + extra
    row = {}
    for key in ("prompt", "chosen", "rejected"):
        row[key], problem = _messages(obj[key], key, answer=key != "prompt")
        if problem:
            return None, problem
    return row, None


def parse_kto(obj: Any) -> tuple[dict | None, str | None]:
    """A kto row {"prompt", "completion", "label"}, or a pair to be unpaired."""
    if isinstance(obj, dict) and "chosen" in obj and "completion" not in obj:
        return parse_pair(obj)
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    missing = [k for k in ("prompt", "completion", "label") if k not in obj]
    if missing:
        return None, "missing field " + " and ".join(f'"{k}"' for k in missing)
    if not isinstance(obj["label"], bool):
        return None, f'"label" must be true or false, not {obj["label"]!r}'
    row: dict[str, Any] = {"label": obj["label"]}
    for key in ("prompt", "completion"):
        row[key], problem = _messages(obj[key], key, answer=key == "completion")
        if problem:
            return None, problem
    return row, None


def read(path: Path, objective: str) -> tuple[list[tuple[int, dict]], list[Issue]]:
    """(line, row) for every good row; an Issue with file, line and fix for every bad one."""
    if objective == "kto":
        return lm.read_rows(path, parse_kto, KTO_HINT)
    return lm.read_rows(path, parse_pair, PAIR_HINT)


def unpair(rows: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """Pairs as kto rows (chosen: desirable, rejected: undesirable), as TRL's unpair_preference_dataset."""
    out = []
    for line, row in rows:
        if "chosen" in row:
            out.append((line, {"prompt": row["prompt"], "completion": row["chosen"], "label": True}))
            out.append((line, {"prompt": row["prompt"], "completion": row["rejected"], "label": False}))
        else:
            out.append((line, row))
    return out


def resolve_files(spec: TrainSpec) -> tuple[Path | None, Path | None, list[Issue]]:
    """The training and validation files: the built-in tiny-preferences unless data.path is set."""
    d = spec.data
    if d.builtin is not None or d.path is None:
        name = d.builtin or BUILTIN
        if name != BUILTIN:
            return None, None, [Issue(f'unknown built-in preference dataset "{name}"',
                                      f'use "{BUILTIN}", or set data.path to a JSONL file of preference rows')]
        return DATA_DIR / "train.jsonl", DATA_DIR / "validation.jsonl", []
    from engine.tasks.safe_archive import dataset_path
    from engine.training.context import JobFailed

    try:  # a .zip/.tar.gz dataset is unpacked safely first, as for supervised fine-tuning
        path, val_path = dataset_path(d.path), dataset_path(d.val_path)
    except JobFailed as exc:
        return None, None, [Issue(str(exc), exc.hint, d.path)]
    return Path(path).expanduser(), Path(val_path).expanduser() if val_path else None, []


# ---------------------------------------------------------------- tokens


def render(tokenizer: Any, messages: list[dict[str, str]], generation: bool) -> str:
    template = None if getattr(tokenizer, "chat_template", None) else lm.CHAT_TEMPLATE
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation,
                                         chat_template=template)


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def tokenize(tokenizer: Any, prompt: list[dict], answers: list[list[dict]], max_length: int
             ) -> tuple[list[int], list[list[int]], bool]:
    """(prompt ids, each answer's ids cut to fit max_length, whether any was cut)."""
    prompt_ids = _ids(tokenizer, render(tokenizer, prompt, True))
    fulls = [_ids(tokenizer, render(tokenizer, prompt + answer, False)) for answer in answers]
    n = min(_common(prompt_ids, full) for full in fulls)
    room = max(0, max_length - n)
    outs = [full[n:] for full in fulls]
    return prompt_ids[:n], [o[:room] for o in outs], any(len(o) > room for o in outs)


def encode_rows(tokenizer: Any, path: Path, rows: list[tuple[int, dict]], objective: str, max_length: int
                ) -> tuple[list[dict], list[Issue], int]:
    """Token rows for the objective: pairs {prompt_ids, chosen_ids, rejected_ids}, or kto rows
    {prompt_ids, completion_ids, label}; the Issues, and how many rows lost the end of an answer."""
    out, issues, cut = [], [], 0
    keys = ("completion",) if objective == "kto" else ("chosen", "rejected")
    for line, row in rows:
        try:
            prompt_ids, answers, was_cut = tokenize(tokenizer, row["prompt"], [row[k] for k in keys], max_length)
        except Exception as exc:  # noqa: BLE001 - a chat template may raise anything (jinja, its own checks)
            issues.append(Issue(f"the model's chat template rejected this row ({exc})",
                                "check the roles and their order for this model's template", str(path), line))
            continue
        if not all(answers):
            issues.append(Issue(f"the answer is cut off entirely: the prompt takes {len(prompt_ids)} tokens and "
                                f"data.max_length is {max_length}", "raise data.max_length or shorten the prompt",
                                str(path), line))
            continue
        cut += was_cut
        token_row: dict[str, Any] = {"prompt_ids": prompt_ids, **{f"{k}_ids": a for k, a in zip(keys, answers,
                                                                                               strict=True)}}
        if objective == "kto":
            token_row["label"] = row["label"]
        out.append(token_row)
    return out, issues, cut


def add_kl_completions(rows: list[dict], group: int, max_length: int) -> None:
    """Each kto row's mismatched completion for the KL baseline: the previous row's in its group of
    ``group`` consecutive rows (TRL rotates the completions of each batch the same way)."""
    for start in range(0, len(rows), group):
        part = rows[start:start + group]
        completions = [part[-1]["completion_ids"]] + [r["completion_ids"] for r in part[:-1]]
        for r, c in zip(part, completions, strict=True):
            r["kl_completion_ids"] = c[:max(1, max_length - len(r["prompt_ids"]))]


# ---------------------------------------------------------------- batches


def pad(seqs: list[list[int]], prompt_lens: list[int], pad_id: int, multiple_of: int = 8
        ) -> dict[str, torch.Tensor]:
    """Right-padded input_ids, attention_mask and labels (the answer's tokens; -100 elsewhere)."""
    import torch

    longest = max(len(s) for s in seqs)
    width = -(-longest // multiple_of) * multiple_of
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    labels = torch.full((len(seqs), width), lm.IGNORE, dtype=torch.long)
    for r, (s, p) in enumerate(zip(seqs, prompt_lens, strict=True)):
        ids[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = 1
        labels[r, p:len(s)] = ids[r, p:len(s)]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class PairCollator:
    """A batch of n pairs as 2n rows: the chosen answers first, then the rejected ones (one forward pass).

    ``ref_logps`` (2n) comes along once the reference has been computed; ``options`` is the
    objective and its settings, so the task's forward needs nothing but the batch."""

    def __init__(self, pad_id: int, options: Any):
        self.pad_id, self.options = pad_id, options

    def __call__(self, rows: list[dict]) -> dict[str, Any]:
        import torch

        seqs = [r["prompt_ids"] + r["chosen_ids"] for r in rows] + [r["prompt_ids"] + r["rejected_ids"] for r in rows]
        batch: dict[str, Any] = pad(seqs, [len(r["prompt_ids"]) for r in rows] * 2, self.pad_id)
        if all("ref" in r for r in rows):
            batch["ref_logps"] = torch.tensor([r["ref"][0] for r in rows] + [r["ref"][1] for r in rows])
        batch["options"] = self.options
        return batch


class KtoCollator:
    """A batch of kto rows, with each row's mismatched (KL) sequence and the desirable labels."""

    def __init__(self, pad_id: int, options: Any):
        self.pad_id, self.options = pad_id, options

    def __call__(self, rows: list[dict]) -> dict[str, Any]:
        import torch

        prompts = [len(r["prompt_ids"]) for r in rows]
        batch: dict[str, Any] = pad([r["prompt_ids"] + r["completion_ids"] for r in rows], prompts, self.pad_id)
        kl = pad([r["prompt_ids"] + r["kl_completion_ids"] for r in rows], prompts, self.pad_id)
        batch.update({f"kl_{k}": v for k, v in kl.items()})
        batch["label"] = torch.tensor([r["label"] for r in rows], dtype=torch.bool)
        if all("ref" in r for r in rows):
            batch["ref_logps"] = torch.tensor([r["ref"][0] for r in rows])
            batch["ref_kl_logps"] = torch.tensor([r["ref"][1] for r in rows])
        batch["options"] = self.options
        return batch
