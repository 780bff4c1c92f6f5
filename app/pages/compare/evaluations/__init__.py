"""Evaluations: a run's base model, the run and its variants scored side by side (hosted by Compare)."""

from __future__ import annotations

from app.pages.compare.evaluations.view import EvaluationsView

__all__ = ["EvaluationsView"]
