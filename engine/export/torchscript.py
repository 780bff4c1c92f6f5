"""TorchScript export: ``torch.jit.trace`` (default) or ``torch.jit.script`` of the logits wrapper.

The saved module takes the inputs of engine/compress/onnx_export.py positionally
(``input_ids, attention_mask[, token_type_ids]`` or ``pixel_values``) and returns the
logits tensor. A trace records one path through the model; parity (engine.export.parity)
runs it on batches of other sizes and lengths, so a shape baked into the trace is caught.
Scripting Hugging Face models usually fails (their Python is not TorchScript); the
error says so.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.compress.onnx_export import input_names, logits_wrapper
from engine.training.context import JobFailed

if TYPE_CHECKING:
    import torch

MODES = ("trace", "script")


def export_torchscript(model: torch.nn.Module, task_name: str, example_batch: dict[str, Any], path: str | Path,
                       mode: str = "trace") -> dict[str, Any]:
    """Write ``model`` as a TorchScript archive at ``path`` (temp name, then renamed)."""
    import torch

    if mode not in MODES:
        raise JobFailed(f"unknown TorchScript mode {mode!r}", f"use one of: {', '.join(MODES)}")
    started = time.perf_counter()
    path = Path(path)
    names = input_names(task_name, example_batch)
    wrapper = logits_wrapper(model.eval(), task_name, names)
    args = tuple(example_batch[k] for k in names)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # TracerWarnings: parity checks other shapes
            module = torch.jit.trace(wrapper, args, check_trace=False) if mode == "trace" else torch.jit.script(wrapper)
    except Exception as exc:  # noqa: BLE001 - trace and script fail in many ways; all mean the same here
        text = " ".join(str(exc).split())[:400]
        hint = ("scripting needs TorchScript-compatible Python, which Hugging Face models are not: use "
                "torchscript_mode trace" if mode == "script" else
                "the model does something tracing cannot record; export to onnx or pt2 instead")
        raise JobFailed(f"TorchScript {mode} of the {task_name} model failed: {text}", hint) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")  # keeps the suffix
    try:
        module.save(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"path": str(path), "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - started, 3),
            "mode": mode}
