"""Turning engine values into short, readable text (times, durations, sizes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from engine.api.job_terms import LIVE_STATES


def to_epoch(value: Any) -> float | None:
    """Accept epoch seconds or an ISO 8601 string; None when absent or unreadable."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def timestamp(value: Any) -> str:
    """Local time; the date is left out for today."""
    epoch = to_epoch(value)
    if epoch is None:
        return "—"
    moment = datetime.fromtimestamp(epoch)
    if moment.date() == datetime.now().date():
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def job_duration(job: dict[str, Any], now: float | None = None) -> str:
    """Run time of a job: start to end, or start to now while it runs."""
    start = to_epoch(job.get("started_at"))
    if start is None:
        return "—"
    end = to_epoch(job.get("ended_at"))
    if end is None:
        if job.get("state") not in LIVE_STATES:
            return "—"
        end = time.time() if now is None else now
    return duration(end - start)


UNITS = {
    # Binary units, named as such: memory and disk sizes agree with the engine and nvidia-smi.
    "binary": (1024, ("B", "KiB", "MiB", "GiB", "TiB")),
    # Decimal units: what disk makers and file managers print.
    "decimal": (1000, ("B", "kB", "MB", "GB", "TB")),
}


# The "units" preference: app.state.prefs installs its reader here when it is imported (text sits below the
# preferences in the GUI's layers, so it is told rather than asking); "binary" until then.
units_preference: Callable[[], str] = lambda: "binary"  # noqa: E731 - a replaceable hook, not a function


def size(n_bytes: Any, units: str | None = None) -> str:
    """Bytes as text, in the "units" preference (binary by default) unless ``units`` is given."""
    try:
        value = float(n_bytes)
    except (TypeError, ValueError):
        return str(n_bytes)
    if units is None:
        units = units_preference()
    step, names = UNITS.get(units, UNITS["binary"])
    for unit in names:
        if abs(value) < step or unit == names[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= step
    return f"{value:.1f} {names[-1]}"  # not reached: the last unit always returns


_SIZE_KEYS = ("bytes", "total", "available", "free", "used", "rss", "memory")


def fact(value: Any, key: str = "") -> str:
    """One probe fact as text: nested dicts become 'key value' pairs, lists one item a line."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and value > 1 << 20 and any(k in key.lower() for k in _SIZE_KEYS):
        return size(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        if not value:
            return "—"
        return ", ".join(f"{k.replace('_', ' ')} {fact(v, k)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        return "\n".join(fact(item, key) for item in value)
    return str(value)


# The first steps of a run include warm-up (compilation, caches, data loader start): an ETA
# from their pace is noise, so none is shown before this many steps.
MIN_ETA_STEPS = 3
# Below this many seconds left, say nothing rather than count down to "0.0 s": the estimate
# runs out before the job does whenever the last steps, an evaluation or a save are slower.
MIN_ETA_S = 1.0


def eta_left(eta_s: float | None, at: float, now: float | None = None) -> float | None:
    """Seconds left now, from an estimate of ``eta_s`` seconds made at time ``at``.

    None when there is no estimate, or when it has run out (under MIN_ETA_S left): a job
    still running has an unknown time left then, never "0 s".
    """
    if eta_s is None:
        return None
    now = time.time() if now is None else now
    left = float(eta_s) - max(0.0, now - at)
    return left if left >= MIN_ETA_S else None


def train_eta(event: dict[str, Any], now: float | None = None) -> float | None:
    """Seconds left of a fine-tune from its latest ``train`` event; None until it can be estimated."""
    step, eta_s = event.get("step"), event.get("eta_s")
    if not isinstance(step, (int, float)) or step < MIN_ETA_STEPS or eta_s is None:
        return None
    at = event.get("t")
    return eta_left(float(eta_s), float(at) if at is not None else time.time(), now)
