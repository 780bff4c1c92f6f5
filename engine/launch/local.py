"""The command line, and the environment, that start a job on this machine.

Training with more than one process, or with automatic restarts, goes through
torchrun (``python -m torch.distributed.run``): it starts one worker per
process, sets RANK/WORLD_SIZE, and restarts the worker group when one dies. Where the fork server can be
used, each worker is forked from it (engine/launch/forked_worker.py) instead of importing PyTorch anew.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import engine
from engine.launch import forkserver

_PROJECT_ROOT = str(Path(engine.__file__).resolve().parent.parent)


# The environment a process that times models starts with (compressions evaluate a variant beside its
# parent): OpenMP threads that spin between calls distort interleaved latencies (engine/evaluate/runners.py).
EVAL_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def job_env(**extra: str) -> dict[str, str]:
    """Environment for a job process: it imports the same engine package as this one, installed or not."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    env["PYTHONPATH"] = python_path(_PROJECT_ROOT, env.get("PYTHONPATH", ""))
    return env


def python_path(*parts: str) -> str:
    """``PYTHONPATH`` from ``parts`` (each may hold several entries), each entry once, in order: a job started
    by a job gets the same value as its parent (and so the same fork server, engine/launch/forkserver.py)."""
    entries = [e for part in parts for e in part.split(os.pathsep) if e]
    return os.pathsep.join(dict.fromkeys(entries))


def command(module: str, spec: Any, run_dir: Path) -> list[str]:
    tail = ["--run-dir", str(run_dir)]
    d = getattr(spec, "distributed", None)
    if d is None or (d.nproc == 1 and d.max_restarts == 0):
        return [sys.executable, "-m", module, *tail]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={d.nproc}",
            f"--max-restarts={d.max_restarts}", *worker(module), *tail]


def worker(module: str) -> list[str]:
    """What torchrun runs for each worker: ``-m module``, forked from the warm server where fork is usable."""
    if forkserver.available():
        return ["-m", "engine.launch.forked_worker", module]
    return ["-m", module]
