"""A selected variant next to its parent, class by class: F1 side by side and the confusion difference.

Both come from the variant's own evaluation.json, where the parent was measured
in the same job on the same examples, so a difference is the variant's doing.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.models.variants import Row, per_class_pair
from app.widgets.common import label

GOOD, BAD = (43, 138, 62), (201, 42, 42)


def _table(columns: int) -> QTableWidget:
    table = QTableWidget(0, columns)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    table.setShowGrid(False)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.setMinimumHeight(160)
    return table


def _cell(text: str, align_right: bool = True) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def heat(value: int, largest: int, diagonal: bool) -> QColor:
    """Green where the variant got better (more right on the diagonal, fewer wrong off it), red where worse."""
    good = value > 0 if diagonal else value < 0
    r, g, b = GOOD if good else BAD
    alpha = int(40 + 170 * min(1.0, abs(value) / max(1, largest)))
    return QColor(r, g, b, alpha)


class PerClassView(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(6)
        self.title = label("Per class", "h2")
        outer.addWidget(self.title)
        self.note = label("Select a variant in the table to compare it with the parent class by class.",
                          "muted", wrap=True)
        outer.addWidget(self.note)
        row = QHBoxLayout()
        left, right = QVBoxLayout(), QVBoxLayout()
        left.addWidget(label("F1 by class", "muted"))
        self.f1_table = _table(4)
        self.f1_table.setHorizontalHeaderLabels(["Class", "Parent F1", "Variant F1", "Δ"])
        self.f1_table.verticalHeader().hide()
        left.addWidget(self.f1_table)
        self.confusion_title = label("Confusion difference (variant − parent); rows: true class, "
                                     "columns: predicted", "muted", wrap=True)
        right.addWidget(self.confusion_title)
        self.confusion_table = _table(0)
        self.confusion_table.setToolTip("Green: the variant does better there (more right on the diagonal, "
                                        "fewer mistakes off it); red: worse")
        right.addWidget(self.confusion_table)
        row.addLayout(left, 1)
        row.addLayout(right, 1)
        outer.addLayout(row, 1)
        self.diff: list[list[int]] | None = None
        self.show_row(None)

    def show_row(self, row: Row | None) -> None:
        self.f1_table.setRowCount(0)
        self.confusion_table.setRowCount(0)
        self.confusion_table.setColumnCount(0)
        self.diff = None
        if row is None or row.is_parent:
            self.title.setText("Per class")
            self.note.setText("Select a variant in the table to compare it with the parent class by class.")
            return
        self.title.setText(f"Per class: {row.technique} vs parent")
        if row.entry is None:
            self.note.setText(f"{row.name} has no evaluation yet ({row.state}).")
            return
        classes, diff, labels = per_class_pair(row)
        if not classes and diff is None:
            self.note.setText("No per-class figures for this task (a causal LM is scored by perplexity).")
            return
        self.note.setText("Measured in the variant's own job: parent and variant on the same examples.")
        self.f1_table.setRowCount(len(classes))
        for i, c in enumerate(classes):
            delta = c["delta"]
            cells = [_cell(str(c["label"]), False),
                     _cell("—" if c["parent_f1"] is None else f"{c['parent_f1']:.3f}"),
                     _cell("—" if c["variant_f1"] is None else f"{c['variant_f1']:.3f}"),
                     _cell("—" if delta is None else f"{delta:+.3f}")]
            if delta:
                cells[3].setForeground(QColor("#2b8a3e") if delta > 0 else QColor("#c92a2a"))
            for col, item in enumerate(cells):
                self.f1_table.setItem(i, col, item)
        self.diff = diff
        if diff is None:
            self.confusion_title.setText("No confusion matrices to compare.")
            return
        n = len(diff)
        names = [str(x) for x in labels[:n]] + [str(i) for i in range(len(labels), n)]
        self.confusion_table.setRowCount(n)
        self.confusion_table.setColumnCount(n)
        self.confusion_table.setHorizontalHeaderLabels(names)
        self.confusion_table.setVerticalHeaderLabels(names)
        largest = max((abs(v) for r in diff for v in r), default=0)
        for i in range(n):
            for j in range(n):
                value = diff[i][j]
                item = _cell(f"{value:+d}" if value else "0")
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                if value:
                    item.setBackground(heat(value, largest, i == j))
                else:
                    item.setForeground(QColor("#a3abb4"))
                self.confusion_table.setItem(i, j, item)
        self.confusion_title.setText("Confusion difference (variant − parent); rows: true class, "
                                     "columns: predicted")
