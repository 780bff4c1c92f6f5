"""Specs side by side: one row per setting (``method.lora_r``), one column per run.

Rows whose values differ between runs are highlighted, and "Only differences"
hides the rest, so what changed between two runs is the first thing you read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import label

DIFF_BACKGROUND = "#fff4e6"  # the accent's palest tint: "look here"
MISSING = "—"


def flatten(spec: Any, prefix: str = "") -> dict[str, Any]:
    """{'method': {'lora_r': 8}} -> {'method.lora_r': 8}; lists stay whole values."""
    if not isinstance(spec, dict):
        return {prefix: spec} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in spec.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def value_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "))
    return str(value)


class SpecDiff(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._rows: list[tuple[str, bool]] = []  # (key, differs)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(label("Specs side by side", "h2"))
        self.summary = label("", "muted")
        top.addWidget(self.summary, 1)
        self.only_differences = QCheckBox("Only differences")
        self.only_differences.setToolTip("Hide the settings every run has in common")
        self.only_differences.toggled.connect(self._apply_filter)
        top.addWidget(self.only_differences)
        layout.addLayout(top)
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        self.table.setAlternatingRowColors(False)  # only the differing rows are tinted
        head = self.table.horizontalHeader()
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        head.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().hide()
        layout.addWidget(self.table, 1)

    def set_specs(self, names: Sequence[str], specs: Sequence[dict[str, Any]],
                  colours: Sequence[str] = ()) -> None:
        flat = [flatten(spec or {}) for spec in specs]
        keys: list[str] = []
        for spec in flat:  # first run's order, then keys only later runs have
            keys += [k for k in spec if k not in keys]
        self.table.clear()
        self.table.setColumnCount(len(names) + 1)  # the setting, then one column per run
        self.table.setRowCount(len(keys))
        self.table.setHorizontalHeaderLabels(["Setting", *names])
        for col, colour in enumerate(colours, start=1):
            header = self.table.horizontalHeaderItem(col)
            if header is not None:
                header.setForeground(QBrush(QColor(colour)))
        highlight = QBrush(QColor(DIFF_BACKGROUND))
        bold = QFont()
        bold.setBold(True)
        self._rows = []
        for row, key in enumerate(keys):
            texts = [value_text(spec[key]) if key in spec else MISSING for spec in flat]
            differs = len(set(texts)) > 1
            self._rows.append((key, differs))
            for col, text in enumerate([key, *texts]):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{key} = {text}" if col else key)
                if differs:
                    item.setBackground(highlight)
                    item.setFont(bold)
                self.table.setItem(row, col, item)
        count = len(self.differing_keys())
        self.summary.setText("" if len(names) < 2 else
                             f"{count} setting(s) differ, highlighted" if count else
                             "the specs are identical")
        self._apply_filter()

    def differing_keys(self) -> list[str]:
        return [key for key, differs in self._rows if differs]

    def keys(self) -> list[str]:
        return [key for key, _ in self._rows]

    def is_highlighted(self, key: str) -> bool:
        return key in self.differing_keys()

    def _apply_filter(self) -> None:
        only = self.only_differences.isChecked()
        for row, (_key, differs) in enumerate(self._rows):
            self.table.setRowHidden(row, only and not differs)
