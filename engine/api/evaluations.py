"""The evaluation table: ``evaluations.list``'s reply as rows (models) and columns (scores).

Shared by the Compare page's Evaluations tab and ``ember evaluate``, so both show the same figures.
A row is the base model, the fine-tune or a variant; its answer scores come from its newest finished
evaluation on the chosen data (the same rows for every model), each lm-eval figure from its newest
finished evaluation that ran that task. Stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.api.job_terms import ACTIVE_STATES, SUCCEEDED

GENERATION_METRICS = ("exact_match", "token_f1", "rouge_l", "bleu", "chrf")
CLASSIFIER_METRICS = ("accuracy", "macro_f1")
HEADINGS = {"exact_match": "Exact match", "token_f1": "Token F1", "rouge_l": "ROUGE-L", "bleu": "BLEU",
            "chrf": "chrF", "accuracy": "Accuracy", "macro_f1": "Macro F1"}
ROLE_WORDS = {"base": "base model", "run": "fine-tune", "variant": "variant"}


@dataclass
class Row:
    label: str
    role: str  # base | run | variant
    model: dict[str, Any]  # a ModelRef: what evaluate.model is started with
    cells: dict[str, float | None] = field(default_factory=dict)  # column -> value
    stderr: dict[str, float | None] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)  # column -> the evaluate job the value came from
    evaluations: list[dict[str, Any]] = field(default_factory=list)  # every evaluation, newest first
    active: bool = False  # an evaluation of it is queued or running

    def has(self, data_key: str) -> bool:
        """Whether a finished (or running) evaluation of this model scored ``data_key``."""
        return any(e.get("data_key") == data_key and e.get("state") in (SUCCEEDED, *ACTIVE_STATES)
                   for e in self.evaluations)


def job_name(model: dict[str, Any]) -> str:
    """A name for the evaluation of ``model``: none for a run (the Runs page says "evaluation of <run>"),
    else the model's name, e.g. ``tiny-llama-eval``."""
    if model.get("run"):
        return ""
    text = str(model.get("builtin") or model.get("hub") or model.get("path") or "model").rstrip("/")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.rsplit("/", 1)[-1]).strip("-.")[:80] + "-eval"


def lm_column(entry: dict[str, Any]) -> str:
    """``task metric`` (with the filter when it is not lm-eval's default ``none``)."""
    filt = entry.get("filter")
    return f"{entry.get('task')} {entry.get('metric')}" + (f" ({filt})" if filt and filt != "none" else "")


def data_choices(reply: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, words) of every dataset scored in this family, the most recently evaluated first."""
    seen: dict[str, tuple[str, float]] = {}
    for row in reply.get("rows") or []:
        for e in row.get("evaluations") or []:
            key = e.get("data_key")
            if key and (key not in seen or (e.get("created_at") or 0) > seen[key][1]):
                seen[key] = (str(e.get("data_label") or key), e.get("created_at") or 0)
    return [(k, words) for k, (words, _t) in sorted(seen.items(), key=lambda kv: kv[1][1], reverse=True)]


def _finished(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in evals if e.get("state") == SUCCEEDED]


def build(reply: dict[str, Any], data_key: str | None = None) -> tuple[list[str], list[Row]]:
    """(columns, rows) for ``data_key`` (None: the data evaluated most recently)."""
    if data_key is None:
        choices = data_choices(reply)
        data_key = choices[0][0] if choices else ""
    classifier = reply.get("task") == "text_classification"
    score_columns = list(CLASSIFIER_METRICS if classifier else GENERATION_METRICS)
    lm_columns: list[str] = []
    rows: list[Row] = []
    for item in reply.get("rows") or []:
        evals = list(item.get("evaluations") or [])
        row = Row(str(item.get("label") or ""), str(item.get("role") or ""), dict(item.get("model") or {}),
                  evaluations=evals, active=any(e.get("state") in ACTIVE_STATES for e in evals))
        scored = next((e for e in _finished(evals) if e.get("data_key") == data_key and e.get("metrics")), None)
        for name in score_columns:
            if scored is not None:
                row.cells[name] = scored["metrics"].get(name)
                row.jobs[name] = scored["job"]
        for e in reversed(_finished(evals)):  # oldest first, so the newest figure of each task wins
            for entry in e.get("lm_eval") or []:
                column = lm_column(entry)
                if column not in lm_columns:
                    lm_columns.append(column)
                row.cells[column], row.stderr[column], row.jobs[column] = entry.get("value"), entry.get("stderr"), e["job"]
        rows.append(row)
    return score_columns + sorted(lm_columns), rows


def heading(column: str) -> str:
    return HEADINGS.get(column, column)


def cell_text(value: float | None, stderr: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" + (f" ± {stderr:.3f}" if stderr else "")
