"""Protocol methods for models from the Hugging Face Hub (models.*, hub.*): the cache, search, the token.

The work is in engine/daemon/hub.py, run in a thread so a slow disk or link never holds the engine up.
Downloads are ``model.download`` jobs. ``hub.login`` takes the token: the audit log records the call
with the token masked (the store redacts every parameter named like a secret), and no reply carries it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic import Field

from engine.api.job_terms import ACTIVE_STATES, FINETUNE, MODEL_DOWNLOAD
from engine.api.protocol import INVALID_PARAMS, INVALID_STATE, NOT_FOUND, REMOTE_FAILED, RpcError
from engine.api.train_spec import HUB_ID, HUB_REVISION
from engine.daemon import builtins, hub
from engine.daemon.handlers.params import NoParams, Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView

_CODES = {"not_found": NOT_FOUND, "offline": REMOTE_FAILED, "invalid": INVALID_PARAMS, "busy": INVALID_STATE}


class RepoRef(Params):
    repo_id: str = Field(min_length=1, max_length=200, pattern=HUB_ID)
    revision: str | None = Field(None, max_length=200, pattern=HUB_REVISION)


class Search(Params):
    text: str = Field(min_length=1, max_length=200)
    limit: int = Field(20, ge=1, le=100)


class Login(Params):
    token: str = Field(min_length=1, max_length=4096)


async def _run(fn: Any, *args: Any) -> Any:
    try:
        return await asyncio.to_thread(fn, *args)
    except hub.HubProblem as exc:
        raise RpcError(_CODES.get(exc.kind, REMOTE_FAILED), str(exc), {"hint": exc.hint}) from None
    except OSError as exc:
        raise RpcError(INVALID_STATE, f"The Hugging Face cache could not be changed: {exc.strerror or exc}",
                       {"hint": "Check the cache folder's permissions (hub.status names it)."}) from None


class ModelHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {
            "models.list": (NoParams, self.list),
            "models.delete": (RepoRef, self.delete),
            "models.search": (Search, self.search),
            "hub.status": (NoParams, self.status),
            "hub.login": (Login, self.login),
            "hub.logout": (NoParams, self.logout),
        }

    def _users(self, repo_id: str) -> list[str]:
        """Jobs not ended yet that download or fine-tune this model."""
        jobs = self.engine.store.list_jobs(state=ACTIVE_STATES, limit=10_000)
        return [j["id"] for j in jobs
                if (j["kind"] == MODEL_DOWNLOAD and (j["spec"] or {}).get("repo_id") == repo_id)
                or (j["kind"] == FINETUNE and ((j["spec"] or {}).get("model") or {}).get("hub") == repo_id)]

    async def list(self, _s: Client, _p: NoParams) -> Any:
        """The Hugging Face cache's models, and the built-in ones (engine/daemon/builtins.py)."""
        cached = await _run(hub.cached_models)
        return {**cached, "builtins": await asyncio.to_thread(builtins.builtin_models)}

    async def delete(self, _s: Client, p: RepoRef) -> Any:
        users = self._users(p.repo_id)
        if users:
            raise RpcError(INVALID_STATE, f"{p.repo_id} is in use by job {users[0]}",
                           {"hint": "Delete it once that job has ended, or stop the job first."})
        return await _run(hub.delete_model, p.repo_id, p.revision)

    async def search(self, _s: Client, p: Search) -> Any:
        return await _run(hub.search, p.text, p.limit)

    async def status(self, _s: Client, _p: NoParams) -> Any:
        return await _run(hub.status)

    async def login(self, _s: Client, p: Login) -> Any:
        return await _run(hub.save_token, p.token)

    async def logout(self, _s: Client, _p: NoParams) -> Any:
        return await _run(hub.forget_token)
