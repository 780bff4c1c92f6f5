"""A sweep: one fine-tune spec (``base``) trained several times with some of its fields varied.

``params`` name spec fields by path (``optim.lr``, ``method.lora_r``, ``batch_size``) with either
a list of values or a range. ``method`` picks the settings of each trial: ``grid`` (every
combination of the values), ``random`` (``trials`` draws, seeded) or ``optuna`` (Optuna's TPE
sampler, ``trials`` of them, each trial's evaluations reported to it so that, with ``prune``,
a trial whose metric trails the median of the others at the same step is stopped early).
Every trial is an ordinary fine-tune in the queue; the best by ``metric`` is marked.
Stdlib + pydantic: the GUI imports this module (docs/sweeps.md).
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.api.train_spec import TrainSpec

PATH = r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$"
MAX_TRIALS = 256
Value = bool | int | float | str


class SweepParam(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., pattern=PATH, max_length=120, description="the spec field, e.g. optim.lr")
    values: list[Value] | None = Field(None, min_length=1, max_length=64,
                                       description="the values to try (grid: each of them)")
    low: float | None = Field(None, description="random, optuna: the range's lower end")
    high: float | None = Field(None, description="random, optuna: the range's upper end")
    log: bool = Field(False, description="draw on a log scale (learning rates)")
    integer: bool = Field(False, description="whole numbers only (ranks, batch sizes)")

    @model_validator(mode="after")
    def _one_kind(self) -> SweepParam:
        ranged = self.low is not None or self.high is not None
        if self.values is None and not ranged:
            raise ValueError(f"{self.path}: give values, or low and high")
        if self.values is not None and ranged:
            raise ValueError(f"{self.path}: give values or a range, not both")
        if ranged:
            if self.low is None or self.high is None or not self.low < self.high:
                raise ValueError(f"{self.path}: a range needs low < high")
            if self.log and self.low <= 0:
                raise ValueError(f"{self.path}: a log range needs low > 0")
        return self

    def draw(self, rng: random.Random) -> Value:
        if self.values is not None:
            return rng.choice(self.values)
        lo, hi = float(self.low), float(self.high)  # type: ignore[arg-type]
        x = math.exp(rng.uniform(math.log(lo), math.log(hi))) if self.log else rng.uniform(lo, hi)
        return int(round(x)) if self.integer else float(f"{x:.6g}")


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base: TrainSpec
    params: list[SweepParam] = Field(..., min_length=1, max_length=8)
    method: Literal["grid", "random", "optuna"] = "grid"
    trials: int = Field(8, ge=1, le=MAX_TRIALS, description="random, optuna: how many trials (grid: every "
                        "combination)")
    metric: str = Field("loss", pattern=r"^[a-z_][a-z0-9_]*$", description="the evaluation metric trials are "
                        "ranked by (loss, accuracy, f1, perplexity, ...)")
    mode: Literal["min", "max"] = "min"
    prune: bool = Field(False, description="optuna: stop a trial early when its metric at an evaluation trails "
                        "the median of the trials before it (Optuna's MedianPruner)")
    parallel: int = Field(2, ge=1, le=64, description="trials in the queue or running at once")
    seed: int = 0

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        paths = [p.path for p in self.params]
        if len(set(paths)) != len(paths):
            raise ValueError("each field may be swept once")
        if self.method == "grid":
            ranged = [p.path for p in self.params if p.values is None]
            if ranged:
                raise ValueError(f"grid needs values for {', '.join(ranged)}: a range is for random or optuna")
            count = math.prod(len(p.values or []) for p in self.params)
            if count > MAX_TRIALS:
                raise ValueError(f"the grid has {count} combinations; at most {MAX_TRIALS}")
        if self.prune and self.method != "optuna":
            raise ValueError("prune needs method optuna")
        base = self.base.model_dump(mode="json")
        for path in paths:
            if not _has(base, path):
                raise ValueError(f"{path} is not a field of the fine-tune spec")
        # Every setting a trial may get must make a valid spec: the grid's all, a range's two ends.
        for settings in self.corners():
            try:
                self.trial_spec(settings)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "spec"
                raise ValueError(f"the trial with {_words(settings)} is not a valid fine-tune ({where}: "
                                 f"{first['msg']})") from None
        return self

    def corners(self) -> list[dict[str, Value]]:
        """The settings whose validity stands for all: the whole grid, or each range's ends."""
        if self.method == "grid":
            return self.grid()
        options = [p.values if p.values is not None else
                   [int(round(p.low)) if p.integer else p.low, int(round(p.high)) if p.integer else p.high]
                   for p in self.params]
        return [dict(zip([p.path for p in self.params], combo, strict=True))
                for combo in itertools.islice(itertools.product(*options), MAX_TRIALS)]

    def grid(self) -> list[dict[str, Value]]:
        paths = [p.path for p in self.params]
        return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*(p.values or [] for p in self.params))]

    def total(self) -> int:
        return len(self.grid()) if self.method == "grid" else self.trials

    def random_settings(self, number: int) -> dict[str, Value]:
        """Trial ``number``'s draw: the same for the same seed, whatever happened to the others."""
        rng = random.Random(f"{self.seed}:{number}")
        return {p.path: p.draw(rng) for p in self.params}

    def trial_spec(self, settings: dict[str, Value]) -> TrainSpec:
        doc = self.base.model_dump(mode="json")
        for path, value in settings.items():
            _set(doc, path, value)
        return TrainSpec.model_validate(doc)

    def better(self, a: float, b: float) -> bool:
        return a < b if self.mode == "min" else a > b


def _has(doc: dict[str, Any], path: str) -> bool:
    node: Any = doc
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _set(doc: dict[str, Any], path: str, value: Value) -> None:
    keys = path.split(".")
    node = doc
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def _words(settings: dict[str, Value]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def settings_text(settings: dict[str, Any]) -> str:
    """A trial's settings in a run name: 'optim.lr=0.001, method.lora_r=8'."""
    return _words(settings)
