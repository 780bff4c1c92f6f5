"""Events: subscribe, unsubscribe, events.query, and diag.burst (synthetic events for benchmarks)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from pydantic import Field

from engine.api.protocol import NOT_FOUND, RpcError
from engine.daemon.handlers.params import Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


class Subscribe(Params):
    topics: list[str] = Field(min_length=1, max_length=100)
    since: int | None = Field(None, ge=0, le=2**63 - 1)


class Unsubscribe(Params):
    subscription: int


class EventsQuery(Params):
    topics: list[str] = Field(min_length=1, max_length=100)
    since: int = Field(0, ge=0, le=2**63 - 1)  # an event seq: SQLite's INTEGER bounds it
    limit: int = Field(1000, ge=1, le=100_000)


class DiagBurst(Params):
    topic: str = Field(pattern=r"^diag/[\w./-]{1,100}$")
    count: int = Field(ge=1, le=100_000)
    payload_bytes: int = Field(0, ge=0, le=65_536)


class EventHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {
            "subscribe": (Subscribe, self.subscribe),
            "unsubscribe": (Unsubscribe, self.unsubscribe),
            "events.query": (EventsQuery, self.events_query),
            "diag.burst": (DiagBurst, self.diag_burst),
        }

    async def subscribe(self, s: Client, p: Subscribe) -> Any:
        bus = self.engine.bus
        user, access = s.user, self.engine.access
        view = None if user.sees_all else (lambda topic, data: access.event_view(user, topic, data))
        sub, upto = bus.subscribe(p.topics, s.write, p.since, view)
        s.subscriptions.add(sub.id)
        if p.since is not None:
            # Reply first, so the client knows the subscription id before its events arrive.
            asyncio.get_running_loop().call_soon(
                lambda: asyncio.ensure_future(bus.replay(sub, p.since, upto, s.drain)))
        return {"subscription": sub.id, "replay_to": upto}

    async def unsubscribe(self, s: Client, p: Unsubscribe) -> Any:
        if p.subscription not in s.subscriptions:
            raise RpcError(NOT_FOUND, f"No subscription {p.subscription} on this connection")
        s.subscriptions.discard(p.subscription)
        self.engine.bus.unsubscribe(p.subscription)
        return {"ok": True}

    async def events_query(self, s: Client, p: EventsQuery) -> Any:
        rows = self.engine.store.query_events(p.topics, p.since, None, p.limit)
        if not s.user.sees_all:
            shown = ((seq, topic, t, self.engine.access.event_view(s.user, topic, data)) for seq, topic, t, data in rows)
            rows = [r for r in shown if r[3] is not None]
        return {"events": [{"topic": topic, "seq": seq, "t": t, "data": json.loads(data)}
                           for seq, topic, t, data in rows], "last_seq": self.engine.bus.last_seq}

    async def diag_burst(self, _s: Client, p: DiagBurst) -> Any:
        bus = self.engine.bus
        first = bus.next_seq()
        payload = "x" * p.payload_bytes
        for i in range(p.count):
            bus.publish(p.topic, {"i": i, "payload": payload})
        bus.flush()  # the reply means "stored": a client may rely on replaying them
        return {"first_seq": first, "last_seq": first + p.count - 1}
