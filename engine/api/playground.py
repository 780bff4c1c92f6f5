"""What the Playground sends: which model, the conversation, and the generation settings.

Shared by the GUI (its controls' bounds and defaults), the engine's playground.* handlers, `ember chat`
and the inference worker (engine/inference), so every path validates the same way. pydantic only.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.api.resources import READ, RUN, SECRET, SECRET_FILE, URL, resource

# What a saved chat keeps of each answer (its done event's figures), shown again under it when reopened.
ANSWER_FIGURES = ("new_tokens", "tokens_per_s", "ttft_s", "seconds", "stopped")
TEMPLATE_NAMES = ("model", "chatml", "llama3", "plain")
KEY_FIELDS = ("api_key_file", "api_key", "api_key_secret")  # an endpoint's key: by file (local), value or name  # model: the model's own chat template


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRef(_Part):
    """One model to try: a finished job (fine-tune or variant), a built-in, a folder, or a cached Hub id."""

    run: str | None = Field(None, json_schema_extra=resource(RUN), min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                            description="the id of a finished fine-tune or compression variant")
    builtin: str | None = Field(None, min_length=1, max_length=100, description="a built-in model's name")
    path: str | None = Field(None, json_schema_extra=resource(READ), min_length=1, max_length=4096, description="a Hugging Face model folder")
    hub: str | None = Field(None, min_length=1, max_length=200, description="a Hub id in the Hugging Face cache")
    revision: str | None = Field(None, max_length=200)
    url: str | None = Field(None, json_schema_extra=resource(URL), min_length=8, max_length=2000, pattern=r"^https?://[^\s]+$",
                            description="an OpenAI-compatible server's base URL (http://host:port/v1: Ember's "
                                        "serve job, vLLM, llama.cpp's server): chat with the model it serves")
    api_key_file: str | None = Field(None, json_schema_extra=resource(SECRET_FILE), min_length=1, max_length=4096,
                                     description="with url: a file holding the server's API key (read only "
                                                 "for a client on the engine's machine)")
    api_key: str | None = Field(None, min_length=1, max_length=4096, pattern=r"^[\x21-\x7e]+$",
                                description="with url: the server's API key itself (never kept in saved chats, "
                                            "lists or logs)")
    api_key_secret: str | None = Field(None, json_schema_extra=resource(SECRET), min_length=1, max_length=64,
                                       pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                                       description="with url: the name of a secret an admin keeps for your project "
                                                   "(ember secrets)")

    @model_validator(mode="after")
    def _one(self) -> ModelRef:
        named = [k for k in ("run", "builtin", "path", "hub", "url") if getattr(self, k)]
        if len(named) != 1:
            raise ValueError("name exactly one model: run, builtin, path, hub or url")
        keys = [k for k in KEY_FIELDS if getattr(self, k)]
        if keys and not self.url:
            raise ValueError(f"{keys[0]} goes with url (a served endpoint's key)")
        if len(keys) > 1:
            raise ValueError(f"give one key: {' or '.join(keys)}")
        return self

    def label(self) -> str:
        return str(self.run or self.builtin or self.hub or self.path or self.url)

    def key(self) -> str:
        """What tells two models apart (a worker's identity): the key itself never, only a digest of it."""
        doc = self.model_dump(exclude_none=True, exclude={"api_key"})
        if self.api_key:
            doc["api_key_sha256"] = hashlib.sha256(self.api_key.encode()).hexdigest()[:16]
        return json.dumps(doc, separators=(",", ":"))

    def shown(self) -> dict[str, Any]:
        """The reference as lists and saved chats keep it: without the key."""
        return self.model_dump(exclude_none=True, exclude={"api_key"})


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


class ConversationSide(_Part):
    """One model's side of a saved chat: the model, what the pickers called it, the turns, each answer's
    figures (the done event's tokens, tokens/s, time to first token; None for a turn without them)."""

    model: ModelRef
    title: str = Field("", max_length=500)
    messages: list[Message] = Field(default_factory=list, max_length=2000)
    figures: list[dict[str, float | int | str | None] | None] = Field(default_factory=list, max_length=1000)


class Conversation(_Part):
    """A Playground chat as the engine keeps it (``chats.*``, docs/playground.md): one side, or two
    side by side, asked with one set of settings (the system prompt among them)."""

    id: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                           description="omit to save a new conversation; give it to replace a saved one")
    title: str = Field("", max_length=200, description="'' : the first question, shortened")
    sides: list[ConversationSide] = Field(min_length=1, max_length=2)
    settings: GenerateSettings = Field(default_factory=GenerateSettings)

    def shown_title(self) -> str:
        if self.title.strip():
            return self.title.strip()
        first = next((m.content for side in self.sides for m in side.messages if m.role == "user"), "")
        line = " ".join(first.split())
        return (line[:77] + "…") if len(line) > 80 else (line or "Empty chat")


def tokens_per_s(new_tokens: int, seconds: float) -> float | None:
    """The one speed Ember shows for generation, wherever it is shown (the chat line, ``ember chat``, the serve
    bar and its chart): tokens generated divided by the seconds from the request to the last token, time to
    first token included. None when nothing was timed."""
    return new_tokens / seconds if seconds > 0 else None


@dataclass
class Answer:
    """One generated answer and its figures: what every runtime (transformers, llama.cpp, ONNX Runtime GenAI, a
    served endpoint) hands back, and what a done event and a saved chat carry."""

    text: str = ""
    prompt_tokens: int = 0
    new_tokens: int = 0
    ttft_s: float | None = None
    seconds: float = 0.0
    stopped: str = "length"  # length | eos | stop_sequence | user
    warnings: list[str] = field(default_factory=list)

    def stats(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens, "ttft_s": self.ttft_s,
                "seconds": self.seconds, "tokens_per_s": tokens_per_s(self.new_tokens, self.seconds) or 0.0,
                "stopped": self.stopped, "warnings": self.warnings}


class Chunks:
    """Streamed text gathered and handed to ``send`` at most every ``every`` seconds (and at ``flush``), so a fast
    model's tokens do not each cost a message: the Playground's worker and the engine's endpoint chats."""

    def __init__(self, send: Callable[[str], None], every: float = 0.03):
        self.send, self.every, self.buf, self.last = send, every, "", 0.0

    def __call__(self, text: str) -> None:
        self.buf += text
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.flush()
            self.last = now

    def flush(self) -> None:
        if self.buf:
            self.send(self.buf)
            self.buf = ""


def answer_figures(done: dict[str, Any]) -> dict[str, Any]:
    """What a saved chat keeps of an answer: its done event's ANSWER_FIGURES."""
    return {k: done.get(k) for k in ANSWER_FIGURES}


def conversation_line(messages: list[dict[str, str]], ref: dict[str, Any], settings: dict[str, Any],
                      title: str = "") -> str:
    """One side of a chat as a JSONL line: {"messages": [system?, user, assistant, ...], "model", "settings",
    "model_title"?}: what the Playground's Export and ``ember chats export`` write."""
    system = settings.get("system")
    full = ([{"role": "system", "content": system}] if system else []) + [
        {"role": m["role"], "content": m["content"]} for m in messages]
    doc: dict[str, Any] = {"messages": full, "model": dict(ref), "settings": dict(settings)}
    if title:
        doc["model_title"] = title
    return json.dumps(doc, ensure_ascii=False)
