"""The ONNX Runtime package: a folder that classifies with nothing but numpy, onnxruntime and tokenizers.

Files: ``model.onnx`` (+ ``model.onnx.data``), ``infer.py`` (templates/ort_infer.py),
``labels.json``, ``preprocess.json`` (the task and engine.export.metadata.preprocessing),
the tokenizer files (text), ``requirements.txt`` and ``README.md``. The folder is
built under a temporary name beside ``out_dir`` and renamed into place, so a failed
write never leaves a package that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from engine.export.metadata import TEXT_TASKS, tokenizer_files
from engine.training.context import JobFailed

TEMPLATE = Path(__file__).resolve().parent / "templates" / "ort_infer.py"
TASKS = ("text_classification", "image_classification")


# The lowest onnxruntime that runs a model, by what the file needs: (highest IR version, highest ai.onnx opset,
# release). Each row was checked by running exported models in that release (CPU, Python 3.11): 1.16 runs
# IR 8 files up to opset 19 and refuses IR 10 ("max supported IR version: 9", 1.17 too); 1.18 runs the dynamo
# exporter's IR 10 files at opsets 18-21; 1.21 adds opset 22 and 1.23 opset 23.
ORT_FLOORS = ((9, 19, "1.16"), (10, 21, "1.18"), (10, 22, "1.21"), (10, 23, "1.23"))
# ConvInteger with int8 weights (a dynamically quantized CNN) has a CPU kernel from 1.24 on (1.23 cannot find
# one); 1.24 has no wheels for Python 3.10, so such a package needs Python 3.11 or newer.
CONV_INT8_FLOOR = "1.24"
# What infer.py itself uses of the others is old API; these are the lowest versions it was run with:
# numpy 1.24.2 (onnxruntime 1.18's own floor), tokenizers 0.13.3 (reads the bundled tokenizer.json),
# Pillow 9.3 (fromarray, resize BILINEAR, getchannel). All of them install on Python 3.10.
FLOORS = {"numpy": "1.24.2", "tokenizers": "0.13.3", "pillow": "9.3"}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def ort_floor(ir_version: int, opset: int, conv_int8: bool = False) -> str:
    """The lowest onnxruntime release that runs a model with this IR version and ai.onnx opset (ORT_FLOORS)."""
    floor = next((release for ir, top, release in ORT_FLOORS if ir_version <= ir and opset <= top), None)
    if floor is None:  # newer than any release checked: the one this machine ran the parity check with
        from importlib.metadata import version

        floor = ".".join(version("onnxruntime").split(".")[:2])
    return max(floor, CONV_INT8_FLOOR, key=_version_key) if conv_int8 else floor


def model_needs(onnx_path: Path) -> dict[str, Any]:
    """{ir_version, opset, conv_int8} of an ONNX file (its graph only, not external weights)."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    int8 = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8}
    conv_int8 = any(n.op_type == "ConvInteger" and len(n.input) > 1 and n.input[1] in int8 for n in model.graph.node)
    return {"ir_version": int(model.ir_version), "opset": int(opset), "conv_int8": conv_int8}


def _requirements(task_name: str, needs: dict[str, Any]) -> str:
    ort = ort_floor(needs["ir_version"], needs["opset"], needs["conv_int8"])
    python = "3.11" if needs["conv_int8"] else "3.10"
    lines = [f"# Python {python} or newer. The lowest versions this model and infer.py run with: onnxruntime "
             f"{ort} reads ONNX IR version {needs['ir_version']} at opset {needs['opset']}"
             + (" and has an int8 ConvInteger kernel" if needs["conv_int8"] else "") + ".",
             f"onnxruntime>={ort}", f"numpy>={FLOORS['numpy']}"]
    if task_name in TEXT_TASKS:
        lines.append(f"tokenizers>={FLOORS['tokenizers']}")
    else:
        lines.append(f"pillow>={FLOORS['pillow']}  # only to read image files; .npy arrays need numpy alone")
    return "\n".join(lines) + "\n"


def _readme(task_name: str, labels: list[str], preprocessing: dict[str, Any]) -> str:
    if task_name in TEXT_TASKS:
        example = 'python infer.py "my order never arrived" "how do I reset my password?"'
        reads = (f"Text is tokenized with the bundled tokenizer, truncated to {preprocessing.get('max_length')} "
                 "tokens and padded to the longest text in the batch.")
    else:
        h, w = preprocessing.get("size", ["?", "?"])
        example = "python infer.py image1.png image2.jpg pixels.npy"
        reads = (f"Images are converted to RGB, resized to {w}x{h} (bilinear), scaled to [0, 1] and normalized "
                 f"with mean {preprocessing.get('mean')} and std {preprocessing.get('std')}, laid out N, C, H, W. "
                 "A .npy array of floats (C, H, W) or (N, C, H, W) is taken as ready input.")
    needs = "tokenizers" if task_name in TEXT_TASKS else "(for image files) Pillow"
    shown = ", ".join(labels[:12]) + (f" and {len(labels) - 12} more" if len(labels) > 12 else "")
    return f"""# {task_name} model for ONNX Runtime

Exported by Ember Studio. Labels: {shown}.

## Run

Python 3.10 or newer (3.11 for a dynamically quantized CNN); `requirements.txt` lists the lowest
versions that run this model.

```
python -m pip install -r requirements.txt
{example}
```

Each input gives one JSON line: the input, `label`, `probabilities` (softmax over the
labels) and `logits`. {reads}

Raw inputs (as the export check does): `python infer.py --npz inputs.npz --out outputs.npz`,
where input `name` of batch `i` is the array `b<i>.<name>` and the logits come back as `b<i>`.

## Files

- `model.onnx`: the model (inputs and outputs: `python -c "import onnx; print(onnx.load('model.onnx').graph.input)"`);
  its `metadata_props` hold the task, labels and preprocessing too.
- `labels.json`: label names by output index.
- `preprocess.json`: how inputs are prepared.
- `infer.py`: the script above; it imports only numpy, onnxruntime and {needs}.
"""


def write_ort_package(onnx_path: str | Path, out_dir: str | Path, *, task_name: str, labels: list[str],
                      preprocessing: dict[str, Any], tokenizer_dir: Path | None) -> dict[str, Any]:
    """Write the package to ``out_dir`` (replacing what was there); see the module docstring."""
    started = time.perf_counter()
    onnx_path, out_dir = Path(onnx_path), Path(out_dir)
    if task_name not in TASKS:
        raise JobFailed(f"The ONNX Runtime package classifies; it does not support the task {task_name!r}",
                        f"export format onnx instead, or a model of task {' or '.join(TASKS)}")
    if not onnx_path.is_file():
        raise JobFailed(f"No ONNX model at {onnx_path} to package", "export format onnx first")
    if task_name in TEXT_TASKS and (tokenizer_dir is None or not tokenizer_files(Path(tokenizer_dir))):
        raise JobFailed(f"The {task_name} package needs the model's tokenizer files, and none were found"
                        + (f" in {tokenizer_dir}" if tokenizer_dir else ""),
                        "save the tokenizer into the model folder (tokenizer.save_pretrained(folder)) "
                        "and export again.")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        shutil.copy2(onnx_path, work / "model.onnx")
        data = onnx_path.with_name(onnx_path.name + ".data")
        if data.is_file():
            # The model names its weights file; the copy keeps that name only if the source used model.onnx.data.
            if onnx_path.name != "model.onnx":
                raise JobFailed(f"{onnx_path} keeps its weights in {data.name}, which the package cannot rename",
                                "export the model as model.onnx")
            shutil.copy2(data, work / data.name)
        shutil.copy2(TEMPLATE, work / "infer.py")
        (work / "labels.json").write_text(json.dumps(list(labels), indent=1) + "\n", encoding="utf-8")
        (work / "preprocess.json").write_text(json.dumps({"task": task_name, **preprocessing}, indent=1) + "\n",
                                              encoding="utf-8")
        if task_name in TEXT_TASKS and tokenizer_dir is not None:
            for f in tokenizer_files(Path(tokenizer_dir)):
                shutil.copy2(f, work / f.name)
        (work / "requirements.txt").write_text(_requirements(task_name, model_needs(onnx_path)), encoding="utf-8")
        (work / "README.md").write_text(_readme(task_name, list(labels), preprocessing), encoding="utf-8")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(work, out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    files = sorted(str(p) for p in out_dir.iterdir() if p.is_file())
    return {"path": str(out_dir), "files": files, "bytes": sum(Path(f).stat().st_size for f in files),
            "seconds": round(time.perf_counter() - started, 3)}
