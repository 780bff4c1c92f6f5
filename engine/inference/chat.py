"""Chat generation with streamed text: the prompt from messages and a chat template, sampling settings,
stop sequences, Stop from another thread, and the speed figures (time to first token, tokens/s).

The text is streamed as it grows: the generated ids are decoded whole after each token and only the new
suffix is handed on, held back while it ends inside a multi-byte character, so every chunk is valid text.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from engine.api.playground import Answer, GenerateSettings
from engine.tasks.chat_templates import render_prompt


class _Streamer:
    """transformers' streamer interface: ``put`` gets the prompt first, then each new token."""

    def __init__(self, tokenizer: Any, answer: Answer, on_text: Callable[[str], None], stops: list[str],
                 t0: float):
        self.tokenizer, self.answer, self.on_text, self.stops, self.t0 = tokenizer, answer, on_text, stops, t0
        self.ids: list[int] = []
        self.sent = 0  # characters of the decoded text already handed on
        self.prompt_seen = False
        self.hit_stop = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        if self.answer.ttft_s is None:
            self.answer.ttft_s = time.perf_counter() - self.t0
        self.ids.extend(int(t) for t in value.reshape(-1).tolist())
        self.answer.new_tokens = len(self.ids)
        self._flush(final=False)

    def end(self) -> None:
        self._flush(final=True)

    def _flush(self, final: bool) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        for stop in self.stops:
            at = text.find(stop, max(0, self.sent - len(stop)))
            if at >= 0:
                text, self.hit_stop = text[:at], True
        if not final and not self.hit_stop:
            if text.endswith("\ufffd"):  # a character split across tokens: wait for the rest
                return
            # A stop sequence may be starting at the end: hold that much back until it is decided.
            hold = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
            text = text[: len(text) - hold]
        if len(text) > self.sent:
            self.on_text(text[self.sent:])
            self.sent = len(text)
        self.answer.text = text


class ChatModel:
    """A loaded causal LM and its tokenizer, ready to answer; one generation at a time."""

    def __init__(self, model: Any, tokenizer: Any, device: str = "cpu"):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.stop_event = threading.Event()
        config = getattr(model, "config", None)
        self.context = int(getattr(config, "max_position_embeddings", 0) or 0) or 2048
        self.model.eval()

    def prompt_ids(self, messages: list[dict[str, str]], settings: GenerateSettings) -> tuple[list[int], list[str]]:
        """The prompt's ids, cut from the front to leave room for the answer (with a warning)."""
        msgs = ([{"role": "system", "content": settings.system}] if settings.system else []) + list(messages)
        text = render_prompt(self.tokenizer, msgs, settings.template)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        room = max(1, self.context - settings.max_new_tokens)
        warnings = []
        if len(ids) > room:
            warnings.append(f"the prompt is {len(ids)} tokens; the model's context is {self.context} and "
                            f"{settings.max_new_tokens} are kept for the answer, so only its last {room} tokens "
                            "were used (start a new conversation, or lower max new tokens)")
            ids = ids[-room:]
        return ids, warnings

    def answer(self, messages: list[dict[str, str]], settings: GenerateSettings,
               on_text: Callable[[str], None] = lambda _t: None) -> Answer:
        """The next assistant turn after ``messages``, in the chat template ``settings`` names."""
        ids, warnings = self.prompt_ids([dict(m) for m in messages], settings)
        return self.generate(ids, warnings, settings, on_text)

    def complete(self, text: str, settings: GenerateSettings,
                 on_text: Callable[[str], None] = lambda _t: None) -> Answer:
        """What follows ``text`` as it is (no chat template): a completion."""
        ids = self.tokenizer(text)["input_ids"]
        room = max(1, self.context - settings.max_new_tokens)
        warnings = [f"the prompt is {len(ids)} tokens; only its last {room} were used"] if len(ids) > room else []
        return self.generate(ids[-room:], warnings, settings, on_text)

    def generate(self, ids: list[int], warnings: list[str], settings: GenerateSettings,
                 on_text: Callable[[str], None] = lambda _t: None) -> Answer:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        self.stop_event.clear()
        answer = Answer(prompt_tokens=len(ids), warnings=warnings)
        t0 = time.perf_counter()
        streamer = _Streamer(self.tokenizer, answer, on_text, list(settings.stop), t0)
        stop_event = self.stop_event

        class _Stop(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), stop_event.is_set() or streamer.hit_stop,
                                  dtype=torch.bool, device=input_ids.device)

        kwargs = sampling_kwargs(settings)
        if settings.seed is not None:
            torch.manual_seed(settings.seed)
        input_ids = torch.tensor([ids], device=self.device)
        with torch.inference_mode():
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                      max_new_tokens=settings.max_new_tokens, streamer=streamer,
                                      stopping_criteria=StoppingCriteriaList([_Stop()]),
                                      pad_token_id=self.pad_id(), **kwargs)
        answer.seconds = time.perf_counter() - t0
        streamer.end()
        eos = set(_as_list(self.model.generation_config.eos_token_id) or _as_list(self.tokenizer.eos_token_id))
        last = int(out[0, -1]) if out.shape[1] > len(ids) else None
        if stop_event.is_set():
            answer.stopped = "user"
        elif streamer.hit_stop:
            answer.stopped = "stop_sequence"
        elif last is not None and last in eos:
            answer.stopped = "eos"
        return answer

    def pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else (_as_list(tok.eos_token_id) or [0])[0]


def sampling_kwargs(settings: GenerateSettings) -> dict[str, Any]:
    """generate()'s sampling arguments; temperature 0 is greedy decoding."""
    kwargs: dict[str, Any] = {"repetition_penalty": settings.repetition_penalty}
    if settings.temperature == 0:
        return kwargs | {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    return kwargs | {"do_sample": True, "temperature": settings.temperature, "top_p": settings.top_p,
                     "top_k": settings.top_k or None}


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
