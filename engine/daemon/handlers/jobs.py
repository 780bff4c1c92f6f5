"""Jobs: start, check, list, look at, stop, resume, delete; their artifacts, metrics and logs; saved templates."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from engine.api import custom_code
from engine.api.job_terms import CHAIN, FINETUNE, SWEEP
from engine.api.protocol import INVALID_PARAMS, INVALID_STATE, RpcError
from engine.api.specs import JOB_KINDS, SpecError, validate_spec
from engine.daemon import data_policy, model_prep, projects, templates
from engine.daemon.access import DEFAULT_PROJECT
from engine.daemon.handlers.data import DataHandlers, inspect_in_subprocess
from engine.daemon.handlers.params import JobId, NoParams, Params
from engine.daemon.job_records import artifacts, delete_files, read_json, record, variants

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


class JobsStart(Params):
    kind: str
    spec: dict[str, Any] = Field(default_factory=dict)
    name: str = Field("", max_length=200)
    project: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                                description="the project the job belongs to; default: the user's first")


class TemplateSave(Params):
    name: str = Field(min_length=1, max_length=templates.NAME_MAX)
    kind: str = FINETUNE
    spec: dict[str, Any]


class TemplateName(Params):
    name: str = Field(min_length=1, max_length=templates.NAME_MAX)


class JobsDelete(Params):
    id: str = Field(min_length=1, max_length=100)
    files: bool = True


class JobsList(Params):
    state: str | None = None
    kind: str | None = None
    limit: int = Field(100, ge=1, le=10_000)


class JobsMetrics(JobId):
    kind: str | None = None
    names: list[str] | None = Field(None, max_length=200)
    # Per series; keeps a long run's reply well under the frame limit (a chart needs no more).
    max_points: int = Field(2000, ge=2, le=100_000)


class JobsLogs(JobId):
    tail: int = Field(200, ge=1, le=100_000)


class JobHandlers:
    def __init__(self, eng: EngineView, data: DataHandlers):
        self.engine = eng
        self.data = data  # a fine-tune's memory estimate is stored with it

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {
            "jobs.kinds": (NoParams, self.jobs_kinds),
            "jobs.start": (JobsStart, self.jobs_start),
            "jobs.check": (JobsStart, self.jobs_check),
            "templates.list": (NoParams, self.templates_list),
            "templates.save": (TemplateSave, self.templates_save),
            "templates.delete": (TemplateName, self.templates_delete),
            "jobs.list": (JobsList, self.jobs_list),
            "jobs.get": (JobId, self.jobs_get),
            "jobs.stop": (JobId, self.jobs_stop),
            "jobs.cancel": (JobId, self.jobs_cancel),
            "jobs.resume": (JobId, self.jobs_resume),
            "jobs.delete": (JobsDelete, self.jobs_delete),
            "jobs.artifacts": (JobId, self.jobs_artifacts),
            "compress.variants": (JobId, self.compress_variants),
            "jobs.metrics": (JobsMetrics, self.jobs_metrics),
            "jobs.logs": (JobsLogs, self.jobs_logs),
        }

    async def jobs_kinds(self, _s: Client, _p: NoParams) -> Any:
        return {k.name: {"title": k.title, "description": k.description, "schema": k.spec_model.model_json_schema()}
                for k in JOB_KINDS.values()}

    async def jobs_start(self, s: Client, p: JobsStart) -> Any:
        try:
            spec = validate_spec(p.kind, p.spec)
        except SpecError as exc:
            raise RpcError(INVALID_PARAMS, str(exc.args[0]), {"fields": exc.fields, "hint": exc.hint}) from None
        # model.code: CONFIRMATION_REQUIRED until the user approved its hash (a sweep's trials run its base's)
        custom_code.require_confirmed(spec.base if p.kind == SWEEP else spec)
        project = self.engine.access.project_for_start(s.user, p.project)
        defined = projects.all_projects(self.engine.store)  # another project's data or hosts: refused
        projects.check_data(defined, project, projects.data_paths(p.kind, spec))
        projects.check_hosts(defined, project, projects.spec_hosts(p.kind, spec))
        # scanned or scrubbed first, where a rule of its folder or project says so
        await data_policy.check(self.engine.store, p.kind, spec, project)
        job = self.engine.jobs.submit(p.kind, spec, p.name, owner=s.user.name, project=project)
        if p.kind == FINETUNE:
            # The estimate is stored with the run, so its error shows once the run has measured its peak.
            asyncio.ensure_future(self._store_estimate(job["id"], spec, p.spec))
        return record(self.engine.store, job)

    async def jobs_check(self, s: Client, p: JobsStart) -> Any:
        """Validate the spec and its inputs in a subprocess (torch stays out of the engine); ``preparing``
        while a built-in model it names is written first (engine/daemon/model_prep.py)."""
        waiting = model_prep.check_or_prepare(self.engine, s.user, p.spec)
        if waiting is not None:
            waiting.pop("facts", None)
            return waiting
        answer = await inspect_in_subprocess({"op": "check", "kind": p.kind, "spec": p.spec})
        with contextlib.suppress(SpecError):  # model.code not yet confirmed: an issue here, an error at jobs.start
            issue = custom_code.check_issue(validate_spec(p.kind, p.spec))
            if issue is not None:
                answer.setdefault("issues", []).append(issue)
        return answer

    async def _store_estimate(self, job_id: str, spec: Any, raw: dict[str, Any]) -> None:
        """The fit estimate of the spec validated above (the function, not the estimate.fit handler)."""
        try:
            est = await self.data.fit_estimate(spec, raw)
        except Exception:  # noqa: BLE001 - an estimate is a nicety; the run goes on without one
            logging.getLogger(__name__).info("no estimate for %s", job_id, exc_info=True)
            return
        # What the run's memory events measure (allocator peak or RSS), per rank, without the
        # CUDA context the bars show.
        peak = est.get("estimated_peak")
        job = self.engine.store.get_job(job_id)
        if job is None:
            return
        with contextlib.suppress(OSError):
            (Path(job["run_dir"]) / "estimate.json").write_text(json.dumps(est, indent=1), encoding="utf-8")
        self.engine.store.update_job(job_id, estimated_peak=peak)

    def _templates_dir(self) -> Path:
        return self.engine.paths.home / "templates"

    async def templates_list(self, s: Client, _p: NoParams) -> Any:
        found = templates.list_all(self._templates_dir(), self.engine.store)
        if not s.user.sees_all:
            found = [t for t in found if (t.get("project") or DEFAULT_PROJECT) in s.user.projects]
        return {"templates": found}

    async def templates_save(self, s: Client, p: TemplateSave) -> Any:
        store = self.engine.store
        owner, project = templates.owner_of(store, p.name)
        saved = templates.save(self._templates_dir(), p.name, p.kind, p.spec)
        # Who first saved a name owns it (resource_check lets only them, or an admin, replace or delete it).
        templates.set_owner(store, p.name, owner or s.user.name, project or s.user.home_project())
        return saved

    async def templates_delete(self, _s: Client, p: TemplateName) -> Any:
        done = templates.delete(self._templates_dir(), p.name)
        templates.set_owner(self.engine.store, p.name, None, None)
        return done

    async def jobs_delete(self, _s: Client, p: JobsDelete) -> Any:
        job = self.engine.jobs.get(p.id)
        if job["state"] in ("queued", "running", "stopping"):
            raise RpcError(INVALID_STATE, f"Job {p.id} is {job['state']}; only a finished job can be deleted",
                           {"hint": "Cancel it first, then delete it."})
        freed, left = 0, []
        if p.files and ((job.get("spec") or {}).get("distributed") or {}).get("nodes"):
            from engine.launch.multinode import remove_remote_dirs

            # A run across machines also left folders on its hosts (checkpoints, copied data).
            freed, left = await remove_remote_dirs(p.id, Path(job["run_dir"]), self.engine.hosts)
        freed += delete_files(self.engine.paths.runs, Path(job["run_dir"])) if p.files else 0
        self.engine.store.delete_job(p.id)
        self.engine.bus.publish("jobs", {"id": p.id, "deleted": True})
        return {"ok": True, "freed_bytes": freed, "remote_left": left}

    async def jobs_artifacts(self, _s: Client, p: JobId) -> Any:
        return artifacts(self.engine.store, self.engine.jobs.get(p.id))

    async def compress_variants(self, _s: Client, p: JobId) -> Any:
        return variants(self.engine.store, self.engine.jobs.get(p.id))

    async def jobs_list(self, s: Client, p: JobsList) -> Any:
        store, access = self.engine.store, self.engine.access
        if s.user.sees_all:
            return {"jobs": [record(store, r) for r in store.list_jobs(p.state, p.kind, p.limit)]}
        rows = [r for r in store.list_jobs(p.state, p.kind, 100_000) if access.visible(s.user, r["id"])]
        return {"jobs": [record(store, r) for r in rows[:p.limit]]}

    async def jobs_get(self, _s: Client, p: JobId) -> Any:
        job = record(self.engine.store, self.engine.jobs.get(p.id))
        result = read_json(Path(job["run_dir"]) / "result.json")
        if result is not None:
            job["result"] = result
        if job["kind"] == SWEEP:
            job["sweep"] = read_json(Path(job["run_dir"]) / "sweep.json") or {"trials": [], "best": None}
        if job["kind"] == CHAIN:
            job["chain"] = read_json(Path(job["run_dir"]) / "chain.json") or {"stages": []}
        return job

    async def jobs_stop(self, _s: Client, p: JobId) -> Any:
        return record(self.engine.store, self.engine.jobs.stop(p.id))

    async def jobs_cancel(self, _s: Client, p: JobId) -> Any:
        return record(self.engine.store, self.engine.jobs.cancel(p.id))

    async def jobs_resume(self, _s: Client, p: JobId) -> Any:
        return record(self.engine.store, self.engine.jobs.resume(p.id))

    async def jobs_metrics(self, _s: Client, p: JobsMetrics) -> Any:
        self.engine.jobs.get(p.id)
        rows = self.engine.store.metrics(p.id, p.kind, p.names, p.max_points)
        return {"metrics": rows, "max_points": p.max_points}

    async def jobs_logs(self, _s: Client, p: JobsLogs) -> Any:
        job = self.engine.jobs.get(p.id)
        log_file = Path(job["run_dir"]) / "stdout.log"
        if not log_file.exists():
            return {"lines": []}
        with open(log_file, encoding="utf-8", errors="replace") as f:
            return {"lines": [line.rstrip("\n") for line in deque(f, maxlen=p.tail)]}
