"""The engine's own methods: ping, engine.status, engine.methods, engine.shutdown."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import engine
from engine.api.protocol import METHODS
from engine.daemon.handlers.params import NoParams

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


def status_of(eng: EngineView) -> dict[str, Any]:
    return {
        "version": engine.__version__,
        "pid": os.getpid(),
        "started_at": eng.started_at,
        "uptime_s": time.time() - eng.started_at,
        "home": str(eng.paths.home),
        "socket": str(eng.paths.socket),
        "python": sys.executable,
        "jobs": eng.store.count_jobs_by_state(),
        "clients": len(eng.sessions),
        "last_seq": eng.bus.last_seq,
        "max_concurrent": eng.jobs.max_concurrent,
        "store": eng.store_health,
        "tls": eng.tls or None,  # {listen, fingerprint, certificate} when serving over TCP with TLS
    }


class StatusHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[NoParams], Any]]:
        return {
            "ping": (NoParams, self.ping),
            "engine.status": (NoParams, self.engine_status),
            "engine.methods": (NoParams, self.engine_methods),
            "engine.shutdown": (NoParams, self.engine_shutdown),
        }

    async def ping(self, _s: Client, _p: NoParams) -> Any:
        return {"t": time.time()}

    async def engine_status(self, _s: Client, _p: NoParams) -> Any:
        return status_of(self.engine)

    async def engine_methods(self, _s: Client, _p: NoParams) -> Any:
        return METHODS

    async def engine_shutdown(self, s: Client, _p: NoParams) -> Any:
        # Reply first, then stop, so the caller sees the answer.
        asyncio.get_running_loop().call_later(0.05, self.engine.request_stop, f"requested by {s.name}")
        return {"ok": True}
