"""The job queue (engine/daemon/job_queue.py, docs/queue.md): every change re-plans and publishes `queue`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from engine.daemon import job_queue
from engine.daemon.handlers.params import JobId, NoParams, Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


class QueueMove(JobId):
    to: Literal["top", "up", "down", "bottom"]


class JobsPrioritize(JobId):
    priority: int = Field(ge=-1000, le=1000)


class QueueConfigure(Params):
    max_concurrent: int | None = Field(None, ge=1, le=256)
    cpu_cores: int | None = Field(None, ge=0, le=100_000, description="0 or null: every core of this machine")
    allow_gpu_sharing: bool | None = None


class QueueHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {
            "queue.get": (NoParams, self.queue_get),
            "queue.move": (QueueMove, self.queue_move),
            "queue.configure": (QueueConfigure, self.queue_configure),
            "jobs.prioritize": (JobsPrioritize, self.jobs_prioritize),
        }

    def _snapshot(self, s: Client) -> Any:
        """The queue as this user may see it: their projects' jobs (the others' still take their resources)."""
        return self.engine.access.queue_view(s.user, job_queue.snapshot(self.engine.jobs))

    async def queue_get(self, s: Client, _p: NoParams) -> Any:
        return self._snapshot(s)

    async def queue_move(self, s: Client, p: QueueMove) -> Any:
        job_queue.move(self.engine.jobs, p.id, p.to)
        self.engine.jobs.schedule()
        return self._snapshot(s)

    async def jobs_prioritize(self, s: Client, p: JobsPrioritize) -> Any:
        job_queue.prioritize(self.engine.jobs, p.id, p.priority)
        self.engine.jobs.schedule()
        return self._snapshot(s)

    async def queue_configure(self, s: Client, p: QueueConfigure) -> Any:
        job_queue.configure(self.engine.jobs, p.max_concurrent, p.cpu_cores, p.allow_gpu_sharing,
                            p.model_fields_set)
        self.engine.jobs.schedule()
        return self._snapshot(s)
