"""Latency of several runners on the same batch, measured interleaved.

Why interleaved: on a shared machine (other processes, a laptop changing its clock,
thermal throttling) the speed changes over seconds. Timing runner A's repeats and
then runner B's puts any slow spell entirely on one of them and skews their ratio.
Here each round calls every runner once, in an order that rotates each round, so a
slow spell lands on all of them alike and the ratio (what the wizard shows) stays
fair even when the absolute figures are noisy. Each runner is warmed up first
(allocations, kernel selection, caches), and those calls are not timed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


def measure(runners: Sequence[Any], batch: dict[str, Any], warmup: int = 5, repeats: int = 30) -> list[dict[str, Any]]:
    """Per runner, in the given order: {"batch", "p50", "p95", "mean", "repeats", "warmup"} (ms)."""
    import numpy as np

    if not runners:
        return []
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    first = next(iter(batch.values()))
    size = int(first.shape[0])
    for runner in runners:
        for _ in range(max(0, warmup)):
            runner.run(batch)
    times: list[list[float]] = [[] for _ in runners]
    k = len(runners)
    for r in range(repeats):
        for j in range(k):
            i = (r + j) % k  # rotate who goes first: no runner always follows the same one
            t0 = time.perf_counter()
            runners[i].run(batch)
            times[i].append((time.perf_counter() - t0) * 1000.0)
    out = []
    for ts in times:
        arr = np.asarray(ts)
        out.append({"batch": size, "p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
                    "mean": float(arr.mean()), "repeats": int(repeats), "warmup": int(max(0, warmup))})
    return out
