"""The Playground's saved chats: kept in the store so a chat is there again after the window (or the
engine) restarts (docs/playground.md). The GUI saves after every answer; ``ember chats`` lists, shows and
exports them.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from pydantic import Field

from engine.api.playground import Conversation, ModelRef
from engine.api.protocol import INVALID_PARAMS, RpcError
from engine.daemon.access import DEFAULT_PROJECT
from engine.daemon.handlers.params import Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


MAX_SCAN = 100_000  # saved chats looked through for a user of some projects


class ChatId(Params):
    id: str = Field(min_length=1, max_length=64)


class Page(Params):
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=2**63 - 1)


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """What a list shows: the title, when, which models, how many questions."""
    sides = row["data"].get("sides") or []
    models = [side.get("title") or ModelRef.model_validate(side.get("model") or {}).label() for side in sides]
    turns = max((sum(1 for m in side.get("messages") or [] if m.get("role") == "user") for side in sides), default=0)
    return {"id": row["id"], "title": row["title"], "created_at": row["created_at"],
            "updated_at": row["updated_at"], "models": models, "questions": turns}


class ChatHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Any], Any]]:
        return {
            "chats.save": (Conversation, self.save),
            "chats.list": (Page, self.list),
            "chats.get": (ChatId, self.get),
            "chats.delete": (ChatId, self.delete),
        }

    async def save(self, session: Client, p: Conversation) -> Any:
        conv_id = p.id or f"chat-{secrets.token_hex(6)}"
        title = p.shown_title()
        data = p.model_dump(mode="json", exclude={"id"})
        for side, given in zip(data["sides"], p.sides, strict=True):
            side["model"] = given.model.shown()  # the ModelRef as it was sent, without an endpoint's key
        old = self.engine.store.get_conversation(conv_id)
        kept = old["data"] if old is not None and isinstance(old["data"], dict) else {}
        # A chat belongs to who first saved it, in their project (resource_check lets only them replace it).
        data["owner"] = kept.get("owner") or session.user.name
        data["project"] = kept.get("project") or session.user.home_project()
        updated = self.engine.store.save_conversation(conv_id, title, session.name, data)
        return {"id": conv_id, "title": title, "updated_at": updated}

    async def list(self, s: Client, p: Page) -> Any:
        store = self.engine.store
        if s.user.sees_all:
            rows = store.list_conversations(p.limit, p.offset)
            return {"chats": [summary(r) for r in rows], "total": store.count_conversations()}
        mine = [r for r in store.list_conversations(MAX_SCAN, 0)
                if (r["data"].get("project") or DEFAULT_PROJECT) in s.user.projects]
        return {"chats": [summary(r) for r in mine[p.offset:p.offset + p.limit]], "total": len(mine)}

    async def get(self, _s: Client, p: ChatId) -> Any:
        row = self.engine.store.get_conversation(p.id)
        if row is None:
            raise RpcError(INVALID_PARAMS, f"No saved chat {p.id!r}",
                           {"hint": "chats.list (ember chats) lists the saved chats."})
        return {**summary(row), "conversation": {**row["data"], "id": row["id"]}}

    async def delete(self, _s: Client, p: ChatId) -> Any:
        if not self.engine.store.delete_conversation(p.id):
            raise RpcError(INVALID_PARAMS, f"No saved chat {p.id!r}",
                           {"hint": "chats.list (ember chats) lists the saved chats."})
        return {"ok": True}
