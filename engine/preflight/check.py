"""Look at a job's inputs before launch, in a process of its own.

Reads ``{"op": "check" | "preview" | "inspect_data" | "facts", "kind": ..., "spec": {...}, "n": 8}``
as JSON on stdin (``inspect_data``: engine/preflight/data.py; ``facts``: the model measured on the
meta device by engine/estimate/facts.py). ``check`` prints ``{"issues": [{message, hint, file, line}, ...]}`` (the
spec, then the files, rows, labels and model folder); ``preview`` prints
``{"samples": [{"label", "png_base64"}]}``: augmented training images, as the
wizard shows them. The engine runs this in a subprocess (``jobs.check``,
``data.preview``) so it never imports torch itself.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

from engine.api.job_terms import FINETUNE
from engine.api.specs import SpecError, validate_spec
from engine.training.context import exit_process


def check(kind: str, spec_doc: dict) -> list[dict]:
    try:
        spec = validate_spec(kind, spec_doc)
    except SpecError as exc:
        return [{"message": f"{f['field']}: {f['message']}", "hint": f["hint"], "file": "", "line": None}
                for f in exc.fields] or [{"message": str(exc), "hint": exc.hint, "file": "", "line": None}]
    if kind != FINETUNE:
        return []
    from engine.tasks import task_for

    return [asdict(issue) for issue in task_for(spec).validate(spec)]


def preview(spec_doc: dict, n: int) -> dict:
    import base64

    from engine.tasks.base import InputError

    try:
        spec = validate_spec(FINETUNE, spec_doc)
    except SpecError as exc:
        return {"samples": [], "issues": check(FINETUNE, spec_doc) or [{"message": str(exc), "hint": exc.hint}]}
    if spec.task != "image_classification":
        return {"samples": [], "issues": [{"message": "augmentation previews are for image tasks",
                                           "hint": "set task: image_classification", "file": "", "line": None}]}
    from engine.tasks import image_classification

    try:
        samples = image_classification.preview_augmentations(spec, n=n, seed=spec.seed)
    except InputError as exc:
        return {"samples": [], "issues": [asdict(i) for i in exc.issues]}
    return {"samples": [{"label": label, "png_base64": base64.b64encode(png).decode()} for label, png in samples],
            "issues": []}


def _spec_issues(spec_doc: dict) -> list[dict]:
    return [{**i, "field": i["message"].split(":", 1)[0] if ":" in i["message"] else ""}
            for i in check(FINETUNE, spec_doc)]


def inspect_data(spec_doc: dict, n: int) -> dict:
    try:
        spec = validate_spec(FINETUNE, spec_doc)
    except SpecError:
        return {"kind": "table", "columns": [], "rows": [], "thumbnails": [], "class_counts": {},
                "n_train": 0, "n_val": 0, "issues": _spec_issues(spec_doc)}
    from engine.preflight.data import inspect_data as look

    return look(spec, n)


def _model_field(spec) -> str:
    return "model.path" if spec.model.path and not spec.model.builtin else "model.builtin"


def facts(spec_doc: dict) -> dict:
    """The model's facts from the meta device, or the issues that stop it being read."""
    try:
        spec = validate_spec(FINETUNE, spec_doc)
    except SpecError:
        return {"ok": False, "issues": _spec_issues(spec_doc), "facts": None}
    from engine.estimate.facts import model_facts
    from engine.tasks.base import InputError

    try:
        found = model_facts(spec)
    except InputError as exc:
        return {"ok": False, "facts": None,
                "issues": [{**asdict(i), "field": _model_field(spec)} for i in exc.issues]}
    return {"ok": True, "issues": [], "facts": found}


def main() -> int:
    request = json.loads(sys.stdin.read())
    # The answer is the only thing on stdout: anything a library prints while building a
    # model on first use (progress, notices) goes to stderr instead of corrupting it.
    # fd 1 itself is pointed at stderr, so native code's prints are caught too.
    sys.stdout.flush()
    answer_to = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    op = request.get("op")
    if op == "preview":
        answer = preview(request.get("spec") or {}, int(request.get("n", 8)))
    elif op == "inspect_data":
        answer = inspect_data(request.get("spec") or {}, int(request.get("n", 12)))
    elif op == "facts":
        answer = facts(request.get("spec") or {})
    else:
        answer = {"issues": check(request["kind"], request.get("spec") or {})}
    answer_to.write(json.dumps(answer) + "\n")
    answer_to.flush()
    return 0


if __name__ == "__main__":
    exit_process(main())  # the engine reads the answer until the process ends: no 2 s of teardown
