"""What a page shows while it has nothing to show: an icon, a title, one line, and the way on.

Every empty page says what would fill it and offers the one action that does,
so a newcomer never meets a blank panel. Pages keep the returned widget in a
QStackedWidget (or show/hide it) next to their real content.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QPushButton, QVBoxLayout, QWidget

from app.state.style import icon, set_role
from app.widgets.common import label

ICON_SIZE = 40


class EmptyState(QWidget):
    """The widget empty_state() builds; ``title_label``, ``text_label`` and ``action_button`` (or None)."""

    def __init__(self, title: str, text: str, action_text: str | None = None,
                 on_action: Callable[[], object] | None = None, icon_name: str = "ember",
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("emptyState")
        box = QVBoxLayout(self)
        box.setContentsMargins(24, 24, 24, 24)
        box.setSpacing(8)
        box.addStretch(1)
        picture = QLabel()
        picture.setPixmap(icon(icon_name).pixmap(QSize(ICON_SIZE, ICON_SIZE)))
        picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        picture.setAccessibleName("")  # decoration only
        box.addWidget(picture)
        self.title_label = label(title, "h2")
        self.title_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        box.addWidget(self.title_label)
        self.text_label = label(text, "muted", wrap=True)
        self.text_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        box.addWidget(self.text_label)
        self.action_button: QPushButton | None = None
        if action_text:
            self.action_button = QPushButton(action_text)
            set_role(self.action_button, "primary")
            if on_action is not None:
                self.action_button.clicked.connect(lambda _checked=False: on_action())
            box.addSpacing(6)
            box.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignHCenter)
        box.addStretch(1)
        self.setAccessibleName(title)
        self.setAccessibleDescription(text)

    def set_text(self, text: str) -> None:
        """Change the line under the title (a page may know more about why it is empty)."""
        self.text_label.setText(text)
        self.setAccessibleDescription(text)


def empty_state(title: str, text: str, action_text: str | None = None,
                on_action: Callable[[], object] | None = None, icon_name: str = "ember") -> EmptyState:
    """An empty-state panel: icon, ``title``, one line of ``text`` and an optional action button."""
    return EmptyState(title, text, action_text, on_action, icon_name)

