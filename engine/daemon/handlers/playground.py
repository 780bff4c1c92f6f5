"""The Playground: chat with any model, or classify text, through inference workers
(engine/daemon/inference.py; docs/playground.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from engine.api.playground import GenerateSettings, Message, ModelRef
from engine.daemon.handlers.params import NoParams, Params

if TYPE_CHECKING:
    from engine.daemon.context import Client, EngineView


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

    async def chat(self, _s: Client, p: Chat) -> Any:
        return await self.engine.inference.chat(p.model, [m.model_dump() for m in p.messages],
                                                p.settings.model_dump())

    async def stop(self, _s: Client, p: Stop) -> Any:
        return {"ok": self.engine.inference.stop(p.request)}

    async def predict(self, _s: Client, p: Predict) -> Any:
        return await self.engine.inference.predict(p.model, p.text, p.image)

    async def workers(self, _s: Client, _p: NoParams) -> Any:
        return {"workers": self.engine.inference.list()}

    async def unload(self, _s: Client, p: Unload) -> Any:
        return {"ok": await self.engine.inference.unload(p.model)}
