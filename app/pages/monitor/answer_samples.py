"""The Monitor's table of generated answers: the latest evaluation's prompts, references and what the
model wrote (causal LM runs; docs/recipes.md, "Generation metrics").

Fed the run's events like the charts: an ``eval`` event with a ``samples`` list replaces the table,
so a replayed history ends on the run's last evaluation. Hidden until a run reports samples, so
classification runs never show it.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.text import format as fmt
from app.widgets.common import label, show_text

COLUMNS = ("Prompt", "Reference", "Generated")


class AnswerSamples(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(4)
        outer.addWidget(label("Generated answers", "h2"))
        self.caption = label("", "muted", wrap=True)
        outer.addWidget(self.caption)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(True)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setMinimumHeight(150)
        self.table.setAccessibleName("Generated answers")
        self.table.setToolTip("Greedy answers to the first validation prompts at the latest evaluation, "
                              "beside the answers in the data (generate_eval in the spec)")
        outer.addWidget(self.table, 1)
        self.step: int | None = None
        self.clear()

    def clear(self) -> None:
        self.table.setRowCount(0)
        self.step = None
        show_text(self.caption, "")
        self.hide()

    def add_event(self, kind: str, data: dict[str, Any]) -> None:
        samples = data.get("samples")
        if kind == "eval" and isinstance(samples, list):
            self.show_samples(samples, data.get("step"), data.get("generation_s"))

    def show_samples(self, samples: list[Any], step: Any = None, seconds: Any = None) -> None:
        rows = [s for s in samples if isinstance(s, dict)]
        self.table.setRowCount(len(rows))
        for r, sample in enumerate(rows):
            for c, key in enumerate(("prompt", "reference", "generated")):
                text = sample.get(key)
                text = text if isinstance(text, str) else ""
                item = QTableWidgetItem(text if text or key != "generated" else "(nothing)")
                item.setToolTip(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
                if key == "generated" and not text:
                    item.setForeground(self.palette().placeholderText())  # an empty answer, not a missing one
                self.table.setItem(r, c, item)
        self.step = step if isinstance(step, int) else None
        parts = [f"at step {step:,}" if self.step is not None else ""]
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            parts.append(f"generated in {fmt.duration(float(seconds))}")
        show_text(self.caption, "Latest evaluation " + ", ".join(p for p in parts if p) if rows else "")
        self.setVisible(bool(rows))

    def cell(self, row: int, column: int) -> str:
        item = self.table.item(row, column)
        return item.text() if item is not None else ""
