"""Every job record the engine knows, kept current for all pages at once.

One ``jobs.list`` when the connection opens (again after a reconnect) and one
subscription to the ``jobs`` topic feed a dict of records by id; pages read it and
follow its signals instead of each listing and subscribing themselves. The engine's
``jobs`` events carry the whole public record (or ``{"id", "deleted": True}``).
Per-job topics (one run's metrics, its log) stay with the pages that show them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.text.format import to_epoch
from engine.api import job_terms

# The engine's own maximum for one jobs.list: "every job" for any store a person keeps.
LIST_LIMIT = 10_000


def _newest_first(job: dict[str, Any]) -> tuple[float, str]:
    """Sort key: creation time (unreadable or absent: with the oldest), then id, as jobs.list orders them."""
    return to_epoch(job.get("created_at")) or 0.0, str(job.get("id"))


class JobsState(QObject):
    """The engine's jobs by id; ``client`` is an app.connection.engine_client.EngineClient."""

    jobs_reset = Signal()  # the whole list was read again (connect, reconnect)
    job_changed = Signal(dict)  # a live event added or changed this record (the merged record)
    job_removed = Signal(str)  # a job was deleted
    load_failed = Signal(object)  # jobs.list failed: the RpcError

    def __init__(self, client, parent: QObject | None = None):
        super().__init__(parent)
        self._client = client
        self._jobs: dict[str, dict[str, Any]] = {}
        self.loaded = False  # True once a jobs.list has answered
        # Live only: the list read at connect covers the history; after a reconnect the client
        # replays what was missed since the last event it saw.
        self.subscription = client.subscribe(["jobs"], self._on_event)
        client.connected.connect(self.reload)
        if client.is_connected:
            self.reload()

    # -- reading -------------------------------------------------------------------------

    def get(self, job_id: str | None) -> dict[str, Any] | None:
        return self._jobs.get(job_id or "")

    def all(self) -> list[dict[str, Any]]:
        """Every record, newest first."""
        return sorted(self._jobs.values(), key=_newest_first, reverse=True)  # as jobs.list orders them

    def by_state(self, *states: str) -> list[dict[str, Any]]:
        return [job for job in self.all() if job.get("state") in states]

    def by_kind(self, kind: str, states: Iterable[str] | None = None) -> list[dict[str, Any]]:
        wanted = None if states is None else set(states)
        return [job for job in self.all() if job.get("kind") == kind and (wanted is None or job.get("state") in wanted)]

    def active(self) -> list[dict[str, Any]]:
        """Queued, starting, running or stopping jobs, newest first."""
        return self.by_state(*job_terms.ACTIVE_STATES)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    # -- feeding -------------------------------------------------------------------------

    def reload(self, *_hello: Any) -> None:
        """Read the whole list again (the connection opened)."""
        self._client.request("jobs.list", {"limit": LIST_LIMIT}, self._on_list, self.load_failed.emit)

    def _on_list(self, reply: dict[str, Any]) -> None:
        self._jobs = {job["id"]: job for job in reply.get("jobs") or [] if job.get("id")}
        self.loaded = True
        self.jobs_reset.emit()

    def _on_event(self, _topic: str, _seq: int, data: dict[str, Any]) -> None:
        job_id = data.get("id")
        if not job_id:
            return
        if data.get("deleted"):
            self._jobs.pop(job_id, None)
            self.job_removed.emit(job_id)  # even one not listed: a page may hold it from elsewhere
            return
        job = self._jobs[job_id] = {**self._jobs.get(job_id, {}), **data}
        self.job_changed.emit(job)
