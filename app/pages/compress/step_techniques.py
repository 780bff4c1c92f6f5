"""Step 2: which techniques to try; each ticked one becomes one job and one variant, or all of them one chain."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QHBoxLayout, QPushButton, QWidget

from app.models.variants import DEPLOY_TARGETS
from app.pages.compress.techniques import (
    BY_KEY,
    TECHNIQUES,
    chain_order,
    chain_reason,
    deploy_advice,
    unavailable_reason,
)
from app.text.glossary import option_tooltip
from app.widgets.check_list import CheckList
from app.widgets.common import card, label
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, step_header


class TechniquesStep(Step):
    title = "Techniques"
    preset_requested = Signal(str)  # a chain preset's name (engine/api/chain_spec.py PRESETS)
    deploy_changed = Signal(str)  # a DEPLOY_TARGETS key

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Where will it run, and which techniques?",
                                              "Choose where the model will run first: it decides which techniques "
                                              "pay off there. Tick as many as you like: each one runs as its own "
                                              "job and is measured next to the source run."))
        deploy_frame, deploy_box = card()
        deploy_form = QFormLayout()
        self.deploy_combo = QComboBox()
        for key, text in DEPLOY_TARGETS.items():
            self.deploy_combo.addItem(text, key)
        self.deploy_combo.setToolTip("Static int8 and QAT are made in this place's int8 form, and Compare opens "
                                     "with its figures: latencies count only where they were measured.")
        self.deploy_combo.currentIndexChanged.connect(self._on_deploy)
        deploy_form.addRow("Deploy on", self.deploy_combo)
        deploy_box.addLayout(deploy_form)
        self.deploy_line = label("", "muted", wrap=True)
        deploy_box.addWidget(self.deploy_line)
        suggested = QHBoxLayout()
        self.suggest_button = QPushButton("Tick what suits it")
        self.suggest_button.setToolTip("Tick the techniques that suit this place and untick the others.")
        self.suggest_button.clicked.connect(self.tick_suggested)
        suggested.addWidget(self.suggest_button)
        suggested.addStretch(1)
        deploy_box.addLayout(suggested)
        outer.addWidget(deploy_frame)
        self._record: dict[str, Any] | None = None

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

        chain_frame, chain_box = card()
        self.chain_check = QCheckBox("Apply them in order, as one chain")
        self.chain_check.setStyleSheet("font-weight: 600;")
        self.chain_check.setToolTip("Each stage compresses the previous stage's output: distil, then prune, then "
                                    "quantize. Compare shows the chain as one row, scored beside this run.")
        self.chain_check.toggled.connect(self.emit_changed)
        chain_box.addWidget(self.chain_check)
        self.chain_line = label("", "muted", wrap=True)
        chain_box.addWidget(self.chain_line)
        presets = QHBoxLayout()
        self.preset_button = QPushButton("Preset: smallest within 1 point")
        self.preset_button.setToolTip("Distil to 3 layers (300 steps), then dynamic int8. docs/compression.md has "
                                      "what it measured on the built-in tickets.")
        self.preset_button.clicked.connect(lambda: self.preset_requested.emit("smallest within 1 point"))
        presets.addWidget(self.preset_button)
        presets.addStretch(1)
        chain_box.addLayout(presets)
        outer.addWidget(chain_frame)
        self.check_list.toggled.connect(self._chain_text)
        outer.addStretch(1)
        self.set_source(None)

    def set_source(self, record: dict[str, Any] | None) -> None:
        """Enable what applies to ``record``; say why the rest does not (and untick it)."""
        for key in self.technique_checks:
            reason = unavailable_reason(key, record) if record is not None else ""
            self.check_list.set_reason(key, reason, tip=option_tooltip(key), enabled=record is not None)

        self.preset_button.setEnabled(record is not None and not unavailable_reason("distill", record))
        self._record = record
        self._chain_text()
        self._deploy_text()

    def deploy(self) -> str:
        return self.deploy_combo.currentData() or "cpu"

    def set_deploy(self, key: str) -> None:
        self.deploy_combo.setCurrentIndex(max(0, self.deploy_combo.findData(key)))

    def tick_suggested(self) -> None:
        self.set_checked(deploy_advice(self.deploy(), self._record)[0])

    def _on_deploy(self) -> None:
        self._deploy_text()
        self.deploy_changed.emit(self.deploy())

    def _deploy_text(self) -> None:
        suits, avoid = deploy_advice(self.deploy(), self._record)
        where = DEPLOY_TARGETS.get(self.deploy(), self.deploy())
        text = f"Suits {where}: " + (", ".join(BY_KEY[k].title for k in suits) or "nothing for this run")
        if avoid:
            text += ". Not for it: " + "; ".join(f"{BY_KEY[k].title} ({why})" for k, why in avoid.items())
        self.deploy_line.setText(text + ".")
        self.suggest_button.setEnabled(self._record is not None and bool(suits))

    def checked(self) -> list[str]:
        return self.check_list.checked()

    def chain(self) -> bool:
        return self.chain_check.isChecked()

    def set_checked(self, keys: list[str]) -> None:
        for key, check in self.technique_checks.items():
            check.setChecked(key in keys and check.isEnabled())

    def _chain_text(self) -> None:
        keys = self.checked()
        reason = chain_reason(keys)
        self.chain_line.setText(reason or "Stages: " + " → ".join(BY_KEY[k].title for k in chain_order(keys)))

    def blocking(self) -> list[str]:
        if not self.checked():
            return ["tick at least one technique"]
        reason = chain_reason(self.checked()) if self.chain() else ""
        return [reason] if reason else []
