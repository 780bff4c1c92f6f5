"""Request handlers: one small method per protocol method, params validated by pydantic.

Each area has its module and class (status, jobs, data, queue, events, audit, hosts, models, playground,
evaluations, conversations, privacy, users); their tables are joined here into the one dispatch table, which must name every method of
engine/api/protocol.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.api.protocol import METHOD_NOT_FOUND, METHODS, RpcError
from engine.daemon.handlers.audit import AuditHandlers
from engine.daemon.handlers.conversations import ConversationHandlers
from engine.daemon.handlers.data import DataHandlers
from engine.daemon.handlers.evaluations import EvaluationHandlers
from engine.daemon.handlers.events import EventHandlers
from engine.daemon.handlers.hosts import HostHandlers
from engine.daemon.handlers.jobs import JobHandlers
from engine.daemon.handlers.models import ModelHandlers
from engine.daemon.handlers.params import parse
from engine.daemon.handlers.playground import PlaygroundHandlers
from engine.daemon.handlers.privacy import PrivacyHandlers
from engine.daemon.handlers.queue import QueueHandlers
from engine.daemon.handlers.status import StatusHandlers
from engine.daemon.handlers.users import UserHandlers

if TYPE_CHECKING:
    from pydantic import BaseModel

    from engine.daemon.context import Client, EngineView

# Requests that change state are written to the audit log.
AUDITED = {"jobs.start", "jobs.stop", "jobs.cancel", "jobs.resume", "jobs.delete", "engine.shutdown",
           "templates.save", "templates.delete", "hosts.add", "hosts.update", "hosts.remove", "hosts.trust",
           "hosts.forget_key", "hosts.prepare", "hosts.probe", "diag.burst",
           "queue.move", "queue.configure", "jobs.prioritize", "models.delete", "hub.login", "hub.logout",
           "conversations.delete", "pii.set_policy", "users.add", "users.update", "users.revoke"}


class Handlers:
    def __init__(self, eng: EngineView):
        self.engine = eng
        data = DataHandlers(eng)
        areas = (StatusHandlers(eng), JobHandlers(eng, data), data, EventHandlers(eng), AuditHandlers(eng),
                 QueueHandlers(eng), HostHandlers(eng), ModelHandlers(eng), PlaygroundHandlers(eng),
                 EvaluationHandlers(eng), ConversationHandlers(eng), PrivacyHandlers(eng), UserHandlers(eng))
        self.table: dict[str, tuple[type[BaseModel], Any]] = {}
        for area in areas:
            self.table.update(area.table())
        assert set(self.table) | {"hello"} == set(METHODS), "METHODS and handlers disagree"

    async def dispatch(self, session: Client, method: str, params: dict[str, Any]) -> Any:
        if method not in self.table:
            hint = "Already connected; hello is only the first request." if method == "hello" else \
                "engine.methods lists the methods this engine answers."
            raise RpcError(METHOD_NOT_FOUND, f"Unknown method {method!r}", {"hint": hint, "methods": sorted(self.table)})
        model, fn = self.table[method]
        try:
            self.engine.access.check(session.user, method, params)  # the role's rule, the user's projects
        except RpcError as err:
            if method in AUDITED:  # a refused attempt is on record too, with who tried
                self.engine.store.audit(session.name, method, str(params.get("id") or params.get("name") or ""),
                                        params, False, err.message, session.user.name)
            raise
        args = parse(model, method, params)
        if method not in AUDITED:
            return await fn(session, args)
        # What it acted on: a job id, a template's or host's name, else the job kind.
        target = str(params.get("id") or params.get("name") or (params.get("host") or {}).get("name")
                     or params.get("repo_id") or params.get("kind") or "")
        try:
            result = await fn(session, args)
        except RpcError as err:
            self.engine.store.audit(session.name, method, target, params, False, err.message, session.user.name)
            raise
        except Exception as exc:  # an internal error: the attempt is on record too
            self.engine.store.audit(session.name, method, target, params, False, f"internal error: {type(exc).__name__}",
                                    session.user.name)
            raise
        if method == "jobs.start":
            target = result["id"]
        self.engine.store.audit(session.name, method, target, params, True, user=session.user.name)
        return result
