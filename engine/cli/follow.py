"""Follow one job until it ends, handing its events to a display (engine/cli/progress.py).

Shared by ``ember run``, ``ember jobs start`` and ``ember export``.
"""

from __future__ import annotations

import time
from typing import Any

from engine.api.job_terms import FINAL_STATES
from engine.cli.client import BlockingClient
from engine.cli.progress import Display

TICK_S = 1.0  # a live bar's clock moves this often when no event comes
POLL_S = 5.0  # after this long without events, ask the engine whether the job has ended


def follow(c: BlockingClient, job: dict[str, Any], display: Display) -> dict[str, Any] | None:
    """Show ``job``'s events from its first; its final record once it ends, None if the user pressed Ctrl+C."""
    job_id = job["id"]
    try:
        c.subscribe([f"run/{job_id}/*", "jobs"], since=0)
        poll_at = time.monotonic() + POLL_S
        while True:
            ev = c.next_event(timeout=TICK_S)
            if ev is None:
                display.tick()
                if time.monotonic() >= poll_at:
                    if c.call("jobs.get", id=job_id)["state"] in FINAL_STATES:
                        break
                    poll_at = time.monotonic() + POLL_S
                continue
            if ev["topic"] == "jobs":
                if ev["data"].get("id") != job_id:
                    continue  # another job's change
                display.event(ev)
                if ev["data"].get("state") in FINAL_STATES:
                    break
                continue
            poll_at = time.monotonic() + POLL_S
            display.event(ev)
        final = c.call("jobs.get", id=job_id)
    except KeyboardInterrupt:
        display.detached(job)
        return None
    display.finished(final)
    return final


def exit_code(final: dict[str, Any] | None) -> int:
    """0: succeeded; 1: ended otherwise; 130: the user stopped following (the job goes on)."""
    if final is None:
        return 130
    return 0 if final["state"] == "succeeded" else 1
