"""Stylesheet and icons from app/resources/, and the helpers pages use to apply them.

Styling is driven by dynamic properties (``role``, ``state``) that the
stylesheet selects on, so a page says what a widget *is* ("primary", "muted",
"card") and the look lives in one file.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QWidget

log = logging.getLogger(__name__)

# Inside the package, so a wheel or a pipx install carries them too.
RESOURCES = Path(__file__).resolve().parent / "resources"


def apply_stylesheet(app: QApplication) -> None:
    path = RESOURCES / "style.qss"
    try:
        app.setStyleSheet(path.read_text(encoding="utf-8"))
    except OSError:
        # A missing stylesheet makes the app plain, not broken.
        log.warning("stylesheet not found at %s", path)


def icon(name: str) -> QIcon:
    path = RESOURCES / "icons" / f"{name}.svg"
    return QIcon(str(path)) if path.is_file() else QIcon()


def set_role(widget: QWidget, role: str) -> QWidget:
    widget.setProperty("role", role)
    return widget


def set_state(widget: QWidget, state: str) -> None:
    """Change the ``state`` property and make the stylesheet notice."""
    if widget.property("state") == state:
        return
    widget.setProperty("state", state)
    widget.style().unpolish(widget)
    widget.style().polish(widget)
    for child in widget.findChildren(QWidget):
        child.style().unpolish(child)
        child.style().polish(child)
