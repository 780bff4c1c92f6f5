"""Request handlers: one small method per protocol method, params validated by pydantic."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.api.job_terms import FINETUNE
from engine.api.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_STATE,
    METHOD_NOT_FOUND,
    METHODS,
    NOT_FOUND,
    RpcError,
)
from engine.api.specs import JOB_KINDS, SpecError, validate_spec
from engine.daemon import templates
from engine.daemon.run_records import artifacts, delete_files, read_json, record, variants
from engine.estimate import machine

if TYPE_CHECKING:
    from engine.daemon.server import Engine
    from engine.daemon.session import Session


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoParams(Params):
    pass


class JobsStart(Params):
    kind: str
    spec: dict[str, Any] = Field(default_factory=dict)
    name: str = Field("", max_length=200)


class DataPreview(Params):
    spec: dict[str, Any]
    n: int = Field(8, ge=1, le=64)


class SpecOnly(Params):
    spec: dict[str, Any]


class DataInspect(Params):
    spec: dict[str, Any]
    n: int = Field(12, ge=1, le=200)


class TemplateSave(Params):
    name: str = Field(min_length=1, max_length=80)
    kind: str = FINETUNE
    spec: dict[str, Any]


class TemplateName(Params):
    name: str = Field(min_length=1, max_length=80)


class JobsDelete(Params):
    id: str = Field(min_length=1, max_length=100)
    files: bool = True


class JobsList(Params):
    state: str | None = None
    kind: str | None = None
    limit: int = Field(100, ge=1, le=10_000)


class JobId(Params):
    id: str = Field(min_length=1, max_length=100)


class JobsMetrics(JobId):
    kind: str | None = None
    names: list[str] | None = Field(None, max_length=200)
    # Per series; keeps a long run's reply well under the frame limit (a chart needs no more).
    max_points: int = Field(2000, ge=2, le=100_000)


class JobsLogs(JobId):
    tail: int = Field(200, ge=1, le=100_000)


class Subscribe(Params):
    topics: list[str] = Field(min_length=1, max_length=100)
    since: int | None = Field(None, ge=0)


class Unsubscribe(Params):
    subscription: int


class EventsQuery(Params):
    topics: list[str] = Field(min_length=1, max_length=100)
    since: int = Field(0, ge=0)
    limit: int = Field(1000, ge=1, le=100_000)


class AuditList(Params):
    limit: int = Field(100, ge=1, le=10_000)
    offset: int = Field(0, ge=0)
    action: str | None = Field(None, max_length=200, description="exact, or a glob such as jobs.*")
    client: str | None = Field(None, max_length=200)
    target: str | None = Field(None, max_length=200)
    since: float | None = Field(None, description="records at or after this time (epoch seconds)")
    until: float | None = Field(None, description="records before this time")
    ok: bool | None = None
    text: str | None = Field(None, max_length=200, description="a substring of any column")


class DiagBurst(Params):
    topic: str = Field(pattern=r"^diag/[\w./-]{1,100}$")
    count: int = Field(ge=1, le=100_000)
    payload_bytes: int = Field(0, ge=0, le=65_536)


class QueueMove(JobId):
    to: Literal["top", "up", "down", "bottom"]


class JobsPrioritize(JobId):
    priority: int = Field(ge=-1000, le=1000)


class QueueConfigure(Params):
    max_concurrent: int | None = Field(None, ge=1, le=256)
    cpu_cores: int | None = Field(None, ge=0, le=100_000, description="0 or null: every core of this machine")
    allow_gpu_sharing: bool | None = None


CHECK_TIMEOUT_S = 120

# Requests that change state are written to the audit log.
AUDITED = {"jobs.start", "jobs.stop", "jobs.cancel", "jobs.resume", "jobs.delete", "engine.shutdown",
           "templates.save", "templates.delete", "hosts.add", "hosts.update", "hosts.remove", "hosts.trust",
           "hosts.forget_key", "hosts.prepare", "hosts.probe", "diag.burst",
           "queue.move", "queue.configure", "jobs.prioritize"}
AUDIT_REPLY_BYTES = 512 * 1024  # an audit.list page stops here, well under the 1 MiB frame
FACTS_CACHE = 32  # model facts kept per engine: a wizard revisits the same few models


def _parse(model: type[Params], method: str, params: dict[str, Any]) -> Any:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        fields = [{"field": ".".join(str(p) for p in e["loc"]) or "(params)", "message": e["msg"]}
                  for e in exc.errors()]
        raise RpcError(INVALID_PARAMS, f"Invalid params for {method}",
                       {"fields": fields, "hint": "See docs/protocol.md for this method's params."}) from None


async def _inspect(request: dict[str, Any]) -> Any:
    """Run engine.preflight.check in a subprocess: it imports torch, the engine does not."""
    import sys

    from engine.daemon.jobs import job_env

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "engine.preflight.check", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=job_env())
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), timeout=CHECK_TIMEOUT_S)
    except asyncio.CancelledError:  # the client went away: the look is no longer wanted
        proc.kill()
        raise
    except asyncio.TimeoutError:
        proc.kill()
        raise RpcError(INTERNAL_ERROR, f"Looking at the inputs took over {CHECK_TIMEOUT_S} s",
                       {"hint": "Very large datasets are checked when the job starts instead."}) from None
    if proc.returncode != 0:
        raise RpcError(INTERNAL_ERROR, "The input check failed",
                       {"hint": "See details; please report it.", "details": err.decode(errors="replace")[-2000:]})
    return json.loads(out)


class Handlers:
    def __init__(self, eng: Engine):
        self.engine = eng
        self.table: dict[str, tuple[type[Params], Any]] = {
            "ping": (NoParams, self.ping),
            "engine.status": (NoParams, self.engine_status),
            "engine.training.methods": (NoParams, self.engine_methods),
            "engine.shutdown": (NoParams, self.engine_shutdown),
            "jobs.kinds": (NoParams, self.jobs_kinds),
            "jobs.start": (JobsStart, self.jobs_start),
            "jobs.check": (JobsStart, self.jobs_check),
            "data.preview": (DataPreview, self.data_preview),
            "data.inspect": (DataInspect, self.data_inspect),
            "models.inspect": (SpecOnly, self.models_inspect),
            "estimate.fit": (SpecOnly, self.estimate_fit),
            "machine.info": (NoParams, self.machine_info),
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
            "subscribe": (Subscribe, self.subscribe),
            "unsubscribe": (Unsubscribe, self.unsubscribe),
            "events.query": (EventsQuery, self.events_query),
            "audit.list": (AuditList, self.audit_list),
            "runs.lineage": (JobId, self.runs_lineage),
            "diag.burst": (DiagBurst, self.diag_burst),
            "queue.get": (NoParams, self.queue_get),
            "queue.move": (QueueMove, self.queue_move),
            "queue.configure": (QueueConfigure, self.queue_configure),
            "jobs.prioritize": (JobsPrioritize, self.jobs_prioritize),
        }
        from engine.daemon.host_handlers import HostHandlers

        self.table.update(HostHandlers(eng).table())
        assert set(self.table) | {"hello"} == set(METHODS), "METHODS and handlers disagree"
        self._facts: dict[str, Any] = {}  # model facts by what determines them (see _facts_key)
        self._facts_locks: dict[str, asyncio.Lock] = {}

    async def dispatch(self, session: Session, method: str, params: dict[str, Any]) -> Any:
        if method not in self.table:
            hint = "Already connected; hello is only the first request." if method == "hello" else \
                "engine.training.methods lists the methods this engine answers."
            raise RpcError(METHOD_NOT_FOUND, f"Unknown method {method!r}", {"hint": hint, "methods": sorted(self.table)})
        model, fn = self.table[method]
        args = _parse(model, method, params)
        if method not in AUDITED:
            return await fn(session, args)
        # What it acted on: a job id, a template's or host's name, else the job kind.
        target = str(params.get("id") or params.get("name") or (params.get("host") or {}).get("name")
                     or params.get("kind") or "")
        try:
            result = await fn(session, args)
        except RpcError as err:
            self.engine.store.audit(session.name, method, target, params, False, err.message)
            raise
        except Exception as exc:  # an internal error: the attempt is on record too
            self.engine.store.audit(session.name, method, target, params, False, f"internal error: {type(exc).__name__}")
            raise
        if method == "jobs.start":
            target = result["id"]
        self.engine.store.audit(session.name, method, target, params, True)
        return result

    # ---- engine
    async def ping(self, _s: Session, _p: NoParams) -> Any:
        return {"t": time.time()}

    async def engine_status(self, _s: Session, _p: NoParams) -> Any:
        from engine.daemon.server import status_of

        return status_of(self.engine)

    async def engine_methods(self, _s: Session, _p: NoParams) -> Any:
        return METHODS

    async def engine_shutdown(self, s: Session, _p: NoParams) -> Any:
        # Reply first, then stop, so the caller sees the answer.
        asyncio.get_running_loop().call_later(0.05, self.engine.request_stop, f"requested by {s.name}")
        return {"ok": True}

    # ---- jobs
    async def jobs_kinds(self, _s: Session, _p: NoParams) -> Any:
        return {k.name: {"title": k.title, "description": k.description, "schema": k.spec_model.model_json_schema()}
                for k in JOB_KINDS.values()}

    async def jobs_start(self, _s: Session, p: JobsStart) -> Any:
        try:
            spec = validate_spec(p.kind, p.spec)
        except SpecError as exc:
            raise RpcError(INVALID_PARAMS, str(exc.args[0]), {"fields": exc.fields, "hint": exc.hint}) from None
        from engine.api import custom_code

        custom_code.require_confirmed(spec)  # model.code: CONFIRMATION_REQUIRED until the user approved its hash
        run = self.engine.jobs.submit(p.kind, spec, p.name)
        if p.kind == FINETUNE:
            # The estimate is stored with the run, so its error shows once the run has measured its peak.
            asyncio.ensure_future(self._store_estimate(run["id"], p.spec))
        return record(self.engine.store, run)

    async def jobs_check(self, _s: Session, p: JobsStart) -> Any:
        """Validate the spec and its inputs in a subprocess (torch stays out of the engine)."""
        answer = await _inspect({"op": "check", "kind": p.kind, "spec": p.spec})
        with contextlib.suppress(SpecError):  # model.code not yet confirmed: an issue here, an error at jobs.start
            from engine.api import custom_code

            issue = custom_code.check_issue(validate_spec(p.kind, p.spec))
            if issue is not None:
                answer.setdefault("issues", []).append(issue)
        return answer

    async def data_preview(self, _s: Session, p: DataPreview) -> Any:
        return await _inspect({"op": "preview", "spec": p.spec, "n": p.n})

    async def data_inspect(self, _s: Session, p: DataInspect) -> Any:
        return await _inspect({"op": "inspect_data", "spec": p.spec, "n": p.n})

    @staticmethod
    def _facts_key(spec: dict[str, Any]) -> str:
        """What model facts depend on: the model, the adapter's shape, the example size, the files' times.

        Changing the batch, strategy, precision, learning rate or data file reuses them; the
        model, the method (what is frozen changes what activations are kept), the LoRA rank and
        targets and the example size send the wizard back to a subprocess for seconds.
        """
        data = spec.get("data") or {}
        method = spec.get("method") or {}
        key = {"task": spec.get("task"), "model": spec.get("model"),
               "method": [method.get("kind"), method.get("lora_r"), method.get("target_modules"),
                          method.get("num_virtual_tokens")],
               "max_length": data.get("max_length"), "image_size": data.get("image_size"),
               "builtin_data": data.get("builtin") if not data.get("path") else None}
        path = (spec.get("model") or {}).get("path")
        if path:
            with contextlib.suppress(OSError):
                key["mtime"] = Path(path).expanduser().stat().st_mtime
        return json.dumps(key, sort_keys=True, default=str)

    async def _model_facts(self, spec: dict[str, Any]) -> dict[str, Any]:
        key = self._facts_key(spec)
        lock = self._facts_locks.setdefault(key, asyncio.Lock())
        async with lock:  # a wizard asking twice while the first look runs waits for it
            if key not in self._facts:
                answer = await _inspect({"op": "facts", "spec": spec})
                if answer.get("facts") is None and not answer.get("issues"):
                    return answer
                self._facts[key] = answer
                while len(self._facts) > FACTS_CACHE:
                    self._facts.pop(next(iter(self._facts)))
            return self._facts[key]

    async def models_inspect(self, _s: Session, p: SpecOnly) -> Any:
        return await self._model_facts(p.spec)

    async def estimate_fit(self, _s: Session, p: SpecOnly) -> Any:
        try:
            spec = validate_spec(FINETUNE, p.spec)
        except SpecError as exc:
            raise RpcError(INVALID_PARAMS, str(exc.args[0]), {"fields": exc.fields, "hint": exc.hint}) from None
        looked = await self._model_facts(p.spec)
        if not looked.get("facts"):
            issues = looked.get("issues") or []
            first = issues[0] if issues else {"message": "the model could not be inspected", "hint": ""}
            raise RpcError(INVALID_PARAMS, f"Cannot estimate: {first['message']}",
                           {"hint": first.get("hint", ""), "issues": issues})
        from engine.estimate.memory import estimate

        return estimate(spec, looked["facts"], machine.info(self.engine.paths.home))

    async def _store_estimate(self, run_id: str, spec: dict[str, Any]) -> None:
        try:
            est = await self.estimate_fit(None, SpecOnly(spec=spec))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - an estimate is a nicety; the run goes on without one
            logging.getLogger(__name__).info("no estimate for %s", run_id, exc_info=True)
            return
        # What the run's memory events measure (allocator peak or RSS), per rank, without the
        # CUDA context the bars show.
        peak = est.get("estimated_peak")
        run = self.engine.store.get_run(run_id)
        if run is None:
            return
        with contextlib.suppress(OSError):
            (Path(run["run_dir"]) / "estimate.json").write_text(json.dumps(est, indent=1), encoding="utf-8")
        self.engine.store.update_run(run_id, estimated_peak=peak)

    async def machine_info(self, _s: Session, _p: NoParams) -> Any:
        return machine.info(self.engine.paths.home)

    def _templates_dir(self) -> Path:
        return self.engine.paths.home / "templates"

    async def templates_list(self, _s: Session, _p: NoParams) -> Any:
        return {"templates": templates.list_all(self._templates_dir())}

    async def templates_save(self, _s: Session, p: TemplateSave) -> Any:
        return templates.save(self._templates_dir(), p.name, p.kind, p.spec)

    async def templates_delete(self, _s: Session, p: TemplateName) -> Any:
        return templates.delete(self._templates_dir(), p.name)

    async def jobs_delete(self, _s: Session, p: JobsDelete) -> Any:
        run = self.engine.jobs.get(p.id)
        if run["state"] in ("queued", "running", "stopping"):
            raise RpcError(INVALID_STATE, f"Job {p.id} is {run['state']}; only a finished job can be deleted",
                           {"hint": "Cancel it first, then delete it."})
        freed, left = 0, []
        if p.files and ((run.get("spec") or {}).get("distributed") or {}).get("nodes"):
            from engine.launch.multinode import remove_remote_dirs

            # A run across machines also left folders on its hosts (checkpoints, copied data).
            freed, left = await remove_remote_dirs(p.id, Path(run["run_dir"]), self.engine.hosts)
        freed += delete_files(self.engine.paths.runs, Path(run["run_dir"])) if p.files else 0
        self.engine.store.delete_run(p.id)
        self.engine.bus.publish("jobs", {"id": p.id, "deleted": True})
        return {"ok": True, "freed_bytes": freed, "remote_left": left}

    async def jobs_artifacts(self, _s: Session, p: JobId) -> Any:
        return artifacts(self.engine.store, self.engine.jobs.get(p.id))

    async def compress_variants(self, _s: Session, p: JobId) -> Any:
        return variants(self.engine.store, self.engine.jobs.get(p.id))

    async def jobs_list(self, _s: Session, p: JobsList) -> Any:
        store = self.engine.store
        return {"jobs": [record(store, r) for r in store.list_runs(p.state, p.kind, p.limit)]}

    async def jobs_get(self, _s: Session, p: JobId) -> Any:
        run = record(self.engine.store, self.engine.jobs.get(p.id))
        result = read_json(Path(run["run_dir"]) / "result.json")
        if result is not None:
            run["result"] = result
        return run

    async def jobs_stop(self, _s: Session, p: JobId) -> Any:
        return record(self.engine.store, self.engine.jobs.stop(p.id))

    async def jobs_cancel(self, _s: Session, p: JobId) -> Any:
        return record(self.engine.store, self.engine.jobs.cancel(p.id))

    async def jobs_resume(self, _s: Session, p: JobId) -> Any:
        return record(self.engine.store, self.engine.jobs.resume(p.id))

    async def jobs_metrics(self, _s: Session, p: JobsMetrics) -> Any:
        self.engine.jobs.get(p.id)
        rows = self.engine.store.metrics(p.id, p.kind, p.names, p.max_points)
        return {"metrics": rows, "max_points": p.max_points}

    async def jobs_logs(self, _s: Session, p: JobsLogs) -> Any:
        run = self.engine.jobs.get(p.id)
        log_file = Path(run["run_dir"]) / "stdout.log"
        if not log_file.exists():
            return {"lines": []}
        with open(log_file, encoding="utf-8", errors="replace") as f:
            return {"lines": [line.rstrip("\n") for line in deque(f, maxlen=p.tail)]}

    # ---- events
    async def subscribe(self, s: Session, p: Subscribe) -> Any:
        bus = self.engine.bus
        sub, upto = bus.subscribe(p.topics, s.write, p.since)
        s.subscriptions.add(sub.id)
        if p.since is not None:
            # Reply first, so the client knows the subscription id before its events arrive.
            asyncio.get_running_loop().call_soon(
                lambda: asyncio.ensure_future(bus.replay(sub, p.since, upto, s.drain)))
        return {"subscription": sub.id, "replay_to": upto}

    async def unsubscribe(self, s: Session, p: Unsubscribe) -> Any:
        if p.subscription not in s.subscriptions:
            raise RpcError(NOT_FOUND, f"No subscription {p.subscription} on this connection")
        s.subscriptions.discard(p.subscription)
        self.engine.bus.unsubscribe(p.subscription)
        return {"ok": True}

    async def events_query(self, _s: Session, p: EventsQuery) -> Any:
        rows = self.engine.store.query_events(p.topics, p.since, None, p.limit)
        return {"events": [{"topic": topic, "seq": seq, "t": t, "data": json.loads(data)}
                           for seq, topic, t, data in rows], "last_seq": self.engine.bus.last_seq}

    async def audit_list(self, _s: Session, p: AuditList) -> Any:
        store = self.engine.store
        filters = p.model_dump(exclude={"limit", "offset"})
        records, size = [], 0
        for rec in store.audit_records(p.limit, p.offset, **filters):
            size += len(json.dumps(rec, default=str))
            if records and size > AUDIT_REPLY_BYTES:  # big params (specs): the rest comes on the next page
                break
            records.append(rec)
        total = store.audit_count(**filters)
        end = p.offset + len(records)
        return {"records": records, "total": total, "offset": p.offset, "next_offset": end if end < total else None}

    async def runs_lineage(self, _s: Session, p: JobId) -> Any:
        from engine.daemon import lineage

        rec, pending = lineage.gather(self.engine.store, self.engine.jobs.get(p.id))
        await asyncio.to_thread(lineage.complete, pending)  # hashing big folders must not stall the loop
        return rec

    # ---- queue (engine/daemon/job_queue.py, docs/queue.md): every change re-plans and publishes `queue`
    async def queue_get(self, _s: Session, _p: NoParams) -> Any:
        from engine.daemon import job_queue

        return job_queue.snapshot(self.engine.jobs)

    async def queue_move(self, _s: Session, p: QueueMove) -> Any:
        from engine.daemon import job_queue

        job_queue.move(self.engine.jobs, p.id, p.to)
        self.engine.jobs.schedule()
        return job_queue.snapshot(self.engine.jobs)

    async def jobs_prioritize(self, _s: Session, p: JobsPrioritize) -> Any:
        from engine.daemon import job_queue

        job_queue.prioritize(self.engine.jobs, p.id, p.priority)
        self.engine.jobs.schedule()
        return job_queue.snapshot(self.engine.jobs)

    async def queue_configure(self, _s: Session, p: QueueConfigure) -> Any:
        from engine.daemon import job_queue

        job_queue.configure(self.engine.jobs, p.max_concurrent, p.cpu_cores, p.allow_gpu_sharing,
                            p.model_fields_set)
        self.engine.jobs.schedule()
        return job_queue.snapshot(self.engine.jobs)

    async def diag_burst(self, _s: Session, p: DiagBurst) -> Any:
        bus = self.engine.bus
        first = bus.next_seq()
        payload = "x" * p.payload_bytes
        for i in range(p.count):
            bus.publish(p.topic, {"i": i, "payload": payload})
        bus.flush()  # the reply means "stored": a client may rely on replaying them
        return {"first_seq": first, "last_seq": first + p.count - 1}
