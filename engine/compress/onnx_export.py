"""ONNX export of a plain fp32 CPU model, checked against ONNX Runtime.

``export_onnx`` writes one self-contained ``.onnx`` file whose single output is
``logits`` and whose batch axis (and sequence axis, for text) is dynamic:

- text_classification: ``input_ids``, ``attention_mask`` (+ ``token_type_ids`` when the
  batch has them) -> ``logits`` [B, C];
- image_classification: ``pixel_values`` -> ``logits`` [B, C];
- causal_lm: ``input_ids``, ``attention_mask`` -> ``logits`` [B, T, V].

Exporter: the TorchScript exporter (``dynamo=False``) first. On torch 2.14 both
exporters give MatMul/Gemm nodes whose weights are initializers, which is what ONNX
Runtime's quantizer needs, but the TorchScript one is the better fit here:

- its node names follow the module path (``/model/bert/encoder/layer.0/attention/self/query/MatMul``),
  which is what a user reads when choosing nodes to keep in float; the dynamo exporter
  names them ``node_MatMul_82``;
- it exports at opset 17 directly (the dynamo exporter starts at 18 and converts down)
  and constant-folds (BatchNorm folded into Conv), so the graph needs no clean-up;
- it is quicker: MiniLM took 1.8 s against 9.7 s for the dynamo exporter on a busy CPU.

Both graphs quantize alike (MiniLM dynamic int8: 0.253x vs 0.252x of fp32, the same 38
MatMulInteger nodes), so the choice is about names, opset and time.

It is deprecated upstream, so a model it cannot trace falls back to the dynamo
exporter (``exporter`` in the result says which one ran; the fallback exported MiniLM,
the digits CNN and tiny-llama with parity within 4e-7 when tried by hand). Either way the file is
run with ONNX Runtime on the example batch and on a batch of another size (and a
shorter sequence, with padding) and compared with torch; a difference above
``TOLERANCE`` fails the export, so a trace that baked in a shape is caught here.

torch, onnx and onnxruntime are imported inside functions (the engine imports this
module and must start fast).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.evaluate.runners import SLOW_CPU_FUSIONS
from engine.threads import cap
from engine.training.context import JobFailed

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime as ort
    import torch

TASKS = ("text_classification", "image_classification", "causal_lm")
TOLERANCE = 1e-3  # max abs logit difference between torch and ONNX Runtime (fp32, CPU)
TWO_GB = 2 * 1024**3  # protobuf's limit: above it the weights must live in external data
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def input_names(task_name: str, batch: dict[str, Any]) -> list[str]:
    """The model inputs for ``task_name``, in order, from the keys of a collated batch."""
    if task_name == "image_classification":
        names = ["pixel_values"]
    elif task_name == "causal_lm":
        names = ["input_ids", "attention_mask"]
    elif task_name == "text_classification":
        names = ["input_ids", "attention_mask"] + (["token_type_ids"] if "token_type_ids" in batch else [])
    else:
        raise JobFailed(f"ONNX export does not support the task {task_name!r}", f"use one of: {', '.join(TASKS)}")
    missing = [k for k in names if k not in batch]
    if missing:
        raise JobFailed(f"the example batch for {task_name} has no {', '.join(missing)}",
                        "pass a batch made by the task's collate (data.collate([...])).")
    return names


def logits_wrapper(model: torch.nn.Module, task_name: str, names: list[str]) -> torch.nn.Module:
    """A module whose positional inputs are ``names`` and whose single output is the logits tensor."""
    from torch import nn

    def logits(out: Any) -> Any:
        return out if not hasattr(out, "logits") else out.logits

    if task_name == "image_classification":
        class Image(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.model = m

            def forward(self, pixel_values):
                return logits(self.model(pixel_values))

        return Image(model).eval()

    if task_name == "causal_lm":
        class Causal(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.model = m

            def forward(self, input_ids, attention_mask):
                return logits(self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False))

        return Causal(model).eval()

    class Text(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.model = m

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            return logits(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                     token_type_ids=token_type_ids))

    return Text(model).eval()


def _dynamic_axes(task_name: str, names: list[str]) -> dict[str, dict[int, str]]:
    if task_name == "image_classification":
        axes = {"pixel_values": {0: "batch"}}
    else:
        axes = {k: {0: "batch", 1: "sequence"} for k in names}
    axes["logits"] = {0: "batch", 1: "sequence"} if task_name == "causal_lm" else {0: "batch"}
    return axes


def _export_torchscript(wrapper, args, path: Path, names, task_name, opset) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notice and tracer warnings; parity is checked below
        torch.onnx.export(wrapper, args, str(path), input_names=names, output_names=["logits"],
                          dynamic_axes=_dynamic_axes(task_name, names), opset_version=opset,
                          do_constant_folding=True, dynamo=False)


def _export_dynamo(wrapper, args, path: Path, names, task_name, opset) -> None:
    import torch

    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("sequence")
    shapes = {k: ({0: batch} if task_name == "image_classification" else {0: batch, 1: seq}) for k in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(wrapper, args, input_names=names, output_names=["logits"],
                                 dynamic_shapes=shapes, opset_version=max(opset, 18), dynamo=True,
                                 optimize=True, verbose=False)
    prog.save(str(path), external_data=False)


def _self_contained(path: Path) -> None:
    """Fold external data back into the file when the model is small enough for one protobuf."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    external = [t for t in model.graph.initializer if uses_external_data(t)]
    if not external:
        return
    model = onnx.load(str(path))
    if model.ByteSize() < TWO_GB:
        files = {e.value for t in external for e in t.external_data if e.key == "location"}
        for t in model.graph.initializer:
            if uses_external_data(t):
                t.data_location = onnx.TensorProto.DEFAULT
                del t.external_data[:]
        onnx.save(model, str(path))
        for name in files:
            with contextlib.suppress(OSError):
                (path.parent / name).unlink()


def feeds(input_names: list[str] | tuple[str, ...], batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """ONNX Runtime inputs from a collated batch (torch tensors or arrays): int64 ids/masks, float32 pixels.

    Keys the model does not take (``labels``) are left out.
    """
    import numpy as np

    out = {}
    for name in input_names:
        if name not in batch:
            raise JobFailed(f"the batch has no {name!r}, which the ONNX model needs",
                            f"the model's inputs are {', '.join(input_names)}; use batches from the task's collate.")
        value = batch[name]
        value = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        # ids and masks are int64 in the exported graph (torch's default); everything else float32
        out[name] = np.ascontiguousarray(value, dtype=np.int64 if value.dtype.kind in "iub" else np.float32)
    return out


def session(path: str | Path, threads: int = 0, provider: str = "cpu") -> ort.InferenceSession:
    """An ONNX Runtime session with all graph optimizations; ``threads`` = 0: ``OMP_NUM_THREADS`` if set
    (engine/threads.py), else ORT's default."""
    import onnxruntime as ort

    if provider not in PROVIDERS:
        raise JobFailed(f"unknown ONNX Runtime provider {provider!r}", f"use one of: {', '.join(PROVIDERS)}")
    available = ort.get_available_providers()
    if PROVIDERS[provider] not in available:
        raise JobFailed(f"ONNX Runtime here has no {PROVIDERS[provider]} (it has {', '.join(available)})",
                        "install onnxruntime-gpu built for this machine's CUDA version (in place of onnxruntime), "
                        "or run on provider 'cpu'.")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(0, int(threads)) or cap()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # errors only: ORT's warnings are about its own choices
    providers = [PROVIDERS[provider]] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    try:
        return ort.InferenceSession(str(path), opts, providers=providers,
                                    disabled_optimizers=SLOW_CPU_FUSIONS if provider == "cpu" else None)
    except Exception as exc:  # ORT raises its own exception types (InvalidGraph, Fail, NoSuchFile, ...)
        raise JobFailed(f"ONNX Runtime cannot load {path}: {str(exc).strip()[:400]}",
                        "the file is not a valid ONNX model for this ONNX Runtime; export it again.") from exc


def _variant(task_name: str, batch: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The example batch at another batch size and, for text, a shorter sequence with padding in it."""
    import torch

    b = batch[names[0]].shape[0]
    rows = list(range(b - 1)) if b > 2 else [i % b for i in range(b + 1)]
    out = {k: batch[k][rows] for k in names}
    if task_name != "image_classification":
        t = out["input_ids"].shape[1]
        if t > 2:
            keep = t - max(1, t // 4)
            out = {k: v[:, :keep].clone() for k, v in out.items()}
        if "attention_mask" in out:
            mask = out["attention_mask"]
            if mask.shape[1] > 2:
                mask[-1, mask.shape[1] // 2:] = 0  # padding in one row, whatever the example batch had
            mask[mask.sum(1) == 0, 0] = 1  # no row fully masked
            out["attention_mask"] = mask
    return {k: v if hasattr(v, "detach") else torch.as_tensor(v) for k, v in out.items()}


def _max_diff(a, b) -> float:
    import numpy as np

    if a.shape != b.shape:
        return float("inf")
    fa, fb = np.isfinite(a), np.isfinite(b)
    if (fa != fb).any():
        return float("inf")
    return float(np.abs(a[fa] - b[fb]).max()) if fa.any() else 0.0


def export_onnx(model: torch.nn.Module, task_name: str, example_batch: dict[str, Any], path: str | Path,
                opset: int = 17) -> dict[str, Any]:
    """Export ``model`` to ``path`` and check it against ONNX Runtime; see the module docstring."""
    import torch

    path = Path(path)
    names = input_names(task_name, example_batch)
    model = model.eval()
    wrapper = logits_wrapper(model, task_name, names)
    args = tuple(example_batch[k] for k in names)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    exporter, errors = None, []
    try:
        for name, fn in (("torchscript", _export_torchscript), ("dynamo", _export_dynamo)):
            try:
                with torch.no_grad():
                    fn(wrapper, args, tmp, names, task_name, opset)
                exporter = name
                break
            except Exception as exc:  # noqa: BLE001 - either exporter raises many kinds; the next one is tried
                errors.append(f"{name}: {' '.join(str(exc).split())[:300]}")
        if exporter is None:
            raise JobFailed(f"ONNX export of the {task_name} model failed: {'; '.join(errors)}",
                            "the model uses an operation neither ONNX exporter can trace; "
                            "report this with the run's spec.yaml.")
        _self_contained(tmp)

        sess = session(tmp)
        outputs = [o.name for o in sess.get_outputs()]
        max_diff = 0.0
        for batch in (example_batch, _variant(task_name, example_batch, names)):
            with torch.no_grad():
                ref = wrapper(*(batch[k] for k in names)).float().numpy()
            got = sess.run(["logits"], feeds(names, batch))[0]
            max_diff = max(max_diff, _max_diff(ref, got))
        if not max_diff <= TOLERANCE:
            raise JobFailed(f"the ONNX model's logits differ from torch's by {max_diff:.3g} "
                            f"(tolerance {TOLERANCE:g}; {exporter} exporter, opset {opset})",
                            "the export traced something that depends on the example's shape or values; "
                            "try another opset, or report this with the run's spec.yaml.")
        del sess
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    import onnx

    opset_done = next((o.version for o in onnx.load(str(path), load_external_data=False).opset_import
                       if o.domain in ("", "ai.onnx")), opset)
    return {"path": str(path), "inputs": names, "outputs": outputs, "opset": opset_done,
            "bytes": path.stat().st_size, "max_abs_diff": max_diff, "exporter": exporter}
