"""A language model in one runtime: greedy answers and perplexity on the same token ids (docs/export.md).

The export job checks each language-model format in a fresh process with its own runtime:

    python -m engine.export.llm_check RUNTIME PATH CASES OUT

RUNTIME is ``transformers`` (a Hugging Face folder, or a LoRA adapter folder beside its base),
``onnxruntime-genai`` (a folder the model builder wrote) or ``llama.cpp`` (a .gguf file). CASES is a JSON file
``{"prompts": [[ids]], "texts": [[ids]], "max_new_tokens": N, "eos": [ids], "n_ctx": N, "batch": B}`` tokenized
once by the source model's tokenizer, so every runtime reads exactly the same tokens. OUT gets ``{"tokens":
[[ids]], "nll": .., "count": .., "perplexity": .., "load_s": .., "ttft_s": .., "tokens_per_s": ..,
"batch": B, "batch_tokens_per_s": .., "peak_rss_bytes": ..}``.

Every runtime answers through the same loop (``greedy``): the prompt in one call, then one token at a time
with the runtime's own key/value cache, the most likely token each step, up to an end-of-sequence id.
The job runs the source model in PyTorch through the same loop for its reference.

While it runs, each step is a JSON line on stdout (``{"progress": "answering prompt 3 of 8"}``), which the job
shows as the stage's progress.

``batched``: B requests at once, as a server that batches them runs them: the first prompt B times, prefilled
together, then B tokens a step (one forward pass each) for ``max_new_tokens`` steps, the end-of-sequence id
not stopping any; tokens/s counts all B sequences' tokens over the whole time, prefill included.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

from engine.threads import cap, cpu_threads

RUNTIMES = ("transformers", "onnxruntime-genai", "llama.cpp")


class Runtime(Protocol):
    def prefill(self, ids: list[int]) -> Any: ...  # the next-token logits after ``ids`` (a fresh sequence)
    def step(self, token: int) -> Any: ...  # the next-token logits after one more token
    def all_logits(self, ids: list[int]) -> Any: ...  # logits at every position of ``ids`` (a fresh sequence)
    def batched(self, ids: list[int], n: int, new: int) -> int: ...  # ``ids`` n times, ``new`` tokens each: tokens made


class TorchRuntime:
    """A transformers model in memory (the job's reference) or loaded from a folder (the hf format)."""

    def __init__(self, model: Any):
        self.model, self.past = model.eval(), None

    @classmethod
    def open(cls, path: Path) -> TorchRuntime:
        from transformers import AutoModelForCausalLM

        adapter = path / "adapter_config.json"
        if adapter.is_file():  # a LoRA adapter kept separate: its base folder, then the adapter on top
            from peft import PeftModel

            base = json.loads(adapter.read_text())["base_model_name_or_path"]
            model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, dtype="float32")
            return cls(PeftModel.from_pretrained(model, str(path)))
        return cls(AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype="float32"))

    def _run(self, ids: list[int], past: Any) -> Any:
        import torch

        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids]), past_key_values=past, use_cache=True)
        self.past = out.past_key_values
        return out.logits[0].float().numpy()

    def prefill(self, ids: list[int]) -> Any:
        return self._run(ids, None)[-1]

    def step(self, token: int) -> Any:
        return self._run([token], self.past)[-1]

    def all_logits(self, ids: list[int]) -> Any:
        return self._run(ids, None)

    def batched(self, ids: list[int], n: int, new: int) -> int:
        import torch

        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids] * n), use_cache=True)
            for _ in range(new - 1):
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                out = self.model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
        return n * new


class GenaiRuntime:
    """ONNX Runtime GenAI: the model builder's decoder with its key/value cache."""

    def __init__(self, path: Path, n_ctx: int):
        import onnxruntime_genai as og

        config = og.Config(str(path))
        if cap():  # the session's intra-op pool, otherwise one thread per core (engine/threads.py)
            config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": cap()}}}}))
        self.og, self.model, self.n_ctx, self.gen = og, og.Model(config), n_ctx, None

    def _generator(self) -> Any:
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, max_length=self.n_ctx)
        return self.og.Generator(self.model, params)

    def _append(self, ids: list[int]) -> Any:
        import numpy as np

        self.gen.append_tokens(np.asarray([ids], dtype=np.int32))
        return np.asarray(self.gen.get_output("logits"))[0]

    def prefill(self, ids: list[int]) -> Any:
        self.gen = self._generator()
        return self._append(ids)[-1]

    def step(self, token: int) -> Any:
        return self._append([token])[-1]

    def all_logits(self, ids: list[int]) -> Any:
        self.gen = self._generator()
        return self._append(ids)

    def greedy_tokens(self, ids: list[int], limit: int) -> Any:
        """Greedy tokens from ONNX Runtime GenAI's own search (no logits copied out): what serving uses."""
        import numpy as np

        params = self.og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, max_length=min(self.n_ctx, len(ids) + limit))
        self.gen = self.og.Generator(self.model, params)
        self.gen.append_tokens(np.asarray([ids], dtype=np.int32))
        while not self.gen.is_done():
            self.gen.generate_next_token()
            yield int(self.gen.get_next_tokens()[0])

    def batched(self, ids: list[int], n: int, new: int) -> int:
        import numpy as np

        params = self.og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, batch_size=n, max_length=len(ids) + new,
                                  min_length=len(ids) + new)  # no sequence ends at end-of-sequence
        gen = self.og.Generator(self.model, params)
        gen.append_tokens(np.asarray([ids] * n, dtype=np.int32))
        steps = 1  # append_tokens computed the first token's logits; each generate_next_token picks one
        while not gen.is_done():
            gen.generate_next_token()
            steps += 1
        return n * min(steps, new)


class LlamaCppRuntime:
    """llama.cpp through its Python bindings: the .gguf file; every position's logits kept when
    ``all_positions`` (perplexity), else only the last one's (serving: an n_ctx x vocabulary array less)."""

    def __init__(self, path: Path, n_ctx: int, all_positions: bool = True):
        from llama_cpp import Llama

        self.all_positions = all_positions
        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, logits_all=all_positions, verbose=False,
                         n_threads=cpu_threads(), n_threads_batch=cpu_threads())

    def _last(self) -> Any:
        if self.all_positions:
            return self.llm.scores[self.llm.n_tokens - 1]
        import numpy as np

        # A view of llama.cpp's own buffer: read before the next eval overwrites it (the token is picked first).
        return np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.llm.n_vocab(),))

    def prefill(self, ids: list[int]) -> Any:
        self.llm.reset()
        self.llm.eval(ids)
        return self._last()

    def step(self, token: int) -> Any:
        self.llm.eval([token])
        return self._last()

    def all_logits(self, ids: list[int]) -> Any:
        self.llm.reset()
        self.llm.eval(ids)
        return self.llm.scores[: len(ids)]

    def batched(self, ids: list[int], n: int, new: int) -> int:
        """n sequences in one llama.cpp context (a sequence id each), decoded together a step at a time."""
        import numpy as np
        from llama_cpp import _internals

        base = self.llm.context_params
        params = type(base).from_buffer_copy(base)
        per_sequence = -(-(len(ids) + new + 8) // 256) * 256  # llama.cpp rounds each sequence's share to 256
        params.n_seq_max, params.n_ctx = n, n * per_sequence
        params.n_batch = max(n * len(ids), n)  # every prompt's tokens go in one decode call
        params.n_ubatch = min(params.n_batch, 512)
        vocab = self.llm.n_vocab()
        with closing(_internals.LlamaContext(model=self.llm._model, params=params, verbose=False)) as ctx, \
                closing(_internals.LlamaBatch(n_tokens=max(n * len(ids), n), embd=0, n_seq_max=n, verbose=False)) as batch:
            for seq in range(n):
                batch.add_sequence(ids, seq, False)
            ctx.decode(batch)
            last = [len(ids) * (seq + 1) - 1 for seq in range(n)]  # where each sequence's logits are
            for step in range(new - 1):
                picked = [int(np.argmax(np.ctypeslib.as_array(ctx.get_logits_ith(i), shape=(vocab,)))) for i in last]
                raw = batch.batch
                raw.n_tokens = n
                for seq, token in enumerate(picked):
                    raw.token[seq], raw.pos[seq], raw.seq_id[seq][0] = token, len(ids) + step, seq
                    raw.n_seq_id[seq], raw.logits[seq] = 1, True
                ctx.decode(batch)
                last = list(range(n))
        return n * new


def open_runtime(runtime: str, path: Path, n_ctx: int) -> Runtime:
    if runtime == "transformers":
        return TorchRuntime.open(path)
    if runtime == "onnxruntime-genai":
        return GenaiRuntime(path, n_ctx)
    if runtime == "llama.cpp":
        return LlamaCppRuntime(path, n_ctx)
    raise ValueError(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")


def greedy(rt: Runtime, ids: list[int], max_new_tokens: int, eos: set[int]) -> tuple[list[int], float, float]:
    """(the answer's token ids, seconds to the first token, seconds in all)."""
    import numpy as np

    t0 = time.perf_counter()
    logits, out, first = rt.prefill(ids), [], 0.0
    for _ in range(max_new_tokens):
        token = int(np.argmax(logits))
        out.append(token)
        if len(out) == 1:
            first = time.perf_counter() - t0
        if token in eos or len(out) == max_new_tokens:
            break
        logits = rt.step(token)
    return out, first, time.perf_counter() - t0


def nll(rt: Runtime, ids: list[int]) -> tuple[float, int]:
    """(the summed negative log-likelihood of ids[1:], the number of tokens scored)."""
    import numpy as np

    if len(ids) < 2:
        return 0.0, 0
    logits = np.asarray(rt.all_logits(ids), dtype=np.float64)[:-1]
    top = logits.max(axis=-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    target = np.asarray(ids[1:])
    return float(-logp[np.arange(len(target)), target].sum()), len(target)


def measure(rt: Runtime, cases: dict[str, Any], load_s: float = 0.0,
            say: Callable[[str], None] = lambda _text: None) -> dict[str, Any]:
    """Greedy answers to every prompt and the perplexity of every text, with the speed figures; ``say`` hears
    where it is ('prompt 3 of 8'), as a long check must show it is moving."""
    eos = {int(i) for i in cases.get("eos") or []}
    tokens, ttft, new, gen_s = [], [], 0, 0.0
    for i, ids in enumerate(cases["prompts"]):
        say(f"answering prompt {i + 1} of {len(cases['prompts'])}")
        out, first, seconds = greedy(rt, list(ids), int(cases["max_new_tokens"]), eos)
        tokens.append(out)
        ttft.append(first)
        new, gen_s = new + len(out), gen_s + seconds
    total, count = 0.0, 0
    for j, ids in enumerate(cases["texts"]):
        say(f"scoring conversation {j + 1} of {len(cases['texts'])}")
        s, n = nll(rt, list(ids))
        total, count = total + s, count + n
    ttft.sort()
    batch = int(cases.get("batch") or 0)
    batch_tps = None
    if batch > 1 and cases["prompts"]:
        say(f"timing {batch} requests at once")
        t0 = time.perf_counter()
        made = rt.batched(list(cases["prompts"][0]), batch, int(cases["max_new_tokens"]))
        batch_tps = made / (time.perf_counter() - t0)
    return {"tokens": tokens, "nll": total, "count": count, "batch": batch, "batch_tokens_per_s": batch_tps,
            "perplexity": math.exp(total / count) if count else None, "load_s": round(load_s, 3),
            "ttft_s": ttft[len(ttft) // 2] if ttft else None,
            "tokens_per_s": new / gen_s if gen_s > 0 else None,
            "peak_rss_bytes": peak_rss_bytes()}


def peak_rss_bytes() -> int:
    """This process's peak resident memory: Linux's VmHWM, which starts again at exec (ru_maxrss does not: a
    check started from the job would report the job's own peak, torch and the source model included)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def compare(reference: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """How a format's answers and perplexity stand against the reference's."""
    ref_tokens, tokens = reference["tokens"], got["tokens"]
    same = sum(1 for a, b in zip(ref_tokens, tokens, strict=True) if a == b)
    first_diff = []
    for a, b in zip(ref_tokens, tokens, strict=True):
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        first_diff.append(None if a == b else n)
    matched = sum(min(len(a), d if d is not None else len(a)) for a, d in zip(ref_tokens, first_diff, strict=True))
    ppl, ref_ppl = got.get("perplexity"), reference.get("perplexity")
    return {"prompts": len(ref_tokens), "identical_answers": same,
            "token_agreement": matched / max(1, sum(len(a) for a in ref_tokens)),
            "first_difference": first_diff, "perplexity": ppl, "reference_perplexity": ref_ppl,
            "perplexity_change": (ppl / ref_ppl - 1) if ppl and ref_ppl else None}


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        sys.stderr.write(str(__doc__))
        return 2
    runtime, path, cases_file, out = argv[0], Path(argv[1]), Path(argv[2]), Path(argv[3])
    cases = json.loads(cases_file.read_text())
    t0 = time.perf_counter()
    try:
        rt = open_runtime(runtime, path, int(cases.get("n_ctx") or 2048))
    except ImportError as exc:
        sys.stderr.write(f"The {runtime} runtime is not installed here ({exc})\n")
        return 3
    def say(text: str) -> None:  # the job reads stdout's JSON lines as the check's progress
        sys.stdout.write(json.dumps({"progress": text}) + "\n")
        sys.stdout.flush()

    result = measure(rt, cases, time.perf_counter() - t0, say)
    out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
