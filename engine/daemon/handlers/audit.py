"""What happened and where a model came from: audit.list and jobs.lineage (runs.lineage, its older name)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from pydantic import Field

from engine.daemon import lineage
from engine.daemon.handlers.params import JobId, Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView

AUDIT_REPLY_BYTES = 512 * 1024  # an audit.list page stops here, well under the 1 MiB frame


class AuditList(Params):
    limit: int = Field(100, ge=1, le=10_000)
    offset: int = Field(0, ge=0, le=2**63 - 1)
    action: str | None = Field(None, max_length=200, description="exact, or a glob such as jobs.*")
    client: str | None = Field(None, max_length=200)
    target: str | None = Field(None, max_length=200)
    since: float | None = Field(None, description="records at or after this time (epoch seconds)")
    until: float | None = Field(None, description="records before this time")
    ok: bool | None = None
    text: str | None = Field(None, max_length=200, description="a substring of any column")
    user: str | None = Field(None, max_length=200, description="who made the request (local: the engine's own "
                                                                 "admin on its machine)")


class AuditHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {
            "audit.list": (AuditList, self.audit_list),
            "jobs.lineage": (JobId, self.jobs_lineage),
            "runs.lineage": (JobId, self.jobs_lineage),  # the name before jobs.*; kept for older clients
        }

    async def audit_list(self, _s: Client, p: AuditList) -> Any:
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

    async def jobs_lineage(self, _s: Client, p: JobId) -> Any:
        rec, pending = lineage.gather(self.engine.store, self.engine.jobs.get(p.id))
        await asyncio.to_thread(lineage.complete, pending)  # hashing big folders must not stall the loop
        return rec
