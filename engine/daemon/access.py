"""Who a connection is, and what it may see and do (docs/security.md).

A client says who it is in ``hello``: the engine's own token (``engine.token``, readable only by the user
the engine runs as) makes it the local admin, nothing to set up; a user's token (made by ``users.add``,
shown once, kept only as its sha256) makes it that user, with their role and projects, until it expires
or is revoked. ``check`` applies engine/api/permissions.py's table to every request before its handler
runs, and keeps a user to the jobs of their projects.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from engine.api.permissions import ADMIN, RULES, allowed
from engine.api.protocol import FORBIDDEN, INVALID_PARAMS, UNAUTHORIZED, RpcError
from engine.daemon import projects

DEFAULT_PROJECT = "default"
ALL = "*"  # in a user's projects: every project
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
# Topics of engine-wide news every user may follow (the rest are a job's, an answer's or a host's).
PUBLIC_TOPICS = frozenset({"engine", "queue", "models", "hub"})
PUBLIC_PREFIXES = ("diag/",)


@dataclass(frozen=True)
class User:
    name: str
    role: str
    projects: tuple[str, ...]

    @property
    def sees_all(self) -> bool:
        return self.role == ADMIN or ALL in self.projects

    def home_project(self) -> str:
        """Where a job goes when its start names no project."""
        return next((p for p in self.projects if p != ALL), DEFAULT_PROJECT)

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "projects": list(self.projects)}


LOCAL = User("local", ADMIN, (ALL,))


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "emb_" + secrets.token_urlsafe(32)


MAX_REQUESTS = 10_000  # Playground answers remembered with their owner; the oldest are forgotten first


class Access:
    def __init__(self, store: Any):
        self.store = store
        self._projects: dict[str, str] = {}  # job id -> project (a job never moves)
        self._requests: dict[str, str] = {}  # Playground request id -> the user who asked (dicts keep order)

    # ---- who
    def authenticate(self, token: Any, engine_token: str, network: bool = False) -> User:
        if not isinstance(token, str) or not token:
            raise RpcError(UNAUTHORIZED, "No token", {"hint": "Send hello {token, protocol}; see docs/protocol.md."})
        if engine_token and hmac.compare_digest(token.encode(), engine_token.encode()):
            if network:
                raise RpcError(UNAUTHORIZED, "The engine's own token works only on its machine",
                               {"hint": "Over the network, use a user's token: ember users add NAME --role admin "
                                        "on the engine's machine makes one."})
            return LOCAL
        row = self.store.get_user(token_sha256=token_hash(token))
        if row is None:
            raise RpcError(UNAUTHORIZED, "Wrong token",
                           {"hint": "On the engine's machine, read engine.token in its runtime dir; from elsewhere, "
                                    "use the token an admin made for you (ember users add)."})
        if row["revoked_at"]:
            raise RpcError(UNAUTHORIZED, f"The token of {row['name']} was revoked",
                           {"hint": "Ask an admin for a new one (ember users token NAME)."})
        if row["expires_at"] and row["expires_at"] < time.time():
            raise RpcError(UNAUTHORIZED, f"The token of {row['name']} expired",
                           {"hint": "Ask an admin for a new one (ember users token NAME)."})
        return User(row["name"], row["role"], tuple(row["projects"]))

    # ---- what
    def check(self, user: User, method: str, params: dict[str, Any]) -> None:
        """Refuse (FORBIDDEN) a method ``user``'s role may not call; what it names is checked next
        (engine/daemon/resource_check.py)."""
        if not allowed(user.role, method):
            need = RULES.get(method)
            raise RpcError(FORBIDDEN, f"{user.name} ({user.role}) may not call {method}"
                           + (f": it needs {need}" if need else ": it has no permission rule"),
                           {"role": user.role, "needs": need,
                            "hint": "Ask an admin to change your role (ember users update NAME --role ...)."})

    def project_of(self, job_id: str) -> str | None:
        if job_id not in self._projects:
            job = self.store.get_job(job_id)
            if job is None:
                return None
            self._projects[job_id] = job.get("project") or DEFAULT_PROJECT
        return self._projects[job_id]

    def visible(self, user: User, job_id: str) -> bool:
        if user.sees_all:
            return True
        project = self.project_of(job_id)
        return project is None or project in user.projects  # None: no such job, its handler says so

    def project_for_start(self, user: User, asked: str | None) -> str:
        project = asked or user.home_project()
        if not user.sees_all and project not in user.projects:
            raise RpcError(FORBIDDEN, f"{user.name} does not belong to project {project!r}",
                           {"hint": f"Your projects: {', '.join(user.projects) or 'none'}."})
        return project

    # ---- Playground answers: each streams on playground/<request>, for the user who asked only
    def note_request(self, request: str, user: User) -> None:
        self._requests[request] = user.name
        while len(self._requests) > MAX_REQUESTS:
            self._requests.pop(next(iter(self._requests)))

    def request_owner(self, request: str) -> str | None:
        return self._requests.get(request)

    def topic_visible(self, user: User, topic: str, data_json: str) -> bool:
        """Whether an event reaches ``user``: their projects' runs and job records, their own Playground
        answers, the hosts they may use; engine-wide news (engine, queue) for everyone (the queue's jobs are
        filtered by ``event_view``)."""
        if user.sees_all:
            return True
        if topic.startswith("run/"):  # a deleted job's stored events stay with its project's members
            return self.visible_existing(user, topic.split("/", 2)[1])
        if topic == "jobs":
            found = re.search(r'"id":"([^"]+)"', data_json)
            return found is not None and self.visible_existing(user, found.group(1))
        if topic.startswith("playground/"):
            return self.request_owner(topic.split("/", 2)[1]) == user.name
        if topic.startswith("hosts/") or topic == "hosts":
            found = re.search(r'"name":"([^"]+)"', data_json) if topic == "hosts" else None
            name = found.group(1) if found else topic.split("/", 2)[-1]
            given = projects.host_projects(projects.all_projects(self.store), name)
            return not given or bool(given & set(user.projects))
        return topic in PUBLIC_TOPICS or topic.startswith(PUBLIC_PREFIXES)

    def event_view(self, user: User, topic: str, data_json: str) -> str | None:
        """The event as ``user`` may see it: None hides it; the queue's job lists keep their projects' jobs."""
        if not self.topic_visible(user, topic, data_json):
            return None
        if topic != "queue" or user.sees_all:
            return data_json
        return json.dumps(self.queue_view(user, json.loads(data_json)), separators=(",", ":"))

    def queue_view(self, user: User, snapshot: dict[str, Any]) -> dict[str, Any]:
        """queue.get's reply with only ``user``'s projects' jobs (the resources they take stay counted)."""
        if user.sees_all:
            return snapshot
        keep = [j for j in snapshot.get("jobs", []) if self.visible_existing(user, str(j.get("id")))]
        running = [j for j in snapshot.get("running", []) if self.visible_existing(user, str(j.get("id")))]
        return {**snapshot, "jobs": keep, "running": running}

    def visible_existing(self, user: User, job_id: str) -> bool:
        """A job that exists and belongs to one of ``user``'s projects."""
        if user.sees_all:
            return self.project_of(job_id) is not None
        project = self.project_of(job_id)
        return project is not None and project in user.projects

    # ---- users (admin)
    def add(self, name: str, role: str, projects: list[str], expires_at: float | None) -> tuple[dict[str, Any], str]:
        if not NAME.match(name) or name == LOCAL.name:
            raise RpcError(INVALID_PARAMS, f"{name!r} cannot be a user name",
                           {"hint": "Letters, digits, . _ @ -, up to 64; 'local' is the engine's own admin."})
        if self.store.get_user(name=name):
            raise RpcError(FORBIDDEN, f"There is already a user {name!r}",
                           {"hint": "ember users token NAME makes a new token for them."})
        token = new_token()
        self.store.add_user(name, role, token_hash(token), projects, expires_at)
        return self.store.get_user(name=name), token
