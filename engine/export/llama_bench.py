"""llama.cpp's ``llama-bench -o json`` output as device figures (a language model's Jetson benchmark).

llama-bench prints a JSON array with one object per test: a prompt test (``n_prompt`` > 0, ``n_gen`` 0) and a
generation test (``n_gen`` > 0), each with ``avg_ts`` (tokens per second, the mean of its repetitions),
``stddev_ts``, ``avg_ns``, and the build and machine (``build_commit``, ``backends``, ``gpu_info``,
``model_type``, ``model_size``, ``n_gpu_layers``). The bundle's benchmark.sh prints it after a marker line.
"""

from __future__ import annotations

import json
from typing import Any

MARKER = "== llama-bench json =="


def parse_output(text: str) -> dict[str, Any]:
    """{tokens_per_s, prompt_tokens_per_s, ttft_ms, prompt_tokens, gen_tokens, backends, gpu_info, build_commit,
    model_type, model_size, n_gpu_layers}; ValueError when the text holds no llama-bench JSON."""
    body = text.split(MARKER, 1)[1] if MARKER in text else text
    start, end = body.find("["), body.rfind("]")
    if start < 0 or end < start:
        raise ValueError("no llama-bench JSON array in the output")
    try:
        tests = json.loads(body[start:end + 1])
    except ValueError as exc:
        raise ValueError(f"llama-bench's JSON is unreadable: {exc}") from None
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise ValueError("llama-bench's JSON is not a list of tests")
    prompt = next((t for t in tests if t.get("n_prompt") and not t.get("n_gen")), None)
    gen = next((t for t in tests if t.get("n_gen") and not t.get("n_prompt")), None)
    if gen is None:
        raise ValueError("llama-bench ran no generation test (-n)")
    first = prompt or gen
    out: dict[str, Any] = {"tokens_per_s": float(gen["avg_ts"]), "tokens_per_s_stddev": gen.get("stddev_ts"),
                           "gen_tokens": gen.get("n_gen")}
    if prompt is not None:
        pp = float(prompt["avg_ts"])
        out.update(prompt_tokens_per_s=pp, prompt_tokens=prompt.get("n_prompt"),
                   # the prompt read at that speed, then one token: what a chat waits before its answer starts
                   ttft_ms=round(1000 * (prompt["n_prompt"] / pp + 1 / float(gen["avg_ts"])), 2) if pp else None)
    for key in ("backends", "gpu_info", "cpu_info", "build_commit", "build_number", "model_type", "model_size",
                "n_gpu_layers"):
        if key in first:
            out[key] = first[key]
    return out
