"""Compare: runs side by side (charts, spec differences, sweeps), a run's variants and its evaluations."""

from app.pages.compare.page import ComparePage

__all__ = ["ComparePage"]
