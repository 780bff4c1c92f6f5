"""Custom model code: what the user is asked to confirm, and the engine's refusal without it.

A spec's ``model.code`` names a Python file that builds the model. Running it is running
the user's (or someone else's) code, so the engine asks first: ``jobs.start`` with a code
file but without ``model.code_sha256`` equal to the file's sha256 now is refused with
``CONFIRMATION_REQUIRED`` whose data is :func:`confirmation` (path, sha256, size and the
first lines). The GUI and ``ember run`` show that and start again with the hash. The
engine only reads and hashes the file here; it never imports it (the job process does,
after hashing it again: engine/tasks/custom_model.py). Stdlib only.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from engine.api.protocol import CONFIRMATION_REQUIRED, RpcError

PREVIEW_LINES = 40
PREVIEW_CHARS = 16_000  # a preview of 40 very long lines still fits a frame
MAX_CODE_BYTES = 4 << 20  # a model file larger than this is not something a person can review


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: str | Path) -> tuple[Path, bytes]:
    """The file's bytes, or RpcError(INVALID_PARAMS) saying what is wrong with model.code."""
    from engine.api.protocol import INVALID_PARAMS

    p = Path(path).expanduser()
    field = {"field": "model.code"}
    try:
        if not p.is_file():
            what = "is a folder" if p.is_dir() else "not found"
            raise RpcError(INVALID_PARAMS, f"model.code: {p} {what}",
                           {"fields": [{**field, "message": what, "hint": "point model.code at a .py file"}],
                            "hint": "Point model.code at the Python file that defines your model."})
        size = p.stat().st_size
        if size > MAX_CODE_BYTES:
            raise RpcError(INVALID_PARAMS, f"model.code: {p} is {size:,} bytes, over {MAX_CODE_BYTES:,}",
                           {"fields": [{**field, "message": "file too large", "hint": "keep the model in a small file"}],
                            "hint": "A model file should be small enough to read; move data out of it."})
        return p, p.read_bytes()
    except OSError as exc:
        raise RpcError(INVALID_PARAMS, f"model.code: cannot read {p}: {exc.strerror or exc}",
                       {"fields": [{**field, "message": "unreadable", "hint": "check the file's permissions"}],
                        "hint": "Make the file readable by you."}) from None


def confirmation(path: str | Path) -> dict[str, Any]:
    """What the user confirms: {path, sha256, size, preview (the first 40 lines, as text)}."""
    p, data = _read(path)
    text = data.decode("utf-8", errors="replace")
    preview = "".join(text.splitlines(keepends=True)[:PREVIEW_LINES])[:PREVIEW_CHARS]
    return {"path": str(p.resolve()), "sha256": sha256_bytes(data), "size": len(data), "preview": preview}


def _code(spec: Any) -> tuple[str | None, str | None]:
    model = getattr(spec, "model", None)
    return getattr(model, "code", None), getattr(model, "code_sha256", None)


def require_confirmed(spec: Any) -> None:
    """Raise CONFIRMATION_REQUIRED unless the spec's code file hashes to ``model.code_sha256`` now."""
    code, approved = _code(spec)
    if not code:
        return
    facts = confirmation(code)
    if approved == facts["sha256"]:
        return
    if approved:
        message = "model.code changed after it was confirmed: it runs only after you confirm it again"
    else:
        message = "model.code runs your Python file in the job process: confirm it first"
    raise RpcError(CONFIRMATION_REQUIRED, message,
                   {**facts, "hint": "Read the file; if you trust it, start again with model.code_sha256 set to "
                                     f"{facts['sha256']} (the wizard and `ember run` ask you)."})


def check_issue(spec: Any) -> dict[str, Any] | None:
    """jobs.check's view: an issue (not an error) when the code still needs confirming or cannot be read."""
    try:
        require_confirmed(spec)
    except RpcError as err:
        return {"message": err.message, "hint": err.hint, "file": str(_code(spec)[0] or ""), "line": None,
                "field": "model.code", "confirmation": {k: err.data[k] for k in ("path", "sha256", "size", "preview")
                                                        if k in err.data} or None}
    return None


def describe(facts: dict[str, Any]) -> str:
    """The confirmation facts as the CLI prints them."""
    rule = "-" * 72
    return (f"This job runs your Python file in the training process (model.code):\n"
            f"  file:    {facts.get('path')}\n  sha256:  {facts.get('sha256')}\n  size:    {facts.get('size')} bytes\n"
            f"First lines:\n{rule}\n{str(facts.get('preview', '')).rstrip()}\n{rule}")


def start_confirmed(client: Any, kind: str, spec: dict[str, Any], name: str, trust: str | None,
                    ask: Any = input, out: Any = print) -> dict[str, Any] | None:
    """``ember run``: jobs.start; on CONFIRMATION_REQUIRED print the facts and ask y/N (or use ``trust``).

    ``--trust-code SHA256`` is for scripts: it is sent as the confirmation, and the engine (then the job)
    refuses it unless the file hashes to it. Returns the job, or None when the user said no.
    """
    model = spec.get("model") if isinstance(spec.get("model"), dict) else None
    if trust and model is not None and model.get("code"):
        spec = {**spec, "model": {**model, "code_sha256": trust.strip().lower()}}
    try:
        return client.call("jobs.start", kind=kind, spec=spec, name=name)
    except RpcError as err:
        if err.code != CONFIRMATION_REQUIRED or not err.data.get("sha256"):
            raise
        out(describe(err.data))
        if trust:
            out(f"error: --trust-code {trust} does not match the file's sha256 {err.data['sha256']}")
            return None
        try:
            answer = ask("Run this code? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            out("not started: the model code was not confirmed")
            return None
        confirmed = {**spec, "model": {**(model or {}), "code_sha256": err.data["sha256"]}}
        return client.call("jobs.start", kind=kind, spec=confirmed, name=name)
