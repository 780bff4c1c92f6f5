"""Request handlers: one small method per protocol method, params validated by pydantic."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.jobs import public
from engine.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    METHODS,
    NOT_FOUND,
    RpcError,
)
from engine.specs import JOB_KINDS, SpecError, validate_spec

if TYPE_CHECKING:
    from engine.server import Engine
    from engine.session import Session


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


class JobsList(Params):
    state: str | None = None
    kind: str | None = None
    limit: int = Field(100, ge=1, le=10_000)


class JobId(Params):
    id: str = Field(min_length=1, max_length=100)


class JobsMetrics(JobId):
    kind: str | None = None


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


class DiagBurst(Params):
    topic: str = Field(pattern=r"^diag/[\w./-]{1,100}$")
    count: int = Field(ge=1, le=100_000)
    payload_bytes: int = Field(0, ge=0, le=65_536)


CHECK_TIMEOUT_S = 120

# Requests that change state are written to the audit log.
AUDITED = {"jobs.start", "jobs.stop", "jobs.cancel", "jobs.resume", "engine.shutdown"}


def _parse(model: type[Params], method: str, params: dict[str, Any]) -> Any:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        fields = [{"field": ".".join(str(p) for p in e["loc"]) or "(params)", "message": e["msg"]}
                  for e in exc.errors()]
        raise RpcError(INVALID_PARAMS, f"Invalid params for {method}",
                       {"fields": fields, "hint": "See docs/protocol.md for this method's params."}) from None


async def _inspect(request: dict[str, Any]) -> Any:
    """Run engine.recipes.check in a subprocess: it imports torch, the engine does not."""
    import sys

    from engine.jobs import job_env

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "engine.recipes.check", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=job_env())
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), timeout=CHECK_TIMEOUT_S)
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
            "engine.methods": (NoParams, self.engine_methods),
            "engine.shutdown": (NoParams, self.engine_shutdown),
            "jobs.kinds": (NoParams, self.jobs_kinds),
            "jobs.start": (JobsStart, self.jobs_start),
            "jobs.check": (JobsStart, self.jobs_check),
            "data.preview": (DataPreview, self.data_preview),
            "jobs.list": (JobsList, self.jobs_list),
            "jobs.get": (JobId, self.jobs_get),
            "jobs.stop": (JobId, self.jobs_stop),
            "jobs.cancel": (JobId, self.jobs_cancel),
            "jobs.resume": (JobId, self.jobs_resume),
            "jobs.metrics": (JobsMetrics, self.jobs_metrics),
            "jobs.logs": (JobsLogs, self.jobs_logs),
            "subscribe": (Subscribe, self.subscribe),
            "unsubscribe": (Unsubscribe, self.unsubscribe),
            "events.query": (EventsQuery, self.events_query),
            "audit.list": (AuditList, self.audit_list),
            "diag.burst": (DiagBurst, self.diag_burst),
        }
        assert set(self.table) | {"hello"} == set(METHODS), "METHODS and handlers disagree"

    async def dispatch(self, session: Session, method: str, params: dict[str, Any]) -> Any:
        if method not in self.table:
            hint = "Already connected; hello is only the first request." if method == "hello" else \
                "engine.methods lists the methods this engine answers."
            raise RpcError(METHOD_NOT_FOUND, f"Unknown method {method!r}", {"hint": hint, "methods": sorted(self.table)})
        model, fn = self.table[method]
        args = _parse(model, method, params)
        if method not in AUDITED:
            return await fn(session, args)
        target = str(params.get("id") or params.get("kind") or "")
        try:
            result = await fn(session, args)
        except RpcError as err:
            self.engine.store.audit(session.name, method, target, params, False, err.message)
            raise
        if method == "jobs.start":
            target = result["id"]
        self.engine.store.audit(session.name, method, target, params, True)
        return result

    # ---- engine
    async def ping(self, _s: Session, _p: NoParams) -> Any:
        return {"t": time.time()}

    async def engine_status(self, _s: Session, _p: NoParams) -> Any:
        from engine.server import status_of

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
        return public(self.engine.jobs.submit(p.kind, spec, p.name))

    async def jobs_check(self, _s: Session, p: JobsStart) -> Any:
        """Validate the spec and its inputs in a subprocess (torch stays out of the engine)."""
        return await _inspect({"op": "check", "kind": p.kind, "spec": p.spec})

    async def data_preview(self, _s: Session, p: DataPreview) -> Any:
        return await _inspect({"op": "preview", "spec": p.spec, "n": p.n})

    async def jobs_list(self, _s: Session, p: JobsList) -> Any:
        return {"jobs": [public(r) for r in self.engine.store.list_runs(p.state, p.kind, p.limit)]}

    async def jobs_get(self, _s: Session, p: JobId) -> Any:
        run = public(self.engine.jobs.get(p.id))
        result_file = Path(run["run_dir"]) / "result.json"
        if result_file.exists():
            run["result"] = json.loads(result_file.read_text(encoding="utf-8"))
        return run

    async def jobs_stop(self, _s: Session, p: JobId) -> Any:
        return public(self.engine.jobs.stop(p.id))

    async def jobs_cancel(self, _s: Session, p: JobId) -> Any:
        return public(self.engine.jobs.cancel(p.id))

    async def jobs_resume(self, _s: Session, p: JobId) -> Any:
        return public(self.engine.jobs.resume(p.id))

    async def jobs_metrics(self, _s: Session, p: JobsMetrics) -> Any:
        self.engine.jobs.get(p.id)
        return {"metrics": self.engine.store.metrics(p.id, p.kind)}

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
        return {"records": self.engine.store.audit_records(p.limit)}

    async def diag_burst(self, _s: Session, p: DiagBurst) -> Any:
        bus = self.engine.bus
        first = bus.next_seq()
        payload = "x" * p.payload_bytes
        for i in range(p.count):
            bus.publish(p.topic, {"i": i, "payload": payload})
        bus.flush()  # the reply means "stored": a client may rely on replaying them
        return {"first_seq": first, "last_seq": first + p.count - 1}
