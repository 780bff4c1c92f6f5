"""Step 2: which techniques to try; each ticked one becomes one job and one variant."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QCheckBox, QGridLayout, QVBoxLayout, QWidget

from app.pages.compress.techniques import TECHNIQUES, unavailable_reason
from app.pages.new_finetune.parts import Step, show_text, step_header
from app.widgets.common import card, label


class TechniquesStep(Step):
    title = "Techniques"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Which techniques?",
                                    "Tick as many as you like: each one runs as its own job and is "
                                    "measured next to the source run, so you can pick the best trade-off "
                                    "afterwards."))
        frame, box = card()
        grid = QGridLayout()
        grid.setHorizontalSpacing(28)
        grid.setVerticalSpacing(16)
        self.technique_checks: dict[str, QCheckBox] = {}
        self.reasons: dict[str, Any] = {}
        for i, tech in enumerate(TECHNIQUES):
            block = QVBoxLayout()
            block.setSpacing(3)
            check = QCheckBox(tech.title)
            check.setStyleSheet("font-weight: 600;")
            check.toggled.connect(self.emit_changed)
            self.technique_checks[tech.key] = check
            block.addWidget(check)
            for text, role in ((tech.summary, ""), (f"Trade-off: {tech.tradeoff}", "muted")):
                line = label(text, role, wrap=True)
                line.setContentsMargins(24, 0, 0, 0)
                block.addWidget(line)
            reason = label("", "error", wrap=True)
            reason.setContentsMargins(24, 0, 0, 0)
            reason.hide()
            self.reasons[tech.key] = reason
            block.addWidget(reason)
            block.addStretch(1)
            grid.addLayout(block, i // 2, i % 2)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)
        box.addLayout(grid)
        box.addWidget(self.general_message)
        outer.addWidget(frame)
        outer.addStretch(1)
        self.set_source(None)

    def set_source(self, record: dict[str, Any] | None) -> None:
        """Enable what applies to ``record``; say why the rest does not (and untick it)."""
        for key, check in self.technique_checks.items():
            reason = unavailable_reason(key, record) if record is not None else ""
            check.setEnabled(record is not None and not reason)
            if reason and check.isChecked():
                check.setChecked(False)
            show_text(self.reasons[key], reason)
            check.setToolTip(reason)

    def checked(self) -> list[str]:
        return [k for k, c in self.technique_checks.items() if c.isChecked() and c.isEnabled()]

    def blocking(self) -> list[str]:
        return [] if self.checked() else ["tick at least one technique"]
