"""Secrets an admin keeps for a project (an endpoint's API key), named by requests instead of sent as files.

A remote client never names a file for the engine to read a key from (docs/security.md): it sends the key
itself, or the name of one of these. Kept in the store's settings (``secrets``: project -> name -> value),
which live in the engine's 0700 data folder; replies list names only, never values.
"""

from __future__ import annotations

import re
from typing import Any

SETTING = "secrets"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _all(store: Any) -> dict[str, dict[str, str]]:
    return dict(store.get_setting(SETTING) or {})


def has(store: Any, project: str, name: str) -> bool:
    return name in _all(store).get(project, {})


def get(store: Any, projects: list[str] | tuple[str, ...], name: str) -> str | None:
    """The value of secret ``name`` in the first of ``projects`` that has one."""
    kept = _all(store)
    return next((kept[p][name] for p in projects if name in kept.get(p, {})), None)


def names(store: Any, projects: list[str] | tuple[str, ...] | None) -> dict[str, list[str]]:
    """Project -> the names of its secrets (``projects`` None: every project's)."""
    kept = _all(store)
    return {p: sorted(v) for p, v in sorted(kept.items()) if projects is None or p in projects}


def put(store: Any, project: str, name: str, value: str | None) -> None:
    """Keep ``value`` as ``name`` in ``project`` (None: forget it)."""
    kept = _all(store)
    mine = dict(kept.get(project, {}))
    if value is None:
        mine.pop(name, None)
    else:
        mine[name] = value
    kept[project] = mine
    store.set_setting(SETTING, kept)
