"""How a model is spread over processes: one small module per strategy.

Each module has ``wrap(model, world, spec, task) -> model`` and
``no_sync(model, sync: bool)`` (gradient accumulation without communication
where the strategy allows it). DeepSpeed, which owns its optimizer, has its
own engine path in the recipe.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def get_strategy(name: str) -> ModuleType:
    if name not in ("single", "ddp", "fsdp", "deepspeed"):
        raise ValueError(f"unknown strategy {name!r}")
    return importlib.import_module(f"engine.strategies.{name}")
