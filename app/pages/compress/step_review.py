"""Step 4: every job that Start will send, as YAML (one document per job)."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.pages.compress.techniques import jobs_yaml
from app.pages.new_finetune.parts import Step, show_text, step_header
from app.widgets.common import card, label


class ReviewStep(Step):
    title = "Review"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Review",
                                    "This is exactly what Start sends to the engine: one job per "
                                    "technique. Each document also runs on its own with `ember run`."))
        frame, box = card()
        head = QHBoxLayout()
        self.summary = label("", "h2", wrap=True)
        head.addWidget(self.summary, 1)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the YAML to the clipboard")
        self.copy_button.clicked.connect(self._copy)
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
        self.review_view.setMinimumHeight(360)
        box.addWidget(self.review_view, 1)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)
        outer.addWidget(frame, 1)

    def set_jobs(self, jobs: list[tuple[str, dict[str, Any], str]]) -> None:
        count = len(jobs)
        self.summary.setText(f"{count} job{'s' if count != 1 else ''} will start"
                             + (": " + ", ".join(name for _k, _s, name in jobs) if jobs else ""))
        text = jobs_yaml(jobs)
        if text != self.review_view.toPlainText():
            self.review_view.setPlainText(text)
        show_text(self.note, "")

    def set_blockers(self, problems: list[str]) -> None:
        show_text(self.blockers, "Fix before starting:\n" + "\n".join(f"• {p}" for p in problems[:12])
                  if problems else "")

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.review_view.toPlainText())
        show_text(self.note, "Copied to the clipboard.")
