"""How many CPU threads one job's runtimes use: PyTorch, ONNX Runtime and llama.cpp alike.

Each of them starts one thread per core by default. Two busy processes on the same cores then fight: every
parallel region waits at its barrier for a thread the scheduler has parked, and a token-by-token generation
loop (thousands of small parallel regions) slows down far more than twofold. Measured on 2 cores: the
SmolLM2 export test took 66 s alone and 282 s beside the LLM-loop test, and its PyTorch reference step went
from seconds to 95 s beside one busy single-threaded process. ``OMP_NUM_THREADS``, which PyTorch already
reads, is the one cap for all three: the engine sets it for the processes of a multi-process run, and a user
running several CPU jobs at once (or the test suite, two workers on two cores) sets it for every job.
"""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cap() -> int:
    """``OMP_NUM_THREADS`` when set to a positive number, else 0 (no cap)."""
    try:
        return max(0, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return 0


def cpu_threads(threads: int = 0) -> int:
    """``threads`` when positive, else the cap, else every core this process may use."""
    if threads and threads > 0:
        return int(threads)
    return cap() or cores()
