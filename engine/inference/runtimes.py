"""Chat with an exported file in its own runtime: a GGUF file in llama.cpp, an ONNX-GenAI folder in ONNX Runtime
GenAI (docs/serve.md#backends).

``RuntimeChat`` answers exactly as ``ChatModel`` does (the same chat template and prompt cut, streamed text,
stop sequences, Stop, the speed figures), so the Playground, ``ember chat`` and the OpenAI-compatible server
take a GGUF file or an ONNX-GenAI folder wherever they take a model folder. The runtime computes the logits
(engine/export/llm_check.py's runtimes, with their key/value caches); the next token is picked here (greedy
at temperature 0, else temperature, top-k, top-p and the repetition penalty as transformers applies them).

The tokenizer is the Hugging Face one beside the file (an Ember GGUF export writes it into gguf/; the model
builder writes it into each ONNX-GenAI folder), so the prompt's tokens are the ones the model was tuned on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.api.playground import Answer, GenerateSettings
from engine.inference.chat import ChatModel, _Streamer
from engine.training.context import JobFailed

DEFAULT_CONTEXT = 4096  # the context a GGUF file is opened with when its own is longer (memory: the KV cache)


def runtime_of(path: Path) -> str | None:
    """llama.cpp for a .gguf file, onnxruntime-genai for a folder with genai_config.json, else None."""
    if path.is_file() and path.suffix == ".gguf":
        return "llama.cpp"
    if path.is_dir() and (path / "genai_config.json").is_file():
        return "onnxruntime-genai"
    return None


def _tokenizer(folder: Path, what: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds
        raise JobFailed(f"No tokenizer beside {what} ({str(exc).splitlines()[0][:200]})",
                        "Put the model's tokenizer files (tokenizer.json, tokenizer_config.json) in the same folder; "
                        "an Ember export writes them there.") from exc


def _gguf_context(path: Path) -> int:
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        for name, f in reader.fields.items():
            if name.endswith(".context_length"):
                return int(f.parts[f.data[0]][0])
    except Exception:  # noqa: BLE001 - an unreadable header: the default context
        pass
    return DEFAULT_CONTEXT


def open_file(path: Path) -> RuntimeChat:
    """A chat model for a GGUF file or an ONNX-GenAI folder; JobFailed naming what is missing."""
    from engine.export.llm_check import GenaiRuntime, LlamaCppRuntime

    runtime = runtime_of(path)
    if runtime == "llama.cpp":
        try:
            context = min(_gguf_context(path), DEFAULT_CONTEXT)
            rt: Any = LlamaCppRuntime(path, context, all_positions=False)
        except ImportError as exc:
            raise JobFailed("llama.cpp (llama-cpp-python) is not installed here",
                            "Run `bash scripts/llama_cpp.sh` once, then open the file again.") from exc
        except (ValueError, RuntimeError) as exc:
            raise JobFailed(f"llama.cpp cannot open {path.name}: {exc}", "Check that the file is a whole GGUF "
                            "model (its download or export finished).") from exc
        return RuntimeChat(rt, _tokenizer(path.parent, path.name), context, runtime)
    if runtime == "onnxruntime-genai":
        config = json.loads((path / "genai_config.json").read_text())
        context = min(int((config.get("model") or {}).get("context_length") or DEFAULT_CONTEXT), DEFAULT_CONTEXT)
        try:
            rt = GenaiRuntime(path, context)
        except ImportError as exc:
            raise JobFailed("onnxruntime-genai is not installed here", "pip install onnxruntime-genai "
                            "(Python 3.11 or newer)") from exc
        return RuntimeChat(rt, _tokenizer(path, path.name), context, runtime)
    raise JobFailed(f"{path} is neither a .gguf file nor an ONNX-GenAI folder", "Pick a model folder, a .gguf file "
                    "or a folder with genai_config.json.")


def pick(logits: Any, settings: GenerateSettings, rng: Any, seen: list[int]) -> int:
    """The next token: greedy at temperature 0, else sampled as transformers samples."""
    import numpy as np

    if settings.temperature == 0 and settings.repetition_penalty == 1.0:
        return int(np.argmax(logits))  # greedy: no copy of the vocabulary-wide row, every token counts
    scores = np.asarray(logits, dtype=np.float64).copy()
    if settings.repetition_penalty != 1.0 and seen:
        ids = np.unique(np.asarray(seen))
        picked = scores[ids]
        scores[ids] = np.where(picked > 0, picked / settings.repetition_penalty, picked * settings.repetition_penalty)
    if settings.temperature == 0:
        return int(np.argmax(scores))
    scores = scores / settings.temperature
    if settings.top_k:
        kth = np.partition(scores, -settings.top_k)[-settings.top_k]
        scores[scores < kth] = -np.inf
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    if settings.top_p < 1.0:
        order = np.argsort(-probs)
        cut = int(np.searchsorted(np.cumsum(probs[order]), settings.top_p)) + 1
        keep = np.zeros_like(probs)
        keep[order[:cut]] = probs[order[:cut]]
        probs = keep / keep.sum()
    return int(rng.choice(len(probs), p=probs))


class RuntimeChat(ChatModel):
    """ChatModel's prompt building and streaming over another runtime's logits."""

    def __init__(self, runtime: Any, tokenizer: Any, context: int, runtime_name: str):
        self.rt, self.tokenizer, self.context, self.runtime = runtime, tokenizer, context, runtime_name
        self.model, self.device = None, "cpu"
        self.stop_event = threading.Event()
        eos = tokenizer.eos_token_id
        self.eos = {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None}

    def _tokens(self, ids: list[int], settings: GenerateSettings, rng: Any, room: int, generated: list[int]) -> Any:
        """The answer's tokens one by one: the runtime's own greedy search where it has one (no logits copied),
        else the logits of each step and ``pick``."""
        if settings.temperature == 0 and settings.repetition_penalty == 1.0 and hasattr(self.rt, "greedy_tokens"):
            yield from self.rt.greedy_tokens(ids, room)
            return
        penalty = settings.repetition_penalty != 1.0
        logits = self.rt.prefill(ids)
        while True:
            token = pick(logits, settings, rng, ids + generated if penalty else [])
            yield token
            logits = self.rt.step(token)

    def generate(self, ids: list[int], warnings: list[str], settings: GenerateSettings,
                 on_text: Callable[[str], None] = lambda _t: None) -> Answer:
        import numpy as np

        self.stop_event.clear()
        answer = Answer(prompt_tokens=len(ids), warnings=warnings)
        t0 = time.perf_counter()
        streamer = _Streamer(self.tokenizer, answer, on_text, list(settings.stop), t0)
        streamer.put(np.asarray(ids))  # the prompt: not text to stream
        rng = np.random.default_rng(settings.seed)
        room = max(1, min(settings.max_new_tokens, self.context - len(ids)))
        generated: list[int] = []
        ended = False
        for token in self._tokens(list(ids), settings, rng, room, generated):
            generated.append(token)
            streamer.put(np.asarray([token]))
            if token in self.eos:
                ended = True
                break
            if self.stop_event.is_set() or streamer.hit_stop or len(generated) >= room:
                break
        answer.seconds = time.perf_counter() - t0
        streamer.end()
        if self.stop_event.is_set():
            answer.stopped = "user"
        elif streamer.hit_stop:
            answer.stopped = "stop_sequence"
        elif ended:
            answer.stopped = "eos"
        return answer
