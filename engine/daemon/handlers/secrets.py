"""Secrets an admin keeps for a project (engine/daemon/secrets_store.py): secrets.list shows names only,
secrets.set adds, replaces or removes one (docs/security.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from engine.api.protocol import INVALID_PARAMS, RpcError
from engine.daemon import secrets_store
from engine.daemon.handlers.params import Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class SecretsList(Params):
    project: str | None = Field(None, min_length=1, max_length=64, pattern=NAME,
                                description="one project's; None: every project this user belongs to")


class SecretSet(Params):
    project: str = Field(..., min_length=1, max_length=64, pattern=NAME)
    name: str = Field(..., pattern=NAME)
    # Named "secret" so the audit log masks it (engine/daemon/store.py _redact).
    secret: str | None = Field(None, min_length=1, max_length=4096, pattern=r"^[\x21-\x7e]+$",
                               description="the value (an API key: one token of printable characters)")
    remove: bool = False


class SecretHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {"secrets.list": (SecretsList, self.list), "secrets.set": (SecretSet, self.set)}

    async def list(self, s: Client, p: SecretsList) -> Any:
        projects = [p.project] if p.project else (None if s.user.sees_all else list(s.user.projects))
        return {"secrets": secrets_store.names(self.engine.store, projects)}

    async def set(self, _s: Client, p: SecretSet) -> Any:
        if not p.remove and p.secret is None:
            raise RpcError(INVALID_PARAMS, "secrets.set needs the secret (or remove: true)",
                           {"hint": "ember secrets set PROJECT NAME reads the value from standard input."})
        secrets_store.put(self.engine.store, p.project, p.name, None if p.remove else p.secret)
        return {"project": p.project, "name": p.name, "removed": p.remove}
