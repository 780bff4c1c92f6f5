"""A Triton Inference Server model repository for one exported model.

Layout (Triton's "Model Repository" docs): ``<out_dir>/<model_name>/config.pbtxt``, ``<model_name>/1/model.onnx``
(+ ``model.onnx.data``) or ``1/model.plan``, ``<model_name>/labels.txt``.

config.pbtxt fields (Triton "Model Configuration", the ModelConfig protobuf in model_config.proto):

- ``name`` must equal the model's directory name; ``platform`` is ``onnxruntime_onnx`` or ``tensorrt_plan``;
- ``max_batch_size`` > 0 means the first axis is the batch: ``dims`` then leave it out, and a variable axis
  is ``-1``;
- ``input``/``output``: ``name``, ``data_type`` (``TYPE_INT64`` ids and masks, ``TYPE_FP32`` pixels/logits),
  ``dims``; ``label_filename`` on a classification output names the labels file (one label a line) that
  Triton's classification extension reads;
- ``dynamic_batching { preferred_batch_size: [...] max_queue_delay_microseconds: N }``;
- ``instance_group [{ count: N kind: KIND_GPU | KIND_CPU | KIND_AUTO }]``.

For a TensorRT plan the engine's optimization profile must cover ``max_batch_size``; Triton reads the plan's
I/O types from the engine (TensorRT 8.x builds int64 ids as int32, so a plan's ids are ``TYPE_INT32`` there).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from engine.training.context import JobFailed

NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
PLATFORMS = {"onnx": "onnxruntime_onnx", "plan": "tensorrt_plan"}
DTYPES = {"int64": "TYPE_INT64", "int32": "TYPE_INT32", "float32": "TYPE_FP32", "float": "TYPE_FP32",
          "float16": "TYPE_FP16", "bool": "TYPE_BOOL", "int8": "TYPE_INT8", "uint8": "TYPE_UINT8"}
KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU")


def _dtype(value: Any) -> str:
    key = str(value).lower().replace("tensor(", "").replace(")", "").replace("torch.", "")
    key = {"float": "float32", "double": "float32", "long": "int64", "int": "int32"}.get(key, key)
    if key not in DTYPES:
        raise JobFailed(f"Triton has no data type for {value!r}", f"use one of: {', '.join(DTYPES)}")
    return DTYPES[key]


def _dims(shape: list[Any], batched: bool) -> list[int]:
    dims = [d if isinstance(d, int) and d > 0 else -1 for d in shape]
    if batched:
        if not dims:
            raise JobFailed("a batched Triton model needs tensors with a batch axis", "export with a batch axis.")
        dims = dims[1:]
    return dims or [1]  # Triton refuses an empty shape


def _tensor(spec: dict[str, Any], batched: bool, label_file: str | None = None) -> str:
    dims = ", ".join(str(d) for d in _dims(list(spec["shape"]), batched))
    extra = f'\n    label_filename: "{label_file}"' if label_file else ""
    return (f'  {{\n    name: "{spec["name"]}"\n    data_type: {_dtype(spec["dtype"])}\n    dims: [ {dims} ]{extra}\n'
            "  }")


def preferred_batches(max_batch: int) -> list[int]:
    """Powers of two from 2 up to max_batch, and max_batch itself (what the dynamic batcher should aim for)."""
    sizes, b = [], 2
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return sizes + [max_batch] if max_batch > 1 else [1]


def config_text(model_name: str, *, kind: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
                max_batch: int, label_file: str | None, dynamic_batching: bool = True, instance_count: int = 1,
                instance_kind: str | None = None, queue_delay_us: int = 100) -> str:
    if kind not in PLATFORMS:
        raise JobFailed(f"unknown Triton model kind {kind!r}", f"use one of: {', '.join(PLATFORMS)}")
    batched = max_batch > 0
    ins = ",\n".join(_tensor(s, batched) for s in inputs)
    outs = ",\n".join(_tensor(s, batched, label_file if s["name"] == "logits" or len(outputs) == 1 else None)
                      for s in outputs)
    lines = [f'name: "{model_name}"', f'platform: "{PLATFORMS[kind]}"', f"max_batch_size: {max(0, max_batch)}",
             f"input [\n{ins}\n]", f"output [\n{outs}\n]"]
    if dynamic_batching and batched:
        pref = ", ".join(str(b) for b in preferred_batches(max_batch))
        lines.append(f"dynamic_batching {{\n  preferred_batch_size: [ {pref} ]\n"
                     f"  max_queue_delay_microseconds: {int(queue_delay_us)}\n}}")
    kind_name = instance_kind or ("KIND_GPU" if kind == "plan" else "KIND_AUTO")
    if kind_name not in KINDS:
        raise JobFailed(f"unknown instance kind {kind_name!r}", f"use one of: {', '.join(KINDS)}")
    lines.append(f"instance_group [\n  {{\n    count: {max(1, int(instance_count))}\n    kind: {kind_name}\n  }}\n]")
    return "\n".join(lines) + "\n"


def write_triton_repo(out_dir: str | Path, model_name: str, *, model_file: str | Path,
                      inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], max_batch: int,
                      labels: list[str] | None = None, dynamic_batching: bool = True, instance_count: int = 1,
                      kind: str = "onnx", instance_kind: str | None = None) -> dict[str, Any]:
    """Write ``<out_dir>/<model_name>/`` (config, version 1 with the model, labels) and return
    {path, files, config}. ``inputs``/``outputs`` are ``[{name, dtype, shape}]`` with str/None for dynamic axes."""
    if not NAME.match(model_name or ""):
        raise JobFailed(f"invalid Triton model name {model_name!r}",
                        "use 1-128 letters, digits, '_' or '-' (it is also the folder name).")
    model_file = Path(model_file)
    if not model_file.is_file():
        raise JobFailed(f"no model file at {model_file}", "export the model first.")
    if kind not in PLATFORMS:
        raise JobFailed(f"unknown Triton model kind {kind!r}", f"use one of: {', '.join(PLATFORMS)}")
    root = Path(out_dir) / model_name
    version = root / "1"
    version.mkdir(parents=True, exist_ok=True)
    target = version / ("model.plan" if kind == "plan" else "model.onnx")
    shutil.copyfile(model_file, target)
    files = [target]
    data = model_file.with_name(model_file.name + ".data")
    if kind == "onnx" and data.is_file():  # external weights keep the name the model refers to
        shutil.copyfile(data, version / data.name)
        files.append(version / data.name)
    label_file = None
    if labels:
        label_file = "labels.txt"
        (root / label_file).write_text("".join(f"{str(lab).strip()}\n" for lab in labels), encoding="utf-8")
        files.append(root / label_file)
    text = config_text(model_name, kind=kind, inputs=inputs, outputs=outputs, max_batch=max_batch,
                       label_file=label_file, dynamic_batching=dynamic_batching, instance_count=instance_count,
                       instance_kind=instance_kind)
    (root / "config.pbtxt").write_text(text, encoding="utf-8")
    files.append(root / "config.pbtxt")
    config = {"name": model_name, "platform": PLATFORMS[kind], "max_batch_size": max(0, max_batch),
              "input": [{"name": s["name"], "data_type": _dtype(s["dtype"]), "dims": _dims(list(s["shape"]),
                         max_batch > 0)} for s in inputs],
              "output": [{"name": s["name"], "data_type": _dtype(s["dtype"]), "dims": _dims(list(s["shape"]),
                          max_batch > 0)} for s in outputs]}
    return {"path": str(root), "files": [str(f.relative_to(root)) for f in files], "config": json.loads(
        json.dumps(config))}


def model_io(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``[{name, dtype, shape}]`` for the inputs and outputs of an ONNX file, read back with onnx."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}

    def rows(values):
        out = []
        for v in values:
            if v.name in inits:
                continue
            t = v.type.tensor_type
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type).name
            shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                     for d in t.shape.dim]
            out.append({"name": v.name, "dtype": dtype, "shape": shape})
        return out

    return rows(model.graph.input), rows(model.graph.output)
