"""Step 4: every job that Start will send, as YAML (one document per job)."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QWidget

from app.pages.compress.techniques import jobs_yaml
from app.widgets.review_pane import ReviewPane
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, step_header


class ReviewStep(Step):
    title = "Review"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Review",
                                              "This is exactly what Start sends to the engine: one job per "
                                              "technique. Each document also runs on its own with `ember run`."))
        self.pane = ReviewPane(("Copy", "Copy the YAML to the clipboard", "Copied to the clipboard."), min_height=360)
        outer.addWidget(self.pane, 1)
        self.review_view = self.pane.view  # what tests read

    def set_jobs(self, jobs: list[tuple[str, dict[str, Any], str]]) -> None:
        count = len(jobs)
        self.pane.set_text(f"{count} job{'s' if count != 1 else ''} will start"
                           + (": " + ", ".join(name for _k, _s, name in jobs) if jobs else ""), jobs_yaml(jobs))

    def set_blockers(self, problems: list[str]) -> None:
        self.pane.set_blockers(problems)
