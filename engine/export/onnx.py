"""ONNX export for deployment: dynamo exporter first, TorchScript exporter as the fallback.

Inputs and outputs are those of engine/compress/onnx_export.py (``input_ids``,
``attention_mask``, ``token_type_ids`` | ``pixel_values`` -> ``logits``), with a
dynamic ``batch`` axis and, for text, a dynamic ``sequence`` axis.

Why dynamo first (compression prefers TorchScript): this file is what ships, and the
TorchScript exporter is deprecated upstream. The dynamo exporter writes opset 18 and
converts down for older opsets; that conversion fails on some graphs (on torch 2.14 the
digits CNN at opset 17 stays at 18, silently), so the opset in the written file is
checked and the TorchScript exporter runs instead, with the reason recorded.

Dynamic axes are given as ``dynamic_axes`` (named ``batch``/``sequence``): the dynamo
exporter turns them into ``Dim.DYNAMIC`` with those names, where a plain
``Dim("sequence")`` fails on BERT's 512 positions as a constraint violation.

The file is written in a temporary folder beside the target and moved into place at
the end (weights first, model last), so a failed export leaves no half file under the
final name. Above 2 GB (protobuf's limit) the weights go to ``model.onnx.data``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.compress.onnx_export import input_names, logits_wrapper
from engine.training.context import JobFailed

if TYPE_CHECKING:
    import torch

TWO_GB = 2 * 1024**3
MIN_DYNAMO_OPSET = 18  # the dynamo exporter's own opset; lower ones are converted down
DTYPES = {1: "float32", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64", 16: "bfloat16"}
# Where the exporters name the operation they cannot translate, most specific first.
OP_PATTERNS = (
    r"Exporting the operator '([^']+)'",  # TorchScript exporter
    r"No ONNX function found for <OpOverload\(op='([^']+)'",  # dynamo exporter
    r"target=torch\.ops\.([\w.]+?)(?:\.default)?\]",
    r"\b((?:aten|prims)(?:::|\.)\w+)",
)
UNSUPPORTED_HINT = ("the model uses an operation neither ONNX exporter can translate: replace it in the model with "
                    "supported ones, or export to torchscript or pt2 instead")


def dynamic_axes(task_name: str, names: list[str], dynamic_batch: bool, dynamic_sequence: bool
                 ) -> dict[str, dict[int, str]]:
    """Named dynamic axes for every input and ``logits`` (none for an axis that is fixed)."""
    text = task_name != "image_classification"
    axes: dict[str, dict[int, str]] = {}
    for name in [*names, "logits"]:
        ax: dict[int, str] = {}
        if dynamic_batch:
            ax[0] = "batch"
        if text and dynamic_sequence and (name != "logits" or task_name == "causal_lm"):
            ax[1] = "sequence"
        if ax:
            axes[name] = ax
    return axes


def failed_op(text: str) -> str | None:
    """The operation an exporter error names, e.g. ``aten::kthvalue``; None when it names none."""
    for pattern in OP_PATTERNS:
        found = re.search(pattern, text)
        if found:
            return found.group(1)
    return None


def _short(exc: BaseException) -> str:
    """One line of an exporter error; the dynamo exporter's is its "Exception summary", after generic advice."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if "## Exception summary" in text:
        text = text.split("## Exception summary", 1)[1].split("(Refer to the full stack trace", 1)[0]
    return " ".join(text.split())[:400]


def _exception_text(exc: BaseException) -> str:
    """The exception and its causes: the dynamo exporter names the operation in a cause's message."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def _weights_bytes(model: torch.nn.Module) -> int:
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _file_opset(path: Path) -> int | None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _dynamo(wrapper, args, path: Path, names, axes, opset: int, external: bool) -> None:
    import torch

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(wrapper, args, input_names=names, output_names=["logits"],
                                 dynamic_axes=axes or None, opset_version=opset, dynamo=True, optimize=True,
                                 verbose=False)
    if prog is None:
        raise RuntimeError("the dynamo exporter returned no program")
    prog.save(str(path), external_data=external)
    got = _file_opset(path)
    if got != opset:
        # The converter logs its failure and keeps opset 18; an opset-18 file would fail older runtimes.
        raise RuntimeError(f"it could not convert the graph from opset {MIN_DYNAMO_OPSET} down to {opset} "
                           f"(the file stayed at opset {got})")


def _torchscript(wrapper, args, path: Path, names, axes, opset: int, external: bool) -> None:
    import torch

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")  # the deprecation notice and tracer warnings; parity checks the result
        torch.onnx.export(wrapper, args, str(path), input_names=names, output_names=["logits"],
                          dynamic_axes=axes or None, opset_version=opset, do_constant_folding=True, dynamo=False)
    if external:
        # The TorchScript exporter writes one file per large tensor; gather them into model.onnx.data.
        import onnx

        model = onnx.load(str(path))
        for f in path.parent.iterdir():
            if f != path:
                f.unlink()
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=1024)


def _slim(path: Path) -> dict[str, int]:
    import onnx
    import onnxslim

    model = onnx.load(str(path))
    before = len(model.graph.node)
    with contextlib.redirect_stdout(io.StringIO()):
        slimmed = onnxslim.slim(model)
    if slimmed is None:
        raise JobFailed("onnxslim returned no model", "export again with slim off")
    _save(slimmed, path)
    return {"nodes_before": before, "nodes_after": len(slimmed.graph.node)}


def _save(model, path: Path) -> None:
    import onnx

    if model.ByteSize() < TWO_GB and not (path.parent / (path.name + ".data")).exists():
        onnx.save_model(model, str(path))
    else:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=1024)


def _set_metadata(path: Path, metadata: dict[str, str]) -> None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)  # external weights stay where they are
    keep = [p for p in model.metadata_props if p.key not in metadata]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for key, value in metadata.items():
        model.metadata_props.add(key=str(key), value=str(value))
    onnx.save_model(model, str(path))


def _value_info(values) -> list[dict[str, Any]]:
    out = []
    for v in values:
        t = v.type.tensor_type
        shape = [d.dim_param if d.dim_param else int(d.dim_value) for d in t.shape.dim]
        out.append({"name": v.name, "dtype": DTYPES.get(t.elem_type, str(t.elem_type)), "shape": shape})
    return out


def export_onnx(model: torch.nn.Module, task_name: str, example_batch: dict[str, Any], path: str | Path, *,
                opset: int = 18, dynamic_batch: bool = True, dynamic_sequence: bool = True,
                metadata: dict[str, str] | None = None, slim: bool = False) -> dict[str, Any]:
    """Write ``model`` as ONNX at ``path``; see the module docstring. Parity is checked by engine.export.parity."""
    import onnx
    import torch

    started = time.perf_counter()
    path = Path(path)
    names = input_names(task_name, example_batch)
    wrapper = logits_wrapper(model.eval(), task_name, names)
    args = tuple(example_batch[k] for k in names)
    axes = dynamic_axes(task_name, names, dynamic_batch, dynamic_sequence)
    external = _weights_bytes(model) >= TWO_GB
    path.parent.mkdir(parents=True, exist_ok=True)
    work = path.parent / f".{path.name}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        exporter, fallback_reason, errors = None, None, []
        for name, fn in (("dynamo", _dynamo), ("torchscript", _torchscript)):
            if work.exists():
                shutil.rmtree(work)
            work.mkdir()
            try:
                with torch.no_grad():
                    fn(wrapper, args, work / path.name, names, axes, opset, external)
                exporter = name
                break
            except Exception as exc:  # noqa: BLE001 - each exporter raises many kinds; the next one is tried
                errors.append((name, exc))
        if exporter is None:
            text = "\n".join(_exception_text(e) for _, e in errors)
            op = failed_op(text)
            what = f"the operation {op}" if op else "an operation"
            raise JobFailed(f"ONNX export of the {task_name} model failed: {what} is not supported by either "
                            f"exporter at opset {opset} ({'; '.join(f'{n}: {_short(e)}' for n, e in errors)})",
                            UNSUPPORTED_HINT)
        if errors:
            fallback_reason = f"dynamo exporter: {_short(errors[0][1])}"
        tmp = work / path.name
        slimmed = _slim(tmp) if slim else None
        if metadata:
            _set_metadata(tmp, metadata)
        graph = onnx.load(str(tmp), load_external_data=False).graph
        inputs, outputs = _value_info(graph.input), _value_info(graph.output)
        opset_done = _file_opset(tmp)
        # Weights first, the model last: a model.onnx under the final name is always complete.
        files = []
        data = work / (path.name + ".data")
        if data.exists():
            os.replace(data, path.parent / data.name)
            files.append(str(path.parent / data.name))
        else:
            with contextlib.suppress(OSError):
                (path.parent / data.name).unlink()  # a stale one from an earlier, larger export
        os.replace(tmp, path)
        files.insert(0, str(path))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"path": str(path), "files": files, "inputs": inputs, "outputs": outputs, "opset": opset_done,
            "exporter": exporter, "fallback_reason": fallback_reason,
            "bytes": sum(Path(f).stat().st_size for f in files), "seconds": round(time.perf_counter() - started, 3),
            "slimmed": slimmed}


def _opset_of(model) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def copy_variant(src: str | Path, dst: str | Path, metadata: dict[str, str], opset: int) -> dict[str, Any]:
    """A quantized variant's ONNX model (written by the compression job) at ``dst``, with Ember's metadata,
    converted to ``opset`` with ONNX's version converter when the file has another one.

    The asked opset is applied or the export stops: a file at another opset than the spec says would break a
    runtime that reads only older ones, unannounced. ``converted_from`` is the file's own opset (None when the
    file already had the asked one)."""
    import onnx

    from engine.export.triton import model_io

    started = time.perf_counter()
    src, dst = Path(src), Path(dst)
    model = onnx.load(str(src))
    own = _opset_of(model)
    converted_from = None
    if own is not None and own != opset:
        from onnx import version_converter

        try:
            converted = version_converter.convert_version(model, opset)
            if converted.ByteSize() < TWO_GB:  # the checker cannot read a larger proto in memory
                onnx.checker.check_model(converted)
        except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError, the checker its own errors
            raise JobFailed(f"The variant's ONNX model is opset {own} (written by the compression job), and ONNX's "
                            f"version converter cannot convert it to opset {opset}: {_short(exc)}",
                            f"Export it at opset {own}, the variant's own (opset: {own}), or pick another opset; "
                            f"or export its parent run, which is exported at the opset asked.") from None
        model, converted_from = converted, own
    keep = [p for p in model.metadata_props if p.key not in metadata]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for key, value in metadata.items():
        model.metadata_props.add(key=str(key), value=str(value))
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    try:
        onnx.save(model, str(tmp))
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    inputs, outputs = model_io(dst)
    how = f"copied (quantized variant), converted from opset {own}" if converted_from else "copied (quantized variant)"
    return {"path": str(dst), "files": [str(dst)], "inputs": inputs, "outputs": outputs, "opset": _opset_of(model),
            "converted_from": converted_from, "exporter": how, "fallback_reason": None,
            "bytes": dst.stat().st_size, "seconds": round(time.perf_counter() - started, 3), "slimmed": None}
