"""Evaluations: a run's ``evaluate.model`` results beside its variants' and its base model's (docs/evaluate.md).

``evaluations.list {id}`` starts from the fine-tune the run belongs to (a variant's or an evaluation's
id leads there too) and returns one row per model: the base model the fine-tune started from (language
models only: a classifier's base has no trained head), the fine-tune, and every variant made from it.
Each row lists its evaluations, newest first, with the scores from their ``result.json``. An evaluation of a
run is that job's child (the engine records ``model.run`` as its parent, as it does a variant's source); a
base model's evaluations are the ones whose ``model`` names that model. ``data_key`` says which data was
scored, so the GUI puts side by side only figures measured on the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.api.job_terms import EVALUATE, EXPORT, FINETUNE
from engine.api.protocol import INVALID_PARAMS, RpcError
from engine.api.train_spec import BUILTIN_MODELS
from engine.daemon.handlers.params import JobId, Params
from engine.daemon.job_records import read_json, record

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView
    from engine.daemon.store import Store

MAX_DEPTH = 8  # generations followed up to the fine-tune, and down through variants of variants
MAX_BASE_SCAN = 10_000  # evaluate jobs looked through for the base model's


def _model(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (spec.get("model") or {}).items() if v}


def root_of(store: Store, job: dict[str, Any]) -> dict[str, Any]:
    """The fine-tune ``job`` descends from (itself when it is one)."""
    current = job
    for _ in range(MAX_DEPTH):
        if current.get("kind") == FINETUNE or not current.get("parent_id"):
            return current
        parent = store.get_job(current["parent_id"])
        if parent is None:
            return current
        current = parent
    return current


def base_ref(root: dict[str, Any]) -> dict[str, Any] | None:
    """The model a language-model fine-tune started from, as a ModelRef; None for other tasks."""
    spec = root.get("spec") or {}
    task = spec.get("task") or "text_classification"
    if root.get("kind") != FINETUNE or task != "causal_lm":
        return None
    model = spec.get("model") or {}
    if model.get("code"):
        return None  # the user's own model code: nothing to open as a plain model
    if model.get("builtin"):
        return {"builtin": model["builtin"]}
    if model.get("hub"):
        return {"hub": model["hub"], **({"revision": model["revision"]} if model.get("revision") else {})}
    if model.get("path"):
        return {"path": model["path"]}
    return {"builtin": BUILTIN_MODELS[task]}


def data_of(store: Store, spec: dict[str, Any]) -> tuple[str, str]:
    """(key, words) of the data an evaluation scores: the same key means the same rows."""
    if spec.get("generation") is False:
        return "", "lm-eval only"
    if spec.get("data"):
        data = str(spec["data"])
        return f"data:{data}", Path(data).name or data
    job_id = spec.get("validation_of") or _model(spec).get("run")
    job = store.get_job(job_id) if job_id else None
    root = root_of(store, job) if job else None
    root_id = root["id"] if root else job_id
    name = (root or {}).get("name") or root_id
    return f"validation:{root_id}", f"validation data of {name}"


def evaluation(store: Store, job: dict[str, Any]) -> dict[str, Any]:
    """One evaluate job as a table cell needs it: state, data, scores (no samples: jobs.get has them)."""
    spec = job.get("spec") or {}
    key, words = data_of(store, spec)
    result = read_json(Path(job["run_dir"]) / "result.json") if job.get("run_dir") else None
    result = result or {}
    scored = result.get("generation") or result.get("classification") or {}
    lm = result.get("lm_eval") or {}
    return {"job": job["id"], "name": job.get("name"), "state": job.get("state"), "created_at": job.get("created_at"),
            "ended_at": job.get("ended_at"), "error": job.get("error"), "model": _model(spec),
            "data_key": key, "data_label": words, "rows": scored.get("rows"), "metrics": scored.get("metrics") or {},
            "lm_eval": [{k: row.get(k) for k in ("task", "metric", "filter", "value", "stderr", "docs",
                                                 "higher_is_better")} for row in lm.get("tasks") or []],
            "complete": result.get("complete"), "timings": result.get("timings")}


def _newest_first(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda e: e.get("created_at") or 0, reverse=True)


def of_run(store: Store, job_id: str) -> list[dict[str, Any]]:
    children = (store.get_job(c) for c in store.child_jobs(job_id))
    return _newest_first([evaluation(store, c) for c in children if c is not None and c.get("kind") == EVALUATE])


def of_base(store: Store, ref: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = store.list_jobs(kind=EVALUATE, limit=MAX_BASE_SCAN)
    return _newest_first([evaluation(store, j) for j in jobs if _model(j.get("spec") or {}) == ref])


def variants_of(store: Store, root_id: str) -> list[dict[str, Any]]:
    """Every variant made from the fine-tune, variants of variants included, oldest first."""
    found: list[dict[str, Any]] = []
    level, seen = [root_id], {root_id}
    for _ in range(MAX_DEPTH):
        below = []
        for parent in level:
            for child_id in store.child_jobs(parent):
                child = store.get_job(child_id)
                if child is None or child_id in seen or child.get("kind") in (EXPORT, EVALUATE):
                    continue
                seen.add(child_id)
                found.append(child)
                below.append(child_id)
        level = below
    return sorted(found, key=lambda j: j.get("created_at") or 0)


def listing(store: Store, job: dict[str, Any]) -> dict[str, Any]:
    """evaluations.list's reply for the family ``job`` belongs to."""
    if job.get("kind") == EVALUATE and not job.get("parent_id"):
        raise RpcError(INVALID_PARAMS, f"Job {job['id']} evaluates a model that is not a run",
                       {"hint": "Ask for the evaluations of a fine-tune or a variant (its id on the Runs page)."})
    root = root_of(store, job)
    rows: list[dict[str, Any]] = []
    base = base_ref(root)
    if base is not None:
        label = base.get("builtin") or base.get("hub") or base.get("path")
        rows.append({"role": "base", "label": f"{label} (base model)", "model": base, "job": None,
                     "evaluations": of_base(store, base)})
    rows.append({"role": "run", "label": root.get("name") or root["id"], "model": {"run": root["id"]},
                 "job": record(store, root), "evaluations": of_run(store, root["id"])})
    for variant in variants_of(store, root["id"]):
        rows.append({"role": "variant", "label": variant.get("name") or variant["id"], "model": {"run": variant["id"]},
                     "job": record(store, variant), "evaluations": of_run(store, variant["id"])})
    task = (root.get("spec") or {}).get("task") if root.get("kind") == FINETUNE else None
    return {"id": job["id"], "root": root["id"], "task": task, "rows": rows}


class EvaluationHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {"evaluations.list": (JobId, self.evaluations_list)}

    async def evaluations_list(self, s: Client, p: JobId) -> Any:
        reply = listing(self.engine.store, self.engine.jobs.get(p.id))
        if s.user.sees_all:
            return reply
        # A family can reach into another project (a run made before projects were checked, a shared base
        # model's evaluations): only this user's projects' jobs and results are shown.
        access = self.engine.access

        def mine(job: Any) -> bool:
            job_id = job.get("id") if isinstance(job, dict) else job
            return job_id is None or access.visible_existing(s.user, str(job_id))

        rows = []
        for row in reply["rows"]:
            if row["role"] == "variant" and not mine(row["job"]):
                continue
            evaluations = [e for e in row["evaluations"] if mine(e.get("job"))]
            rows.append({**row, "job": row["job"] if mine(row["job"]) else None, "evaluations": evaluations})
        return {**reply, "rows": rows}
