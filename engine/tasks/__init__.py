"""Tasks: model, data and metric for each kind of fine-tune.

Each task module (text_classification, image_classification, causal_lm)
exposes the functions of ``engine.tasks.base.Task``; ``get_task(name)`` returns it.
"""

from __future__ import annotations

import importlib

from engine.tasks.base import Task


def get_task(name: str) -> Task:
    return importlib.import_module(f"engine.tasks.{name}")  # type: ignore[return-value]
