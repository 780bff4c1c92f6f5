"""Look at a job's inputs before launch, in a process of its own.

Reads ``{"op": "check" | "preview", "kind": ..., "spec": {...}, "n": 8}`` as JSON on
stdin. ``check`` prints ``{"issues": [{message, hint, file, line}, ...]}`` (the
spec, then the files, rows, labels and model folder); ``preview`` prints
``{"samples": [{"label", "png_base64"}]}``: augmented training images, as the
wizard shows them. The engine runs this in a subprocess (``jobs.check``,
``data.preview``) so it never imports torch itself.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from engine.specs import SpecError, validate_spec


def check(kind: str, spec_doc: dict) -> list[dict]:
    try:
        spec = validate_spec(kind, spec_doc)
    except SpecError as exc:
        return [{"message": f"{f['field']}: {f['message']}", "hint": f["hint"], "file": "", "line": None}
                for f in exc.fields] or [{"message": str(exc), "hint": exc.hint, "file": "", "line": None}]
    if kind != "train.finetune":
        return []
    from engine.tasks import get_task

    return [asdict(issue) for issue in get_task(spec.task).validate(spec)]


def preview(spec_doc: dict, n: int) -> dict:
    import base64

    from engine.tasks.base import InputError

    try:
        spec = validate_spec("train.finetune", spec_doc)
    except SpecError as exc:
        return {"samples": [], "issues": check("train.finetune", spec_doc) or [{"message": str(exc), "hint": exc.hint}]}
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


def main() -> int:
    request = json.loads(sys.stdin.read())
    if request.get("op") == "preview":
        answer = preview(request.get("spec") or {}, int(request.get("n", 8)))
    else:
        answer = {"issues": check(request["kind"], request.get("spec") or {})}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
