"""What a controller inside the engine (a sweep, a chain) writes into its run directory, as a job process would.

``append_event`` adds one line to ``events.jsonl`` (the engine's follower stores and publishes it);
``write_state`` replaces the controller's own state file in one rename, so a crash never leaves half of it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def append_event(run_dir: Path, kind: str, **data: Any) -> None:
    line = json.dumps({"t": time.time(), "kind": kind, **data}, separators=(",", ":"))
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")


def write_state(run_dir: Path, name: str, doc: Any) -> None:
    tmp = run_dir / f".{name}.tmp"
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, run_dir / name)
