"""The generation settings: system prompt, chat template, sampling, length, stop sequences and seed.

Every control takes its bounds, default and tooltip from engine.api.playground.GenerateSettings, the model
the engine validates with, so the form never offers a value the engine would refuse. ``settings()``
returns what ``playground.chat`` takes; ``problem()`` says what is wrong with the form, if anything.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import QRegularExpression, Signal
from PySide6.QtGui import QRegularExpressionValidator
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import label, show_text
from engine.api.playground import TEMPLATE_NAMES, GenerateSettings

FIELDS = GenerateSettings.model_fields
TEMPLATE_TEXT = {
    "model": "Model's own",
    "chatml": "ChatML",
    "llama3": "Llama 3",
    "plain": "Plain text",
}
# Step and decimals of the decimal fields; their bounds come from GenerateSettings.
DECIMALS = {"temperature": (0.1, 2), "top_p": (0.05, 2), "repetition_penalty": (0.05, 2)}
ON_SCREEN = {"system": "System prompt", "template": "Chat template", "temperature": "Temperature",
             "top_p": "Top-p", "top_k": "Top-k", "max_new_tokens": "Max new tokens",
             "repetition_penalty": "Repetition penalty", "stop": "Stop sequences", "seed": "Seed"}
MORE_HELP = {
    "top_p": "sample only from the most likely tokens whose probabilities add up to this",
    "max_new_tokens": "the longest answer, in tokens",
    "repetition_penalty": "above 1 makes repeating earlier tokens less likely",
    "stop": "one a line",
    "seed": "empty: a new one each time",
}


def bounds(name: str) -> tuple[float | None, float | None, float | None]:
    """(ge, le, gt) of a GenerateSettings field (None where it sets none)."""
    ge = le = gt = None
    for meta in FIELDS[name].metadata:
        ge = getattr(meta, "ge", ge)
        le = getattr(meta, "le", le)
        gt = getattr(meta, "gt", gt)
    return ge, le, gt


def tooltip(name: str) -> str:
    parts = [FIELDS[name].description or "", MORE_HELP.get(name, "")]
    return "; ".join(p for p in parts if p).capitalize() + f". Setting: {name}."


def problem_text(err: ValidationError) -> str:
    """The first problem, naming the field as the form does."""
    first = err.errors()[0]
    where = ON_SCREEN.get(str(first["loc"][0]) if first.get("loc") else "", "A setting")
    ctx = first.get("ctx") or {}
    if first.get("type") == "too_long" and "max_length" in ctx:
        return f"{where}: at most {ctx['max_length']}, not {ctx.get('actual_length', 'more')}."
    return f"{where}: {first['msg']}."


class SettingsForm(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(8)
        box.addWidget(label(ON_SCREEN["system"]))
        self.system_edit = QPlainTextEdit()
        self.system_edit.setPlaceholderText("Optional: how the model should answer")
        self.system_edit.setFixedHeight(64)
        self._named(self.system_edit, "system")
        box.addWidget(self.system_edit)

        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.template_combo = QComboBox()
        self.template_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.template_combo.setMinimumContentsLength(8)
        for name in TEMPLATE_NAMES:
            self.template_combo.addItem(TEMPLATE_TEXT.get(name, name), name)
        self._named(self.template_combo, "template")
        form.addRow(label(ON_SCREEN["template"]), self.template_combo)
        self.spins: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for name in ("temperature", "top_p", "top_k", "max_new_tokens", "repetition_penalty"):
            spin = self._spin(name)
            self.spins[name] = spin
            form.addRow(label(ON_SCREEN[name]), spin)
        self.seed_edit = QLineEdit()
        self.seed_edit.setPlaceholderText("random")
        self.seed_edit.setValidator(QRegularExpressionValidator(QRegularExpression(r"\d{0,19}"), self.seed_edit))
        self._named(self.seed_edit, "seed")
        form.addRow(label(ON_SCREEN["seed"]), self.seed_edit)
        box.addLayout(form)
        box.addWidget(label(ON_SCREEN["stop"]))
        self.stop_edit = QPlainTextEdit()
        self.stop_edit.setPlaceholderText("One a line, e.g. ###")
        self.stop_edit.setFixedHeight(52)
        self._named(self.stop_edit, "stop")
        box.addWidget(self.stop_edit)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        box.addWidget(self.message)
        self.reset_button = QPushButton("Reset to defaults")
        self.reset_button.setToolTip("Every setting back to its default")
        self.reset_button.clicked.connect(self.reset)
        box.addWidget(self.reset_button)

        for edit in (self.system_edit, self.stop_edit):
            edit.textChanged.connect(self._changed)
        self.seed_edit.textChanged.connect(self._changed)
        self.template_combo.currentIndexChanged.connect(self._changed)
        self.reset()

    def _named(self, widget: QWidget, name: str) -> None:
        widget.setToolTip(tooltip(name))
        widget.setAccessibleName(ON_SCREEN[name])

    def _spin(self, name: str) -> QSpinBox | QDoubleSpinBox:
        ge, le, gt = bounds(name)
        if FIELDS[name].annotation is int:
            spin: QSpinBox | QDoubleSpinBox = QSpinBox()
            low = ge if ge is not None else (gt + 1 if gt is not None else 0)
            spin.setRange(int(low), int(le if le is not None else 2**31 - 1))
            spin.valueChanged.connect(self._changed)
        else:
            step, decimals = DECIMALS.get(name, (0.1, 2))
            spin = QDoubleSpinBox()
            spin.setDecimals(decimals)
            spin.setSingleStep(step)
            low = ge if ge is not None else (gt + 10 ** -decimals if gt is not None else 0.0)
            spin.setRange(float(low), float(le if le is not None else 1e9))
            spin.valueChanged.connect(self._changed)
        self._named(spin, name)
        return spin

    def _changed(self, *_args: Any) -> None:
        show_text(self.message, self.problem())
        self.changed.emit()

    # -- values ----------------------------------------------------------------------------

    def reset(self) -> None:
        defaults = GenerateSettings()
        self.set_settings(defaults.model_dump())

    def set_settings(self, values: dict[str, Any]) -> None:
        """Show ``values`` (a GenerateSettings dict; missing keys keep their defaults)."""
        s = GenerateSettings.model_validate({**GenerateSettings().model_dump(), **values})
        self.system_edit.setPlainText(s.system or "")
        self.template_combo.setCurrentIndex(max(0, self.template_combo.findData(s.template)))
        for name, spin in self.spins.items():
            spin.setValue(getattr(s, name))
        self.seed_edit.setText("" if s.seed is None else str(s.seed))
        self.stop_edit.setPlainText("\n".join(s.stop))
        self._changed()

    def values(self) -> dict[str, Any]:
        """What the form holds, unchecked."""
        seed = self.seed_edit.text().strip()
        return {
            "system": self.system_edit.toPlainText().strip() or None,
            "template": self.template_combo.currentData(),
            **{name: spin.value() for name, spin in self.spins.items()},
            "stop": [line for line in self.stop_edit.toPlainText().split("\n") if line],
            "seed": int(seed) if seed else None,
        }

    def problem(self) -> str:
        try:
            GenerateSettings.model_validate(self.values())
        except ValidationError as err:
            return problem_text(err)
        return ""

    def settings(self) -> dict[str, Any]:
        """The settings for playground.chat; raises ValueError (the form's message) when one is invalid."""
        try:
            return GenerateSettings.model_validate(self.values()).model_dump()
        except ValidationError as err:
            raise ValueError(problem_text(err)) from None
