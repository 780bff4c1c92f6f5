"""Step 4: the job file Start sends (the same YAML ``ember run`` takes) and what is still wrong."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.pages.new_finetune.parts import Step, step_header
from app.widgets.review_pane import ReviewPane
from app.widgets.wizard_frame import step_column

COMMAND = "ember run export.yaml"


class ReviewStep(Step):
    title = "Review"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Review",
                                              "This is exactly what Start sends to the engine. Saved as export.yaml, "
                                              "the same job runs without the window."))
        self.pane = ReviewPane(("Copy YAML", "Copy the job file to the clipboard", "The YAML is on the clipboard."),
                               min_height=320,
                               command=("The same job from a terminal (save the YAML above as export.yaml first):",
                                        COMMAND))
        outer.addWidget(self.pane, 1)
        # What the page and tests read.
        self.review_view, self.blockers, self.command = self.pane.view, self.pane.blockers, self.pane.command

    def set_job(self, name: str, text: str, formats: list[str]) -> None:
        self.pane.set_text(f"{name}: {', '.join(formats) or 'no format yet'}", text)

    def set_blockers(self, problems: list[str]) -> None:
        self.pane.set_blockers(problems)
