"""A step made of form fields: each field has a widget, a title and the message under it."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from app.widgets.wizard_parts import Step, with_message


def spin(low: int, high: int, tip: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setToolTip(tip)
    box.setMinimumWidth(110)
    return box


def combo(items: list[tuple[str, Any]], tip: str = "") -> QComboBox:
    box = QComboBox()
    for text, data in items:
        box.addItem(text, data)
    box.setToolTip(tip)
    return box


class ChoiceRow(QWidget):
    """A row of checkboxes for a list field (GGUF types, ONNX-GenAI precisions); its value is the ticked names."""

    toggled = Signal(bool)

    def __init__(self, names: tuple[str, ...], tip: str = ""):
        super().__init__()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.checks = {n: QCheckBox(n) for n in names}
        for check in self.checks.values():
            check.setToolTip(tip)
            check.toggled.connect(self.toggled)
            row.addWidget(check)
        row.addStretch(1)

    def value(self) -> list[str]:
        return [n for n, c in self.checks.items() if c.isChecked()]

    def set_value(self, names: Any) -> None:
        for n, c in self.checks.items():
            c.setChecked(n in (names or ()))


def value_of(widget: QWidget) -> Any:
    if isinstance(widget, ChoiceRow):
        return widget.value()
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        return widget.value()
    if isinstance(widget, QComboBox):
        return widget.currentData()
    if isinstance(widget, QLineEdit):
        return widget.text()
    raise TypeError(type(widget).__name__)


def set_value(widget: QWidget, value: Any) -> None:
    if isinstance(widget, ChoiceRow):
        widget.set_value(value)
    elif isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    elif isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        widget.setValue(value)
    elif isinstance(widget, QComboBox):
        index = widget.findData(value)
        widget.setCurrentIndex(max(index, 0))
    elif isinstance(widget, QLineEdit):
        widget.setText("" if value is None else str(value))


class FormStep(Step):
    """A Step whose ``fields`` (spec field -> widget) fill ``values()`` and show their errors."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.fields: dict[str, QWidget] = {}
        self.titles: dict[str, str] = {}

    def add_field(self, form: QFormLayout, key: str, title: str, widget: QWidget) -> None:
        self.fields[key] = widget
        self.titles[key] = title
        form.addRow(title, with_message(widget, self.message_for(key)))
        for signal in ("valueChanged", "currentIndexChanged", "toggled", "textEdited"):
            if hasattr(widget, signal):
                getattr(widget, signal).connect(self.emit_changed)

    def values(self) -> dict[str, Any]:
        return {key: value_of(widget) for key, widget in self.fields.items()}

    def label_of(self, path: str) -> str:
        return self.titles.get(path.split(".", 1)[0], path)

    def _load(self, spec: dict[str, Any]) -> None:
        for key, widget in self.fields.items():
            if key in spec:
                set_value(widget, spec[key])
