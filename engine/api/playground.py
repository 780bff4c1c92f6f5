"""What the Playground sends: which model, the conversation, and the generation settings.

Shared by the GUI (its controls' bounds and defaults), the engine's playground.* handlers, `ember chat`
and the inference worker (engine/inference), so every path validates the same way. pydantic only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TEMPLATE_NAMES = ("model", "chatml", "llama3", "plain")  # model: the model's own chat template


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRef(_Part):
    """One model to try: a finished job (fine-tune or variant), a built-in, a folder, or a cached Hub id."""

    run: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                            description="the id of a finished fine-tune or compression variant")
    builtin: str | None = Field(None, min_length=1, max_length=100, description="a built-in model's name")
    path: str | None = Field(None, min_length=1, max_length=4096, description="a Hugging Face model folder")
    hub: str | None = Field(None, min_length=1, max_length=200, description="a Hub id in the Hugging Face cache")
    revision: str | None = Field(None, max_length=200)

    @model_validator(mode="after")
    def _one(self) -> ModelRef:
        named = [k for k in ("run", "builtin", "path", "hub") if getattr(self, k)]
        if len(named) != 1:
            raise ValueError("name exactly one model: run, builtin, path or hub")
        return self

    def label(self) -> str:
        return str(self.run or self.builtin or self.hub or self.path)

    def key(self) -> str:
        return self.model_dump_json(exclude_none=True)


class Message(_Part):
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=200_000)


class GenerateSettings(_Part):
    """The Playground's controls; `ember chat` has the same options."""

    system: str | None = Field(None, max_length=20000, description="a system prompt, first in the conversation")
    template: Literal["model", "chatml", "llama3", "plain"] = Field(
        "model", description="model: the model's own chat template (plain when it has none); or a named one")
    temperature: float = Field(0.7, ge=0, le=5, description="0 picks the most likely token every time (greedy)")
    top_p: float = Field(0.9, gt=0, le=1)
    top_k: int = Field(50, ge=0, le=100000, description="0 keeps every token")
    max_new_tokens: int = Field(256, ge=1, le=32768)
    repetition_penalty: float = Field(1.0, ge=0.5, le=5)
    stop: list[str] = Field(default_factory=list, max_length=16, description="text that ends the answer")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="the same seed, prompt and settings give the "
                             "same answer; None: a new one each time")
