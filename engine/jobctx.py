"""The job side of the engine contract: what every recipe process uses.

A job runs as ``python -m <module> --run-dir DIR``. It reads ``DIR/spec.yaml``,
appends events to ``DIR/events.jsonl`` (one JSON object a line, flushed per
line), may write ``DIR/result.json``, and ends with a ``status`` event. SIGTERM
asks it to stop gracefully (``ctx.stop_requested``). It never needs the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.specs import Spec, SpecError, validate_spec

TERMINAL_STATES = ("succeeded", "failed", "stopped", "cancelled")


class JobFailed(Exception):
    """Raise from a recipe to fail with a message and a hint for the user."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


class JobContext:
    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.stop_requested = False
        self._events = open(self.run_dir / "events.jsonl", "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def emit(self, kind: str, **data: Any) -> None:
        record = {"t": time.time(), "kind": kind, **data}
        self._events.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        self._events.flush()

    def log(self, message: str) -> None:
        """A line for stdout.log, the job's human-readable log."""
        sys.stdout.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        sys.stdout.flush()

    def status(self, state: str, **data: Any) -> None:
        self.emit("status", state=state, **data)

    def write_result(self, result: dict[str, Any]) -> None:
        tmp = self.run_dir / "result.json.tmp"
        tmp.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
        os.replace(tmp, self.run_dir / "result.json")

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; returns early (True) when a stop was requested."""
        end = time.monotonic() + seconds
        while not self.stop_requested and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        return self.stop_requested

    def close(self) -> None:
        self._events.close()


def load_spec(run_dir: Path) -> tuple[str, Spec]:
    import yaml

    doc = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8"))
    return doc["kind"], validate_spec(doc["kind"], doc.get("spec") or {})


def run_job(main: Callable[[JobContext, Any], str | None], argv: list[str] | None = None) -> int:
    """Run a recipe's ``main(ctx, spec)``; report its outcome as the final status event."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    ctx = JobContext(args.run_dir)

    def on_term(_signum: int, _frame: Any) -> None:
        ctx.stop_requested = True

    signal.signal(signal.SIGTERM, on_term)
    ctx.status("running", pid=os.getpid())
    try:
        _kind, spec = load_spec(args.run_dir)
        final = main(ctx, spec) or ("stopped" if ctx.stop_requested else "succeeded")
        ctx.status(final)
        return 0
    except (JobFailed, SpecError) as exc:
        ctx.emit("error", message=str(exc), hint=getattr(exc, "hint", ""))
        ctx.status("failed", message=str(exc), hint=getattr(exc, "hint", ""))
        return 1
    except Exception as exc:  # noqa: BLE001 - every failure must reach the user as an event
        traceback.print_exc(file=sys.stderr)
        message = f"{type(exc).__name__}: {exc}"
        hint = "See stdout.log in the run directory for the traceback."
        ctx.emit("error", message=message, hint=hint)
        ctx.status("failed", message=message, hint=hint)
        return 1
    finally:
        ctx.close()
