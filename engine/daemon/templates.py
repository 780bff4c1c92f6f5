"""Saved job templates: one YAML job file per template under ``<home>/templates``.

The files are ordinary job files (``ember run`` accepts them), so a template can be
shared, edited by hand or kept in version control.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from engine.api.job_terms import FINETUNE
from engine.api.protocol import INVALID_PARAMS, NOT_FOUND, RpcError
from engine.api.specs import (
    MAX_JOB_FILE_BYTES,
    SpecError,
    _check_size,
    dump_job_yaml,
    validate_spec,
)

NAME_MAX = 80  # characters, as templates.save and templates.delete take them


def _file(root: Path, name: str) -> Path:
    if len(name) > NAME_MAX:  # checked here too: the access check looks a name up before the params are read
        raise RpcError(INVALID_PARAMS, f"A template name has at most {NAME_MAX} characters ({len(name)} given)",
                       {"hint": "Use a short name like 'tickets-lora'."})
    slug = re.sub(r"[^\w.-]+", "-", name.strip()).strip("-.").lower()
    if not slug:
        raise RpcError(INVALID_PARAMS, f"Template name {name!r} has no letters or digits",
                       {"hint": "Use a name like 'tickets-lora'."})
    return root / f"{slug}.yaml"


OWNERS = "template_owners"  # store setting: template file name -> {owner, project}


def owner_of(store: Any, name: str) -> tuple[str | None, str | None]:
    """Who saved template ``name`` and in which project ((None, None): saved before templates had owners)."""
    try:
        key = _file(Path(), name).name
    except RpcError:
        return None, None
    entry = (store.get_setting(OWNERS) or {}).get(key) or {}
    return entry.get("owner"), entry.get("project")


def exists(root: Path, name: str) -> bool:
    try:
        return _file(root, name).exists()
    except (RpcError, OSError):  # OSError: a name the filesystem refuses (too long for it, say)
        return False


def set_owner(store: Any, name: str, owner: str | None, project: str | None) -> None:
    """Record (or with owner None, forget) who a template belongs to."""
    owners = dict(store.get_setting(OWNERS) or {})
    key = _file(Path(), name).name
    if owner is None:
        owners.pop(key, None)
    else:
        owners[key] = {"owner": owner, "project": project}
    store.set_setting(OWNERS, owners)


def save(root: Path, name: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        parsed = validate_spec(kind, spec)
    except SpecError as exc:
        raise RpcError(INVALID_PARAMS, str(exc.args[0]), {"fields": exc.fields, "hint": exc.hint}) from None
    root.mkdir(parents=True, exist_ok=True)
    path = _file(root, name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dump_job_yaml(kind, parsed, name), encoding="utf-8")
    os.replace(tmp, path)  # a crash mid-write leaves the old template, never half a file
    return {"name": name, "path": str(path)}


def list_all(root: Path, store: Any = None) -> list[dict[str, Any]]:
    """Every template, each with its owner and project when it has them."""
    found = []
    owners = (store.get_setting(OWNERS) or {}) if store is not None else {}
    for path in sorted(root.glob("*.yaml")) if root.is_dir() else []:
        try:
            if path.stat().st_size > MAX_JOB_FILE_BYTES:
                continue
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            _check_size(doc, path)  # an alias bomb would blow up the reply (and the engine's memory)
        except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError, SpecError):
            continue  # a hand-edited file that no longer parses is skipped, not fatal
        if isinstance(doc, dict) and isinstance(doc.get("spec"), dict):
            found.append({"name": doc.get("name") or path.stem, "kind": doc.get("kind", FINETUNE),
                          "spec": doc["spec"], "saved_at": path.stat().st_mtime, "path": str(path),
                          **(owners.get(path.name) or {})})
    return found


def delete(root: Path, name: str) -> dict[str, Any]:
    path = _file(root, name)
    if not path.exists():
        raise RpcError(NOT_FOUND, f"No template named {name!r}", {"hint": "templates.list shows the saved ones."})
    path.unlink()
    return {"ok": True}
