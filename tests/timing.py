"""How much slower this machine runs than the one the tests' limits were chosen on, so that a slow or busy
machine makes the suite slower, not red.

The limits (``wait_for``, an engine's start, a Qt wait, pytest-timeout) were chosen on an idle 2-core CI
machine. ``slowness()`` is measured once per test session, before pytest-xdist starts its workers (which
inherit it through the environment): a fixed piece of Python work, timed three times, against its time on
that machine. ``EMBER_TEST_SLOWNESS=3`` sets it instead (for a machine busy with other work that started
after the measurement). Every limit is multiplied by it; it is never below 1, so a fast machine keeps the
limits as written.
"""

from __future__ import annotations

import os
import statistics
import time
import zlib

VARIABLE = "EMBER_TEST_SLOWNESS"
# The median of the work below on an idle CI machine (2-core AMD EPYC, Python 3.11), in seconds.
REFERENCE_S = 0.080
LARGEST = 8.0  # a measurement taken in a moment of heavy load must not turn every limit into an hour


def _work() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(1_000_000):  # the interpreter's speed: most of a test's waiting is on Python processes
        total += i * i % 7
    zlib.compress(bytes(range(256)) * 8_000, 6)
    return time.perf_counter() - start


def measure() -> float:
    return min(LARGEST, max(1.0, statistics.median(_work() for _ in range(3)) / REFERENCE_S))


def slowness() -> float:
    """The factor every limit is multiplied by (measured once, then read from the environment)."""
    value = os.environ.get(VARIABLE)
    if not value:
        value = f"{measure():.2f}"
        os.environ[VARIABLE] = value
    try:
        return max(1.0, float(value))
    except ValueError:
        raise SystemExit(f"{VARIABLE}={value!r} is not a number: set it to a factor such as 2, or unset it") from None


def scaled(seconds: float) -> float:
    return seconds * slowness()
