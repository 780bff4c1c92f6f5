"""Step 4: the job file Start sends (the same YAML ``ember run`` takes) and what is still wrong."""

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

from app.pages.new_finetune.parts import Step, show_text, step_header
from app.widgets.common import card, label

COMMAND = "ember run export.yaml"


class ReviewStep(Step):
    title = "Review"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Review",
                                    "This is exactly what Start sends to the engine. Saved as export.yaml, "
                                    "the same job runs without the window."))
        frame, box = card()
        head = QHBoxLayout()
        self.summary = label("", "h2", wrap=True)
        head.addWidget(self.summary, 1)
        self.copy_button = QPushButton("Copy YAML")
        self.copy_button.setToolTip("Copy the job file to the clipboard")
        self.copy_button.clicked.connect(lambda: self._copy(self.review_view.toPlainText(), "The YAML"))
        head.addWidget(self.copy_button)
        box.addLayout(head)
        self.blockers = label("", "error", wrap=True)
        self.blockers.hide()
        box.addWidget(self.blockers)
        self.review_view = QPlainTextEdit()
        self.review_view.setObjectName("log")  # the stylesheet's monospace look
        self.review_view.setReadOnly(True)
        self.review_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.review_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.review_view.setMinimumHeight(320)
        box.addWidget(self.review_view, 1)
        box.addWidget(label("The same job from a terminal (save the YAML above as export.yaml first):", "muted"))
        row = QHBoxLayout()
        self.command = QLineEdit(COMMAND)
        self.command.setReadOnly(True)
        self.command.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        row.addWidget(self.command, 1)
        copy_command = QPushButton("Copy command")
        copy_command.clicked.connect(lambda: self._copy(self.command.text(), "The command"))
        row.addWidget(copy_command)
        box.addLayout(row)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)
        outer.addWidget(frame, 1)

    def set_job(self, name: str, text: str, formats: list[str]) -> None:
        self.summary.setText(f"{name}: {', '.join(formats) or 'no format yet'}")
        if text != self.review_view.toPlainText():
            self.review_view.setPlainText(text)
        show_text(self.note, "")

    def set_blockers(self, problems: list[str]) -> None:
        show_text(self.blockers, "Fix before starting:\n" + "\n".join(f"• {p}" for p in problems[:12])
                  if problems else "")

    def _copy(self, text: str, what: str) -> None:
        QGuiApplication.clipboard().setText(text)
        show_text(self.note, f"{what} is on the clipboard.")
