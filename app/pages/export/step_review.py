"""Step 4: the job file Start sends (the same YAML ``ember run`` takes) and what is still wrong."""

from __future__ import annotations

import shlex
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QPushButton, QWidget

from app.widgets.common import label
from app.widgets.review_pane import ReviewPane
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, show_text, step_header

FILE_NAME = "export.yaml"
COMMAND = f"ember run {FILE_NAME}"


class ReviewStep(Step):
    title = "Review"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Review",
                                              "This is exactly what Start sends to the engine. The same job runs "
                                              "without the window: save the YAML (Save YAML…), then run the "
                                              "command below."))
        self.pane = ReviewPane(("Copy YAML", "Copy the job file to the clipboard", "The YAML is on the clipboard."),
                               min_height=320,
                               command=(f"From a terminal, once the YAML is saved (as {FILE_NAME} here):", COMMAND))
        outer.addWidget(self.pane, 1)
        row = QHBoxLayout()
        self.save_button = QPushButton("Save YAML…")
        self.save_button.setToolTip("Save the job file; the command above then names the file you chose")
        self.save_button.clicked.connect(self._save_dialog)
        row.addWidget(self.save_button)
        self.saved_note = label("", "muted", wrap=True)
        self.saved_note.hide()
        row.addWidget(self.saved_note, 1)
        outer.addLayout(row)
        self.saved_path = ""
        # What the page and tests read.
        self.review_view, self.blockers, self.command = self.pane.view, self.pane.blockers, self.pane.command

    def set_job(self, name: str, text: str, formats: list[str]) -> None:
        if self.saved_path and text != self.pane.view.toPlainText():
            show_text(self.saved_note, f"The YAML changed since it was saved as {self.saved_path}: save it again "
                                       "before running the command.")
        self.pane.set_text(f"{name}: {', '.join(formats) or 'no format yet'}", text)

    def set_blockers(self, problems: list[str]) -> None:
        self.pane.set_blockers(problems)

    def write_yaml(self, path: str) -> None:
        """Save the job file shown at ``path``; the command then names it."""
        Path(path).write_text(self.pane.view.toPlainText(), encoding="utf-8")
        self.saved_path = path
        command = f"ember run {shlex.quote(path)}"
        self.command.setText(command)
        show_text(self.saved_note, f"Saved {path}. Run it with: {command}")

    def _save_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the job file", self.saved_path or FILE_NAME,
                                              "YAML (*.yaml *.yml)", options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            try:
                self.write_yaml(path)
            except OSError as exc:
                show_text(self.saved_note, f"Could not save {path}: {exc}")
