"""The prompt box: Enter sends, Shift+Enter starts a new line."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget

ENTER_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


class PromptBox(QPlainTextEdit):
    submitted = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setPlaceholderText("Ask something… (Enter sends, Shift+Enter for a new line)")
        self.setAccessibleName("Prompt")
        self.setToolTip("Enter sends the prompt; Shift+Enter starts a new line")
        self.setFixedHeight(72)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() in ENTER_KEYS:
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")  # a plain newline, not Qt's line separator character
            else:
                self.submitted.emit()
            event.accept()
            return
        super().keyPressEvent(event)
