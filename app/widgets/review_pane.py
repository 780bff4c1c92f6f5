"""The card a wizard's Review step shows: a summary, the YAML Start sends, what still blocks it, copy buttons."""

from __future__ import annotations

from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import card, label, show_text

BLOCKERS_SHOWN = 12  # more would push the YAML out of view; the first ones are what to fix first


class ReviewPane(QWidget):
    """The card; ``command`` (a line to copy) is there only when the wizard gives one.

    ``copy_button`` is (its text, its tooltip, the note once it has copied the YAML).
    """

    def __init__(self, copy_button: tuple[str, str, str], min_height: int, command: tuple[str, str] | None = None,
                 parent: QWidget | None = None):
        """``command``: (what the line above it says, the command), e.g. how to run the YAML from a terminal."""
        super().__init__(parent)
        frame, box = card()
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(frame)
        head = QHBoxLayout()
        self.summary = label("", "h2", wrap=True)
        head.addWidget(self.summary, 1)
        text, tip, copied = copy_button
        self.copy_button = QPushButton(text)
        self.copy_button.setToolTip(tip)
        self.copy_button.clicked.connect(lambda: self.copy(self.view.toPlainText(), copied))
        head.addWidget(self.copy_button)
        box.addLayout(head)
        self.blockers = label("", "error", wrap=True)
        self.blockers.hide()
        box.addWidget(self.blockers)
        self.view = QPlainTextEdit()
        self.view.setObjectName("log")  # the stylesheet's monospace look
        self.view.setReadOnly(True)
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.view.setMinimumHeight(min_height)
        box.addWidget(self.view, 1)
        self.command: QLineEdit | None = None
        if command is not None:
            self._add_command(box, *command)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)

    def _add_command(self, box: QVBoxLayout, intro: str, command: str) -> None:
        box.addWidget(label(intro, "muted"))
        row = QHBoxLayout()
        self.command = QLineEdit(command)
        self.command.setReadOnly(True)
        self.command.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        row.addWidget(self.command, 1)
        copy_command = QPushButton("Copy command")
        copy_command.clicked.connect(lambda: self.copy(self.command.text(), "The command is on the clipboard."))
        row.addWidget(copy_command)
        box.addLayout(row)

    def set_text(self, summary: str, text: str) -> None:
        self.summary.setText(summary)
        if text != self.view.toPlainText():  # keeps the scroll position while nothing changed
            self.view.setPlainText(text)
        show_text(self.note, "")

    def set_blockers(self, problems: list[str]) -> None:
        show_text(self.blockers, "Fix before starting:\n" + "\n".join(f"• {p}" for p in problems[:BLOCKERS_SHOWN])
                  if problems else "")

    def copy(self, text: str, note: str) -> None:
        QGuiApplication.clipboard().setText(text)
        show_text(self.note, note)
