"""The page shown for a workflow that is not built yet.

It says plainly what the page will do, so nobody mistakes it for a broken or
empty screen, and it offers no controls that pretend to work.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.widgets.common import card, label


class PlaceholderPage(QWidget):
    def __init__(self, title: str, summary: str, abilities: list[str],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        outer = QVBoxLayout(self)
        outer.setContentsMargins(28, 24, 28, 24)
        outer.setSpacing(14)

        header = QHBoxLayout()
        header.addWidget(label(title, "h1"))
        header.addSpacing(10)
        header.addWidget(label("Not built yet", "pill"), 0, Qt.AlignmentFlag.AlignVCenter)
        header.addStretch(1)
        outer.addLayout(header)

        frame, body = card(self)
        body.addWidget(label(summary, wrap=True))
        body.addSpacing(4)
        body.addWidget(label("What you will be able to do here", "h2"))
        for ability in abilities:
            body.addWidget(label(f"•  {ability}", wrap=True))
        outer.addWidget(frame)
        outer.addStretch(1)

    def text(self) -> str:
        """All the words on the page (tests use it to check a page is not blank)."""
        return "\n".join(w.text() for w in self.findChildren(QLabel))
