"""torch.export archive (``.pt2``): the logits wrapper exported with dynamic batch and sequence axes.

Dynamic axes are ``Dim.DYNAMIC`` rather than named ``Dim``s: a named ``Dim("sequence")``
is a constraint violation on BERT (its positions stop at 512), where ``Dim.DYNAMIC``
lets torch.export find that range itself. Loading: ``torch.export.load(path).module()``
called with the inputs of engine/compress/onnx_export.py positionally.
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


def export_pt2(model: torch.nn.Module, task_name: str, example_batch: dict[str, Any], path: str | Path, *,
               dynamic_batch: bool = True, dynamic_sequence: bool = True) -> dict[str, Any]:
    """Write ``model`` as a torch.export archive at ``path`` (temp name, then renamed)."""
    import torch

    started = time.perf_counter()
    path = Path(path)
    names = input_names(task_name, example_batch)
    wrapper = logits_wrapper(model.eval(), task_name, names)
    args = tuple(example_batch[k] for k in names)
    dyn = torch.export.Dim.DYNAMIC
    shapes = {}
    for name in names:
        axes = {}
        if dynamic_batch:
            axes[0] = dyn
        if dynamic_sequence and task_name != "image_classification":
            axes[1] = dyn
        shapes[name] = axes or None
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            program = torch.export.export(wrapper, args, dynamic_shapes=shapes)
    except Exception as exc:  # noqa: BLE001 - torch.export fails in many ways; all mean the same here
        text = " ".join(str(exc).split())[:400]
        raise JobFailed(f"torch.export of the {task_name} model failed: {text}",
                        "the model has Python control flow torch.export cannot capture; export to onnx or "
                        "torchscript instead") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")  # keeps the suffix
    try:
        torch.export.save(program, str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"path": str(path), "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - started, 3)}
