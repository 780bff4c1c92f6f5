"""Variants: a parent run and its compressed variants side by side (hosted by Compare).

``VariantsView`` needs pyqtgraph; it is imported on first use, so ``app.models.variants``
(plain Python) can be used without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VariantsView"]


def __getattr__(name: str) -> Any:
    if name == "VariantsView":
        from app.pages.compare.variants.view import VariantsView

        return VariantsView
    raise AttributeError(name)
