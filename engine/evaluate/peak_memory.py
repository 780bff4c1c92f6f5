"""The resident memory a model adds while it runs, measured in a fresh process.

``peak_memory`` starts ``python -m engine.evaluate.peak_memory`` (forked from the fork server where one
answers) with the model file and a batch saved as ``.npz``. The child first imports what running the model needs
(onnxruntime for ``.onnx``; torch and the modules the pickled model refers to for
``.pt``), collects garbage and takes its resident set as the *baseline*. Then it
loads the model and runs it a few times on the batch while a thread samples the
resident set every millisecond. The result is peak minus baseline.

The peak is ``ru_maxrss`` when that grew after the baseline (exact, whatever the
sampler missed); when it did not (the imports had a larger transient peak than the
model ever reached) the sampler's maximum is used instead. A fresh process keeps
the parent's allocator caches and earlier models out of the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from engine.launch import local
from engine.training.context import JobFailed

_TIMEOUT_S = 600


def save_module(module: Any, path: str | os.PathLike) -> Path:
    """Pickle a whole torch module (``torch.save(module)``) so ``peak_memory`` can load it in the child."""
    import torch

    path = Path(path)
    torch.save(module, path)
    return path


def save_batch(batch: dict[str, Any], path: str | os.PathLike) -> Path:
    """A collated batch (torch tensors or arrays) as ``.npz``: the child reads it without importing torch."""
    import numpy as np

    path = Path(path)
    arrays = {k: (v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)) for k, v in batch.items()}
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def peak_memory(model_file: str | os.PathLike, task_name: str, batch_file_or_batch: Any, threads: int = 0,
                runs: int = 3) -> int:
    """Bytes of resident memory the model added at its peak (loading it and ``runs`` forward passes)."""
    model_file = Path(model_file)
    if model_file.suffix not in (".onnx", ".pt"):
        raise JobFailed(f"cannot measure the memory of {model_file.name}",
                        "give an .onnx file, or a .pt file saved with evaluate.memory.save_module")
    if not model_file.is_file():
        raise JobFailed(f"model file not found: {model_file}", "check the path")
    with tempfile.TemporaryDirectory(prefix="ember-mem-") as tmp:
        if isinstance(batch_file_or_batch, str | os.PathLike):
            batch_file = Path(batch_file_or_batch)
        else:
            batch_file = save_batch(batch_file_or_batch, Path(tmp) / "batch.npz")
        cmd = [sys.executable, "-m", "engine.evaluate.peak_memory", "--model", str(model_file), "--task", task_name,
               "--batch", str(batch_file), "--threads", str(threads), "--runs", str(runs)]
        env = local.job_env()  # this engine, installed or not; the same PYTHONPATH as the job's (one fork server)
        try:
            code, out, err = _run_forked(cmd, env, Path(tmp)) or _run_fresh(cmd, env)
        except subprocess.TimeoutExpired as exc:
            raise JobFailed(f"measuring the memory of {model_file.name} took over {_TIMEOUT_S} s",
                            "use a smaller batch size for the evaluation") from exc
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        tail = (err or out).strip().splitlines()[-3:]
        raise JobFailed(f"measuring the memory of {model_file.name} failed: {' | '.join(tail)[:500]}",
                        "check that the model runs (evaluate it without the memory figure to see the error)")
    return int(json.loads(lines[-1])["added"])


def _run_fresh(cmd: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S, env=env)
    return proc.returncode, proc.stdout, proc.stderr


_FORKED: bool | None = None  # this process's measurements fork (the server answered at the first), or not


def _run_forked(cmd: list[str], env: dict[str, str], tmp: Path) -> tuple[int, str, str] | None:
    """The child forked from the user's fork server (engine/launch/forkserver.py), which has imported PyTorch
    and nothing of a model: the child still takes its baseline after its own imports, so the figure is the
    model's alone, as in a fresh process (within 5% of it for a 100 MB model, measured here). None when no
    server answered this process's first measurement: then every one of its measurements is a fresh
    process's, so a parent and its variant are always measured alike."""
    from engine.launch import forkserver

    global _FORKED
    if _FORKED is None:  # decided once per process: a parent and its variant are measured the same way
        _FORKED = forkserver.warm(env)
    if not _FORKED:
        return None
    out_file, err_file = tmp / "stdout.txt", tmp / "stderr.txt"
    with open(os.devnull, "rb") as null, open(out_file, "wb") as out, open(err_file, "wb") as err:
        proc = forkserver.start(cmd[2], cmd[3:], tmp, env, fds=(null.fileno(), out.fileno(), err.fileno()))
    if proc is None:
        return None
    deadline = time.monotonic() + _TIMEOUT_S
    while (code := proc.poll()) is None:
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(cmd, _TIMEOUT_S)
        time.sleep(0.05)
    return (code if isinstance(code, int) else -1, out_file.read_text(errors="replace"),
            err_file.read_text(errors="replace"))


# ---------------------------------------------------------------- the child process


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _maxrss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _pickle_modules(path: Path) -> list[str]:
    """Module names a torch.save pickle refers to (read from its data.pkl, nothing executed)."""
    import importlib.util
    import pickletools
    import re
    import zipfile

    names: set[str] = set()
    try:
        with zipfile.ZipFile(path) as zf:
            pkl = next(n for n in zf.namelist() if n.endswith("data.pkl"))
            data = zf.read(pkl)
        for op, arg, _ in pickletools.genops(data):
            if op.name == "GLOBAL" and isinstance(arg, str):  # protocol 2, as torch.save writes: "module name"
                names.add(arg.split(" ")[0])
            elif isinstance(arg, str) and "." in arg and re.fullmatch(r"[A-Za-z_][\w.]*", arg):
                names.add(arg)  # STACK_GLOBAL's module string (protocol 4+)
    except (OSError, zipfile.BadZipFile, StopIteration, ValueError):
        return []
    found = []
    for name in sorted(names):
        top = name.split(".")[0]
        if top in sys.modules or importlib.util.find_spec(top) is not None:
            found.append(name)
    return found


def _import_for(model_file: Path) -> None:
    import importlib

    import numpy  # noqa: F401

    if model_file.suffix == ".onnx":
        import onnxruntime  # noqa: F401
        return
    import torch  # noqa: F401

    for name in _pickle_modules(model_file):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a class name, not a module: the pickle imports what it needs
            pass


class _Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.001)


def _child(args: argparse.Namespace) -> dict[str, int]:
    import gc

    import numpy as np

    model_file = Path(args.model)
    _import_for(model_file)
    from engine.evaluate.runners import OrtRunner, TorchRunner, resolve_threads

    with np.load(args.batch) as npz:
        batch = {k: npz[k] for k in npz.files}
    threads = resolve_threads(args.threads)
    if model_file.suffix == ".pt":
        import torch

        torch.set_num_threads(threads)
        batch = {k: torch.from_numpy(v) for k, v in batch.items()}
    gc.collect()
    baseline, max_before = _rss(), _maxrss()
    sampler = _Sampler()
    sampler.start()
    if model_file.suffix == ".onnx":
        runner: Any = OrtRunner(model_file, args.task, threads=threads)
    else:
        import torch

        runner = TorchRunner(torch.load(model_file, map_location="cpu", weights_only=False), args.task, threads)
    for _ in range(max(1, args.runs)):
        runner.run(batch)
    sampler.done.set()
    sampler.join()
    max_after = _maxrss()
    peak = max_after if max_after > max_before else max(sampler.peak, _rss())
    return {"baseline": baseline, "peak": peak, "added": max(0, peak - baseline)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--batch", required=True)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    sys.stdout.write(json.dumps(_child(parser.parse_args(argv))) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
