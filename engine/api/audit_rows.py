"""An audit record as a row of text: what ``ember audit --csv`` and the GUI's Audit export both write."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

COLUMNS = ("time", "client", "action", "target", "ok", "error", "params", "user")


def iso(t: float | None) -> str:
    return datetime.fromtimestamp(t).isoformat(timespec="seconds") if t else ""


def row(rec: dict[str, Any]) -> list[str]:
    """One CSV row."""
    return [iso(rec.get("t")), rec.get("client", ""), rec.get("action", ""), rec.get("target", ""),
            "yes" if rec.get("ok") else "no", rec.get("error") or "",
            json.dumps(rec.get("params") or {}, sort_keys=True), rec.get("user") or ""]
