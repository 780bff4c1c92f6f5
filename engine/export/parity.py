"""Parity: an exported artifact, loaded in a fresh process, against the model in PyTorch.

The reference is the source model (fp32, eager) on the first validation examples, in
batches as the task's collate makes them (text: padded to the longest in each batch,
so the batches have different lengths, and a shape baked into an export shows).
Each artifact runs in a fresh Python process on the same batches, written as .npz:

- onnx, torchscript, pt2: ``python -m engine.export.reload``;
- ort: the package's own ``infer.py --npz``, with PYTHONPATH cleared, Python isolated
  (``-I``) and ``torch`` and ``engine`` made unimportable, so a pass proves the package
  runs on its own.

Figures: ``max_abs_diff`` of the logits, ``top1_agreement`` (share of examples whose
arg-max matches), ``samples``. An fp32 export passes when the difference is at most
``tolerance`` and every arg-max agrees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.compress.onnx_export import feeds, input_names, logits_wrapper
from engine.launch.local import python_path
from engine.training.context import JobFailed

if TYPE_CHECKING:
    import numpy as np
    import torch

FORMATS = ("onnx", "torchscript", "pt2", "ort")
TIMEOUT_S = 1800
REPO_ROOT = Path(__file__).resolve().parents[2]
# Runs infer.py as `python infer.py ...` would, with the exporting program out of reach.
STANDALONE = ("import runpy, sys\n"
              "for name in ('torch', 'engine'):\n"
              "    sys.modules[name] = None  # importing them now raises ImportError\n"
              "sys.argv = sys.argv[1:]\n"
              "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def reference_batches(data: Any, task_name: str, samples: int, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """The first ``samples`` validation examples, collated in batches of ``batch_size``, without labels."""
    n = min(int(samples), len(data.val))
    if n < 1:
        raise JobFailed("The run's data has no validation examples to check the export on",
                        "give the fine-tune a validation split (data.val_path or data.val_fraction) and train again.")
    step = max(1, int(batch_size))
    out = []
    for start in range(0, n, step):
        batch = data.collate([data.val[i] for i in range(start, min(n, start + step))])
        out.append({k: v for k, v in batch.items() if k != "labels"})
    input_names(task_name, out[0])  # fails early, with the task's inputs, on a batch that lacks one
    return out


def reference_logits(model: torch.nn.Module, task_name: str, batches: list[dict[str, torch.Tensor]]
                     ) -> list[np.ndarray]:
    """The model's fp32 eager logits for each batch."""
    import torch

    names = input_names(task_name, batches[0])
    wrapper = logits_wrapper(model.float().eval(), task_name, names)
    with torch.no_grad():
        return [wrapper(*(b[k] for k in names)).float().cpu().numpy() for b in batches]


def _command(fmt: str, path: Path, inputs: Path, outputs: Path) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if fmt == "ort":
        infer = path / "infer.py" if path.is_dir() else path
        if not infer.is_file():
            raise JobFailed(f"The ONNX Runtime package at {path} has no infer.py", "export format ort again.")
        env.pop("PYTHONPATH", None)
        return [sys.executable, "-I", "-c", STANDALONE, str(infer), "--npz", str(inputs), "--out", str(outputs)], env
    # engine must be importable for reload, installed or not
    env["PYTHONPATH"] = python_path(str(REPO_ROOT), env.get("PYTHONPATH", ""))
    return [sys.executable, "-m", "engine.export.reload", fmt, str(path), str(inputs), str(outputs)], env


def _diff(ref: np.ndarray, got: np.ndarray) -> float:
    import numpy as np

    if ref.shape != got.shape:
        return float("inf")
    if not (np.isfinite(ref) == np.isfinite(got)).all():
        return float("inf")
    finite = np.isfinite(ref)
    return float(np.abs(ref[finite] - got[finite]).max()) if finite.any() else 0.0


def check(fmt: str, path: str | Path, task_name: str, batches: list[dict[str, Any]], reference: list[np.ndarray],
          tolerance: float, enforce: bool = True) -> dict[str, Any]:
    """Run the artifact at ``path`` in a fresh process on ``batches`` and compare with ``reference``."""
    import numpy as np

    if fmt not in FORMATS:
        raise JobFailed(f"No parity check for format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    if len(batches) != len(reference) or not batches:
        raise JobFailed(f"Parity needs one reference per batch ({len(batches)} batches, {len(reference)} references)",
                        "build both with reference_batches and reference_logits.")
    started = time.perf_counter()
    path = Path(path)
    names = input_names(task_name, batches[0])
    with tempfile.TemporaryDirectory(prefix="ember-parity-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.npz", Path(tmp) / "outputs.npz"
        arrays: dict[str, Any] = {"names": np.array(names)}
        for i, batch in enumerate(batches):
            arrays.update({f"b{i}.{k}": v for k, v in feeds(names, batch).items()})
        np.savez(inputs, **arrays)
        cmd, env = _command(fmt, path, inputs, outputs)
        try:
            proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise JobFailed(f"The {fmt} artifact took over {TIMEOUT_S} s on {len(batches)} batches",
                            "check the artifact by hand, or lower parity_samples.") from exc
        if proc.returncode != 0 or not outputs.is_file():
            tail = " ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-6:])[-800:]
            raise JobFailed(f"The {fmt} artifact failed to run in a fresh process (exit {proc.returncode}): {tail}",
                            "the export is not loadable on its own; export it again, and report this with the "
                            "run's spec.yaml if it persists.")
        got = np.load(outputs, allow_pickle=False)
        results = [got[f"b{i}"] if f"b{i}" in got.files else np.zeros((0,)) for i in range(len(batches))]
    max_diff, agree, total = 0.0, 0, 0
    for ref, out in zip(reference, results, strict=True):
        max_diff = max(max_diff, _diff(ref, out))
        total += ref.shape[0]
        if ref.shape == out.shape:  # an example agrees when every position's arg-max does (one for classifiers)
            same = ref.argmax(-1) == out.argmax(-1)
            agree += int(same.reshape(ref.shape[0], -1).all(1).sum())
    top1 = agree / total if total else 0.0
    passed = max_diff <= tolerance and top1 >= 1.0
    result = {"max_abs_diff": max_diff, "top1_agreement": top1, "samples": total, "passed": passed,
              "enforced": bool(enforce), "seconds": round(time.perf_counter() - started, 3)}
    if enforce and not passed:
        raise JobFailed(f"The {fmt} export does not match the model: max abs logit difference {max_diff:.3g} "
                        f"(tolerance {tolerance:g}), top-1 agreement {top1:.4f} on {total} examples",
                        "the export changed the model's numbers; try another opset or exporter setting (onnx), "
                        "torchscript_mode script, or report this with the run's spec.yaml.")
    return result
