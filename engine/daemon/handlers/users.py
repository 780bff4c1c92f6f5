"""Users, roles and projects: users.me, users.list, users.add, users.update, users.revoke, projects.list,
projects.set (docs/security.md)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from engine.api.protocol import INVALID_PARAMS, NOT_FOUND, RpcError
from engine.daemon import projects
from engine.daemon.access import ALL, DEFAULT_PROJECT, new_token, token_hash
from engine.daemon.handlers.params import NoParams, Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView

PROJECT = r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$"
Role = Literal["viewer", "operator", "admin"]


class UserAdd(Params):
    name: str = Field(..., min_length=1, max_length=64)
    role: Role
    projects: list[str] = Field(default_factory=lambda: ["default"], max_length=100)
    expires_days: float | None = Field(None, gt=0, le=36_500, description="the token stops working after this")


class UserUpdate(Params):
    name: str = Field(..., min_length=1, max_length=64)
    role: Role | None = None
    projects: list[str] | None = Field(None, max_length=100)
    expires_days: float | None = Field(None, gt=0, le=36_500)
    new_token: bool = False


class ProjectSet(Params):
    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    data_folders: list[str] = Field(default_factory=list, max_length=100,
                                    description="absolute folders whose files are this project's data")
    hosts: list[str] = Field(default_factory=list, max_length=100, description="hosts (Hosts page) given to it")
    endpoints: list[str] | None = Field(None, max_length=100, description="OpenAI-compatible endpoint URLs its "
                                        "members may chat with (besides its own serve jobs); None keeps them")
    remove: bool = Field(False, description="forget the project's folders and hosts (its jobs stay)")


class UserName(Params):
    name: str = Field(..., min_length=1, max_length=64)


def _check_projects(projects: list[str] | None) -> None:
    for p in projects or []:
        if not isinstance(p, str) or not re.match(PROJECT, p):
            raise RpcError(INVALID_PARAMS, f"{p!r} is not a project name",
                           {"hint": "Letters, digits, . _ -, up to 64; * for every project."})


def _public(user: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in user.items() if k != "token_sha256"}


class UserHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {"users.me": (NoParams, self.me), "users.list": (NoParams, self.list),
                "users.add": (UserAdd, self.add), "users.update": (UserUpdate, self.update),
                "users.revoke": (UserName, self.revoke), "projects.list": (NoParams, self.projects),
                "projects.set": (ProjectSet, self.set_project)}

    async def me(self, s: Client, _p: NoParams) -> Any:
        return s.user.public()

    async def list(self, _s: Client, _p: NoParams) -> Any:
        return {"users": [_public(u) for u in self.engine.store.list_users()]}

    async def add(self, _s: Client, p: UserAdd) -> Any:
        _check_projects(p.projects)
        expires = time.time() + p.expires_days * 86_400 if p.expires_days else None
        user, token = self.engine.access.add(p.name, p.role, p.projects, expires)
        return {"user": _public(user), "token": token}

    def _get(self, name: str) -> dict[str, Any]:
        user = self.engine.store.get_user(name=name)
        if user is None:
            raise RpcError(NOT_FOUND, f"No user {name!r}", {"hint": "users.list shows them."})
        return user

    async def update(self, s: Client, p: UserUpdate) -> Any:
        self._get(p.name)
        _check_projects(p.projects)
        fields: dict[str, Any] = {}
        if p.role is not None:
            fields["role"] = p.role
        if p.projects is not None:
            fields["projects"] = p.projects
        if p.expires_days is not None:
            fields["expires_at"] = time.time() + p.expires_days * 86_400
        token = None
        if p.new_token:
            token = new_token()
            fields.update(token_sha256=token_hash(token), revoked_at=None)
        if fields:
            self.engine.store.update_user(p.name, **fields)
        self._drop_sessions(p.name, keep=s)  # a changed role or token applies from the next connection
        return {"user": _public(self._get(p.name)), **({"token": token} if token else {})}

    async def revoke(self, s: Client, p: UserName) -> Any:
        self._get(p.name)
        self.engine.store.update_user(p.name, revoked_at=time.time())
        self._drop_sessions(p.name, keep=s)
        return {"user": _public(self._get(p.name))}

    async def projects(self, s: Client, _p: NoParams) -> Any:
        """The projects this user belongs to (an admin: all), with their data folders, hosts and members."""
        store = self.engine.store
        defined = projects.all_projects(store)
        users = store.list_users()
        names = set(defined) | {DEFAULT_PROJECT} | {p for u in users for p in u["projects"] if p != ALL}
        if not s.user.sees_all:
            names &= set(s.user.projects)
        return {"projects": [{"name": n, **defined.get(n, {"data_folders": [], "hosts": []}),
                              "members": sorted(u["name"] for u in users if n in u["projects"] or ALL in u["projects"])}
                             for n in sorted(names)]}

    async def set_project(self, _s: Client, p: ProjectSet) -> Any:
        from pathlib import Path

        if p.remove:
            projects.remove_project(self.engine.store, p.name)
            return {"name": p.name, "data_folders": [], "hosts": []}
        for folder in p.data_folders:
            if "\x00" in folder or not (folder.startswith("~") or Path(folder).is_absolute()):
                raise RpcError(INVALID_PARAMS, f"{folder!r} is not an absolute folder",
                               {"hint": "Give the folder as the engine's machine names it, e.g. /data/vision."})
        known = {h["name"] for h in self.engine.store.list_hosts()}
        unknown = [h for h in p.hosts if h not in known]
        if unknown:
            raise RpcError(NOT_FOUND, f"No host {unknown[0]!r}", {"hint": "hosts.list shows them (Hosts page)."})
        bad = [u for u in p.endpoints or [] if not re.match(r"^https?://[^\s/]+(/[^\s]*)?$", u)]
        if bad:
            raise RpcError(INVALID_PARAMS, f"{bad[0]!r} is not an endpoint URL",
                           {"hint": "Give the server's base URL, e.g. http://10.0.0.5:8000/v1."})
        return {"name": p.name, **projects.set_project(self.engine.store, p.name, p.data_folders, p.hosts,
                                                       p.endpoints)}

    def _drop_sessions(self, name: str, keep: Client | None = None) -> None:
        for session in list(self.engine.sessions):
            if session is not keep and getattr(session, "user", None) is not None and session.user.name == name:
                asyncio.ensure_future(session.close())
