"""Telling a diverging fine-tune from a noisy one (docs/recipes.md, Control).

A run has diverged when any of these holds:

- the median of the last ``WINDOW`` step losses is above ``max(FACTOR x start, start + MARGIN)``, where
  ``start`` is the lowest of the first ``START_STEPS`` losses of this run (or of this resume);
- the loss is NaN or infinite (at once with ``nan_policy: stop``; with ``skip``, ``SKIPPED_IN_A_ROW`` steps
  in a row);
- an evaluation's sums are not finite, a metric is infinite (its exponent overflowed: a perplexity past an
  eval loss of 700), or its loss is above ``EVAL_FACTOR x max(start, 1)``.

Why these numbers: a median over 5 steps ignores one bad batch; the lowest of the first losses is the
model before a too-large learning rate blows it up (a huge rate can make step 2's loss a thousand times
step 1's, and a mean of the first steps would then hide the climb); 10x the start is far beyond a normal
run's noise and bumps, and the 3-nat margin keeps a loss that starts near 0 (0.01 -> 0.2 is still noise)
from tripping it. Overfitting raises an eval loss a few times over, never 100 times a start of 1 or more.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

from engine.training.context import JobFailed

START_STEPS = 5
WINDOW = 5
FACTOR = 10.0
MARGIN = 3.0
EVAL_FACTOR = 100.0
SKIPPED_IN_A_ROW = 5


@dataclass
class Divergence:
    """What the ``diverged`` event says: where, how high, against what start."""

    step: int
    loss: float | None
    start_loss: float | None
    message: str


class Diverged(JobFailed):
    """The run diverged: it ends failed with ``reason: "diverged"``."""

    reason = "diverged"

    def __init__(self, found: Divergence, hint: str):
        super().__init__(found.message, hint)
        self.found = found


class LossWatch:
    """Fed every step's loss (the same on every process) and every evaluation; says when the run diverged."""

    def __init__(self) -> None:
        self.first: list[float] = []
        self.recent: deque[float] = deque(maxlen=WINDOW)
        self.skipped = 0

    @property
    def start_loss(self) -> float | None:
        return min(self.first) if self.first else None

    def threshold(self) -> float | None:
        start = self.start_loss
        if start is None or len(self.first) < START_STEPS:
            return None
        return max(FACTOR * start, start + MARGIN)

    def add(self, step: int, loss: float) -> Divergence | None:
        """A finite step loss; a Divergence once the smoothed loss climbs past the threshold."""
        self.skipped = 0
        if len(self.first) < START_STEPS:
            self.first.append(loss)
        self.recent.append(loss)
        limit = self.threshold()
        if limit is None or len(self.recent) < WINDOW:
            return None
        smoothed = statistics.median(self.recent)
        if smoothed <= limit:
            return None
        start = self.start_loss
        assert start is not None
        times = f", {smoothed / start:,.0f}x" if start > 0 else ""
        return Divergence(step, smoothed, start,
                          f"Training diverged at step {step}: the loss climbed to {smoothed:.4g} (median of the last "
                          f"{WINDOW} steps){times} its start of {start:.4g}")

    def non_finite(self, step: int, skipping: bool) -> Divergence | None:
        """A NaN or infinite step loss: divergence at once, or after SKIPPED_IN_A_ROW when skipping such steps."""
        self.skipped += 1
        if skipping and self.skipped < SKIPPED_IN_A_ROW:
            return None
        if skipping:
            message = (f"Training diverged at step {step}: the loss was NaN or infinite for {self.skipped} steps "
                       "in a row")
        else:
            message = f"The loss became NaN or infinite at step {step}"
        return Divergence(step, None, self.start_loss, message)

    def check_eval(self, step: int, metrics: dict[str, Any], sums: dict[str, float]) -> Divergence | None:
        """An evaluation's figures; NaN metrics from finite sums (nothing to score) are not divergence."""
        bad_sums = [k for k, v in sums.items() if isinstance(v, float) and not math.isfinite(v)]
        infinite = [k for k, v in metrics.items() if isinstance(v, float) and math.isinf(v)]
        start = self.start_loss
        if bad_sums or infinite:
            names = ", ".join(sorted(set(infinite) | {k.removesuffix("_sum") for k in bad_sums}))
            return Divergence(step, _finite(metrics.get("loss")), start,
                              f"Training diverged at step {step}: the evaluation's {names} is NaN or infinite")
        loss = metrics.get("loss")
        if start is not None and isinstance(loss, (int, float)) and loss > EVAL_FACTOR * max(start, 1.0):
            return Divergence(step, float(loss), start,
                              f"Training diverged at step {step}: the evaluation loss is {loss:.4g}, against a "
                              f"training loss of {start:.4g} at the start")
        return None


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def hint(spec: Any, checkpoint: str | None) -> str:
    """What to change before running again, for this spec."""
    o = spec.optim
    tips = [f"lower optim.lr (now {o.lr:g}; try {o.lr / 10:g})"]
    if o.grad_clip is None:
        tips.append("turn on gradient clipping with optim.grad_clip (e.g. 1.0)")
    else:
        tips.append(f"keep gradient clipping on (optim.grad_clip, now {o.grad_clip:g}; 1.0 or lower)")
    if o.warmup_steps == 0 and o.schedule != "one_cycle":
        tips.append("add optim.warmup_steps")
    if spec.precision == "fp16":
        tips.append("use precision bf16 rather than fp16")
    text = "; ".join(tips)
    text = text[0].upper() + text[1:] + "."
    if checkpoint:
        text += (f" No final model was saved; the last checkpoint ({checkpoint}) is kept, written before the "
                 "divergence was detected.")
    else:
        text += " No final model was saved."
    return text
