"""Step 2: which techniques to try; each ticked one becomes one job and one variant."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QWidget

from app.glossary import option_tooltip
from app.pages.compress.techniques import TECHNIQUES, unavailable_reason
from app.widgets.check_list import CheckList
from app.widgets.common import card
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, step_header


class TechniquesStep(Step):
    title = "Techniques"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Which techniques?",
                                              "Tick as many as you like: each one runs as its own job and is "
                                              "measured next to the source run, so you can pick the best trade-off "
                                              "afterwards."))
        frame, box = card()
        self.check_list = CheckList(spacing=(28, 16, 3))
        for tech in TECHNIQUES:
            self.check_list.add(tech.key, tech.title, [(tech.summary, ""), (f"Trade-off: {tech.tradeoff}", "muted")])
        self.check_list.toggled.connect(self.emit_changed)
        self.technique_checks = self.check_list.checks
        self.reasons = self.check_list.reasons
        box.addWidget(self.check_list)
        box.addWidget(self.general_message)
        outer.addWidget(frame)
        outer.addStretch(1)
        self.set_source(None)

    def set_source(self, record: dict[str, Any] | None) -> None:
        """Enable what applies to ``record``; say why the rest does not (and untick it)."""
        for key in self.technique_checks:
            reason = unavailable_reason(key, record) if record is not None else ""
            self.check_list.set_reason(key, reason, tip=option_tooltip(key), enabled=record is not None)

    def checked(self) -> list[str]:
        return self.check_list.checked()

    def blocking(self) -> list[str]:
        return [] if self.checked() else ["tick at least one technique"]
