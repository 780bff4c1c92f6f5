"""Follow a job's events.jsonl into the store, from the last committed offset."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from engine.api.job_terms import FINAL_STATES
from engine.daemon.eventbus import EventBus

# Read at most this much per poll, so one chatty job cannot stall the engine's loop.
MAX_READ = 4 * 1024 * 1024


class Follower:
    """Reads complete lines appended to ``events.jsonl`` and publishes them.

    The offset only advances past complete lines and is committed together with
    the events (``EventBus.update_job_with_batch``), so a restart resumes exactly.
    """

    def __init__(self, bus: EventBus, job_id: str, run_dir: Path, offset: int):
        self.bus = bus
        self.job_id = job_id
        self.path = Path(run_dir) / "events.jsonl"
        self.offset = offset
        self.reported_state: str | None = None
        self.reported_at: float | None = None  # the time written in the final status event read here
        self.last_error: dict[str, Any] | None = None
        self.bad_lines = 0

    def poll(self) -> int:
        """Publish whatever complete lines are new; returns how many."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(MAX_READ)
        except FileNotFoundError:
            return 0
        end = chunk.rfind(b"\n")
        if end < 0:
            return 0
        count = 0
        for raw in chunk[: end + 1].splitlines():
            if raw.strip():
                self._publish_line(raw)
                count += 1
        self.offset += end + 1
        fields: dict[str, Any] = {"events_offset": self.offset}
        fields["reported_state"] = self.reported_state
        if self.last_error:
            fields["error"] = self.last_error
        self.bus.update_job_with_batch(self.job_id, **fields)
        return count

    def _publish_line(self, raw: bytes) -> None:
        topic_base = f"run/{self.job_id}"
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError):
            self.bad_lines += 1
            self.bus.publish(f"{topic_base}/warning",
                             {"kind": "warning", "message": f"Skipped a line of events.jsonl that is not a JSON "
                              f"object at byte {self.offset}", "hint": "The job wrote a malformed event."},
                             job_id=self.job_id)
            return
        kind = data.get("kind") if isinstance(data.get("kind"), str) else "event"
        t = data.get("t") if isinstance(data.get("t"), (int, float)) else None
        if kind == "status" and data.get("state") in FINAL_STATES:
            self.reported_state = data["state"]
            self.reported_at = t
            if data.get("message"):
                self.last_error = {"message": data["message"], "hint": data.get("hint", "")}
                if isinstance(data.get("reason"), str):  # e.g. "diverged": a failure a list can tell apart
                    self.last_error["reason"] = data["reason"][:40]
        elif kind == "status":
            # A job that runs again (torchrun restart, resume) has not ended after all.
            self.reported_state = None
            self.reported_at = None
            self.last_error = None
        self.bus.publish_json(f"{topic_base}/{kind}", raw.decode("utf-8"), job_id=self.job_id, t=t)

    def end_time(self) -> float:
        """When the job ended, for a job whose end the engine did not see (it ended while the engine was
        down, or the store lost its record): the time its final status event carries, else the last write
        to its events file, else now. Read it before ``release_tail``, which changes the file's mtime."""
        if self.reported_state and self.reported_at is None:
            # The final status was stored by an earlier engine, before the offset this follower began at.
            self.reported_at = self.bus.store.last_event_t(self.job_id, f"run/{self.job_id}/status")
        if self.reported_state and self.reported_at is not None:
            return float(self.reported_at)
        try:
            return self.path.stat().st_mtime
        except OSError:
            return time.time()
