"""Request handlers: one small method per protocol method, params validated by pydantic.

Each area has its module and class (status, jobs, data, queue, events, audit, hosts, models, playground,
evaluations, chats, privacy, users); their tables are joined here into the one dispatch table, which must name every method of
engine/api/protocol.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.api.protocol import METHOD_NOT_FOUND, METHODS, RpcError
from engine.api.resources import PARAMS
from engine.daemon.handlers.audit import AuditHandlers
from engine.daemon.handlers.chats import ChatHandlers
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
from engine.daemon.handlers.secrets import SecretHandlers
from engine.daemon.handlers.status import StatusHandlers
from engine.daemon.handlers.users import UserHandlers
from engine.daemon.resource_check import ResourceCheck

if TYPE_CHECKING:
    from pydantic import BaseModel

    from engine.daemon.interfaces import Client, EngineView

def undeclared(table: dict[str, tuple[type[BaseModel], Any]]) -> None:
    """Refuse to start when a method takes a parameter engine/api/resources.py does not classify: a new
    method, or a new parameter, cannot reach a handler without saying which resources it names."""
    problems = [f"{method}: {sorted(set(model.model_fields) ^ set(PARAMS.get(method, {})))}"
                for method, (model, _fn) in sorted(table.items())
                if method not in PARAMS or set(model.model_fields) != set(PARAMS[method])]
    if problems:
        raise RuntimeError("Parameters not declared in engine/api/resources.py PARAMS (or declared but not "
                           "taken): " + "; ".join(problems))


def _target(params: dict[str, Any]) -> str:
    """What a request acts on, for the audit log: a job id, a template's or host's name, else the job kind."""
    host = params.get("host")
    found = (params.get("id") or params.get("name") or (host.get("name") if isinstance(host, dict) else None)
             or params.get("repo_id") or params.get("kind") or "")
    return str(found)[:200]


# Requests that change state are written to the audit log.
AUDITED = {"jobs.start", "jobs.stop", "jobs.cancel", "jobs.resume", "jobs.delete", "engine.shutdown",
           "templates.save", "templates.delete", "hosts.add", "hosts.update", "hosts.remove", "hosts.trust",
           "hosts.forget_key", "hosts.prepare", "hosts.probe", "diag.burst",
           "queue.move", "queue.configure", "jobs.prioritize", "models.delete", "hub.login", "hub.logout",
           "chats.delete", "pii.set_policy", "users.add", "users.update", "users.revoke", "secrets.set",
           "projects.set"}


class Handlers:
    def __init__(self, eng: EngineView):
        self.engine = eng
        data = DataHandlers(eng)
        areas = (StatusHandlers(eng), JobHandlers(eng, data), data, EventHandlers(eng), AuditHandlers(eng),
                 QueueHandlers(eng), HostHandlers(eng), ModelHandlers(eng), PlaygroundHandlers(eng),
                 EvaluationHandlers(eng), ChatHandlers(eng), PrivacyHandlers(eng), UserHandlers(eng),
                 SecretHandlers(eng))
        self.table: dict[str, tuple[type[BaseModel], Any]] = {}
        for area in areas:
            self.table.update(area.table())
        assert set(self.table) | {"hello"} == set(METHODS), "METHODS and handlers disagree"
        undeclared(self.table)  # a method whose parameters engine/api/resources.py does not list: no start
        self.resources = ResourceCheck(eng)

    async def dispatch(self, session: Client, method: str, params: dict[str, Any]) -> Any:
        if method not in self.table:
            hint = "Already connected; hello is only the first request." if method == "hello" else \
                "engine.methods lists the methods this engine answers."
            raise RpcError(METHOD_NOT_FOUND, f"Unknown method {method!r}", {"hint": hint, "methods": sorted(self.table)})
        model, fn = self.table[method]
        try:
            self.engine.access.check(session.user, method, params)  # the role's rule
            # every path, job, chat, template, host, endpoint and secret it names, against the user's projects
            self.resources.check(session.user, session.remote is not None, method, params)
        except RpcError as err:
            if method in AUDITED:  # a refused attempt is on record too, with who tried
                self.engine.store.audit(session.name, method, _target(params), params, False, err.message,
                                        session.user.name)
            raise
        args = parse(model, method, params)
        if method not in AUDITED:
            return await fn(session, args)
        target = _target(params)
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
