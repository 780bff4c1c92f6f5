"""Events: numbered, committed to the store, then fanned out to subscribers.

Every event gets the next ``seq`` of one engine-wide counter. Events are
batched: whatever is published within one turn of the event loop is committed
in a single transaction and only then sent, so a subscriber never sees an event
the store could lose, and ``subscribe(since=N)`` can replay exactly what a
reconnecting client missed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.api.protocol import dumps, safe_text, strict_json_text, topic_matches
from engine.daemon.store import Store

log = logging.getLogger(__name__)

REPLAY_CHUNK = 2000
# A subscriber that stops reading is dropped once this much output waits for it.
MAX_CLIENT_BACKLOG = 64 * 1024 * 1024


def event_body(topic: str, seq: int, t: float, data_json: str) -> bytes:
    """The shared part of an event frame, encoded once for all subscribers."""
    return f'"topic":{json.dumps(topic)},"seq":{seq},"t":{t!r},"data":{data_json}}}}}\n'.encode()


def frame(subscription: int, body: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","method":"event","params":{"subscription":%d,' % subscription + body


def _when(t: float | None) -> float:
    """An event's time: now unless ``t`` is a finite number (a job's "t" may be anything, even true)."""
    if t is None or isinstance(t, bool):
        return time.time()
    try:
        when = float(t)
    except (TypeError, ValueError, OverflowError):
        return time.time()
    return when if math.isfinite(when) else time.time()


@dataclass
class Subscriber:
    """One client subscription as the bus holds it (the GUI's handle for its own is app.engine_client.Subscription)."""

    id: int
    patterns: list[str]
    sink: Callable[[bytes], None]  # writes a frame to the client
    replaying: bool = False
    # (topic, data JSON) -> the data JSON this subscriber may see (a user limited to some projects): the
    # same, a narrower one (the queue with their projects' jobs only), or None to hide the event
    view: Callable[[str, str], str | None] | None = None
    held: list[bytes] = field(default_factory=list)  # live frames that arrive during replay

    def matches(self, topic: str) -> bool:
        return topic_matches(topic, self.patterns)

    def frame_of(self, topic: str, seq: int, t: float, data: str, body: bytes | None) -> bytes | None:
        """This subscriber's frame of an event (``body``: the shared encoding, when there is one)."""
        shown = data if self.view is None else self.view(topic, data)
        if shown is None:
            return None
        if body is None or shown is not data:
            body = event_body(topic, seq, t, shown)
        return frame(self.id, body)


@dataclass
class _Pending:
    topic: str
    t: float
    job_id: str | None
    data_json: str


class EventBus:
    def __init__(self, store: Store):
        self.store = store
        self.last_seq = store.last_seq()
        self._pending: list[_Pending] = []
        self._job_updates: dict[str, dict[str, Any]] = {}
        self._flush_scheduled = False
        self._subs: dict[int, Subscriber] = {}
        self._next_sub = 1
        self.failed_commits = 0

    # ---- publishing
    def publish(self, topic: str, data: dict[str, Any], job_id: str | None = None,
                t: float | None = None) -> None:
        self.publish_json(topic, dumps(data), job_id, t)

    def publish_json(self, topic: str, data_json: str, job_id: str | None = None,
                     t: float | None = None) -> None:
        """Publish an event whose data is JSON text already (a line a job wrote). The store and every
        subscriber get strict JSON: a job's NaN loss becomes null, a lone surrogate U+FFFD."""
        self._pending.append(_Pending(safe_text(topic), _when(t), job_id, strict_json_text(data_json)))
        self._schedule()

    def next_seq(self) -> int:
        """The seq the next published event will get."""
        return self.last_seq + len(self._pending) + 1

    def update_job_with_batch(self, job_id: str, **fields: Any) -> None:
        """Store ``fields`` on the run in the same transaction as the pending events."""
        self._job_updates.setdefault(job_id, {}).update(fields)
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending and not self._job_updates:
            return
        pending, updates = self._pending, self._job_updates
        rows = [(self.last_seq + i + 1, p.topic, p.t, p.job_id, p.data_json) for i, p in enumerate(pending)]
        try:
            self.store.commit_events(rows, updates)
        except Exception:  # noqa: BLE001 - a full disk must not kill the engine; retry shortly
            self.failed_commits += 1
            log.exception("could not commit %d events; retrying", len(rows))
            asyncio.get_running_loop().call_later(1.0, self._schedule)
            return
        self._pending, self._job_updates = [], {}
        self.last_seq += len(rows)
        self._fan_out(rows)

    def _fan_out(self, rows: list[tuple[int, str, float, str | None, str]]) -> None:
        if not self._subs:
            return
        bodies = [(topic, seq, t, data, event_body(topic, seq, t, data)) for seq, topic, t, _run, data in rows]
        for sub in list(self._subs.values()):
            frames = [f for topic, seq, t, data, body in bodies if sub.matches(topic)
                      and (f := sub.frame_of(topic, seq, t, data, body)) is not None]
            if not frames:
                continue
            if sub.replaying:
                sub.held.extend(frames)
            else:
                sub.sink(b"".join(frames))

    # ---- subscribing
    def subscribe(self, patterns: list[str], sink: Callable[[bytes], None],
                  since: int | None, view: Callable[[str, str], str | None] | None = None) -> tuple[Subscriber, int]:
        sub = Subscriber(self._next_sub, patterns, sink, replaying=since is not None, view=view)
        self._next_sub += 1
        self._subs[sub.id] = sub
        return sub, self.last_seq

    def unsubscribe(self, sub_id: int) -> bool:
        return self._subs.pop(sub_id, None) is not None

    async def replay(self, sub: Subscriber, since: int, upto: int,
                     drain: Callable[[], Any]) -> None:
        """Send stored events in (since, upto], then whatever arrived live meanwhile."""
        cursor = since
        try:
            while cursor < upto and sub.id in self._subs:
                rows = self.store.query_events(sub.patterns, cursor, upto, REPLAY_CHUNK)
                if not rows:
                    break
                # strict_json_text: a store written before events were made strict may hold a NaN.
                sub.sink(b"".join(f for seq, topic, t, data in rows
                                  if (f := sub.frame_of(topic, seq, t, strict_json_text(data), None)) is not None))
                cursor = rows[-1][0]
                await drain()
        finally:
            held, sub.held = sub.held, []
            sub.replaying = False
            if held and sub.id in self._subs:
                sub.sink(b"".join(held))
