"""Tasks: model, data and metric for each kind of fine-tune.

Each task module (text_classification, image_classification, causal_lm)
exposes the functions of ``engine.tasks.base.Task``; ``get_task(name)`` returns it, and
``task_for(spec)`` the one a spec trains (engine/tasks/preference.py for dpo, orpo and kto).
"""

from __future__ import annotations

import importlib
from typing import Any

from engine.tasks.base import Task


def get_task(name: str) -> Task:
    return importlib.import_module(f"engine.tasks.{name}")  # type: ignore[return-value]


def task_for(spec: Any) -> Task:
    """The task module that trains ``spec``: the preference task for objective dpo, orpo or kto."""
    return get_task("preference" if getattr(spec, "objective", "sft") != "sft" else spec.task)
