"""Check a job spec's inputs before launch: files, rows, labels, model folder.

Reads ``{"kind": ..., "spec": {...}}`` as JSON on stdin and prints
``{"issues": [{message, hint, file, line}, ...]}``. The engine runs this in a
subprocess (``jobs.check``) so it never imports torch itself.
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


def main() -> int:
    request = json.loads(sys.stdin.read())
    sys.stdout.write(json.dumps({"issues": check(request["kind"], request.get("spec") or {})}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
