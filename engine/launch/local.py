"""The command line that starts a job on this machine.

Training with more than one process, or with automatic restarts, goes through
torchrun (``python -m torch.distributed.run``): it starts one worker per
process, sets RANK/WORLD_SIZE, and restarts the worker group when one dies.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def command(module: str, spec: Any, run_dir: Path) -> list[str]:
    tail = ["--run-dir", str(run_dir)]
    d = getattr(spec, "distributed", None)
    if d is None or (d.nproc == 1 and d.max_restarts == 0):
        return [sys.executable, "-m", module, *tail]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={d.nproc}",
            f"--max-restarts={d.max_restarts}", "-m", module, *tail]
