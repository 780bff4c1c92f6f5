"""The Playground: chat with any model, or classify text, through inference workers
(engine/daemon/inference.py; docs/playground.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from engine.api.playground import GenerateSettings, Message, ModelRef
from engine.api.protocol import NOT_FOUND, RpcError
from engine.daemon import secrets_store
from engine.daemon.handlers.params import NoParams, Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


class Chat(Params):
    model: ModelRef
    messages: list[Message] = Field(min_length=1, max_length=1000)
    settings: GenerateSettings = Field(default_factory=GenerateSettings)


class Stop(Params):
    request: str = Field(min_length=1, max_length=64)


class Predict(Params):
    model: ModelRef
    text: str | None = Field(None, max_length=200_000, description="for a text classifier")
    image: str | None = Field(None, min_length=1, max_length=4096, description="an image file, for an image "
                              "classifier (a path on the engine's machine)")

    @model_validator(mode="after")
    def _one(self) -> Predict:
        if (self.text is None) == (self.image is None):
            raise ValueError("send text or image (one of them)")
        return self


class Unload(Params):
    model: ModelRef


class PlaygroundHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {
            "playground.chat": (Chat, self.chat),
            "playground.stop": (Stop, self.stop),
            "playground.predict": (Predict, self.predict),
            "playground.workers": (NoParams, self.workers),
            "playground.unload": (Unload, self.unload),
        }

    def _ref(self, s: Client, ref: ModelRef) -> ModelRef:
        """The reference with a named secret's value as its key (resource_check made sure it is theirs)."""
        if not ref.api_key_secret:
            return ref
        store = self.engine.store
        projects = list(secrets_store.names(store, None)) if s.user.sees_all else list(s.user.projects)
        value = secrets_store.get(store, projects, ref.api_key_secret)
        if value is None:
            raise RpcError(NOT_FOUND, f"No secret {ref.api_key_secret!r} in your projects",
                           {"hint": "ember secrets list shows your projects' secrets; an admin adds them."})
        return ref.model_copy(update={"api_key": value, "api_key_secret": None})

    async def chat(self, s: Client, p: Chat) -> Any:
        access = self.engine.access
        reply = await self.engine.inference.chat(self._ref(s, p.model), [m.model_dump() for m in p.messages],
                                                 p.settings.model_dump(),
                                                 lambda job_id: access.visible_existing(s.user, job_id))
        # Before any await: the answer's events go to this user only (Access.topic_visible).
        self.engine.access.note_request(reply["request"], s.user)
        return reply

    async def stop(self, _s: Client, p: Stop) -> Any:
        return {"ok": self.engine.inference.stop(p.request)}

    async def predict(self, s: Client, p: Predict) -> Any:
        return await self.engine.inference.predict(self._ref(s, p.model), p.text, p.image)

    async def workers(self, s: Client, _p: NoParams) -> Any:
        await self.engine.inference.endpoints.forget_stopped()
        found = self.engine.inference.list()
        if not s.user.sees_all:  # another project's run stays unnamed
            access = self.engine.access
            found = [w for w in found if not (run := (w.get("model") or {}).get("run"))
                     or access.visible_existing(s.user, str(run))]
        return {"workers": found}

    async def unload(self, s: Client, p: Unload) -> Any:
        return {"ok": await self.engine.inference.unload(self._ref(s, p.model))}
