"""What data.inspect found: a table of rows or a grid of thumbnails, class balance, sizes."""

from __future__ import annotations

import base64
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.class_balance import ClassBalanceChart
from app.widgets.common import label

THUMB_PX = 72
SMALL_VALIDATION = 30  # fewer held-out examples than this and one example moves accuracy by over 3 points


def pixmap_from_base64(data: str) -> QPixmap:
    pixmap = QPixmap()
    try:
        pixmap.loadFromData(base64.b64decode(data), "PNG")
    except (ValueError, TypeError):
        pass  # a broken thumbnail shows as an empty square, not an error dialog
    return pixmap


class ThumbGrid(QWidget):
    """Images with their labels underneath, ``columns`` to a row."""

    def __init__(self, columns: int = 6, parent: QWidget | None = None):
        super().__init__(parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(8)
        self._columns = columns
        self.labels: list[str] = []
        self.hide()

    def set_samples(self, samples: list[dict[str, Any]]) -> None:
        while self._grid.count():
            self._grid.takeAt(0).widget().deleteLater()
        self.labels = [str(s.get("label", "")) for s in samples]
        for i, sample in enumerate(samples):
            cell = QWidget()
            column = QVBoxLayout(cell)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(2)
            image = QLabel()
            image.setFixedSize(THUMB_PX, THUMB_PX)
            image.setAlignment(Qt.AlignmentFlag.AlignCenter)
            pixmap = pixmap_from_base64(sample.get("png_base64") or "")
            if not pixmap.isNull():
                image.setPixmap(pixmap.scaled(THUMB_PX, THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio,
                                              Qt.TransformationMode.FastTransformation))
            column.addWidget(image, 0, Qt.AlignmentFlag.AlignHCenter)
            caption = label(str(sample.get("label", "")), "muted")
            caption.setAlignment(Qt.AlignmentFlag.AlignCenter)
            column.addWidget(caption)
            self._grid.addWidget(cell, i // self._columns, i % self._columns)
        self.setVisible(bool(samples))


def validation_warning(n_val: Any) -> str:
    """A warning when too few examples are held out for the evaluation to mean much ('' otherwise)."""
    if not isinstance(n_val, int) or n_val >= SMALL_VALIDATION:
        return ""
    if n_val == 0:
        return ("No examples are held out for validation, so the run cannot be evaluated. Hold out a "
                "share (Held out for validation) or add a validation file.")
    return (f"Only {n_val} example{'s' if n_val > 1 else ''} held out for validation: each one is "
            f"{100 / n_val:.0f}% of the evaluation, so its figures will be noisy. Hold out a larger share "
            "(Held out for validation) or add examples.")


class DataPreview(QWidget):
    """Fill with ``show(reply)`` from data.inspect; ``clear()`` while a new check runs."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(10)
        self.sizes = label("", "muted", wrap=True)
        column.addWidget(self.sizes)
        self.val_warning = label("", "error", wrap=True)
        column.addWidget(self.val_warning)
        self.table = QTableWidget()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        self.table.setMinimumHeight(220)
        self.table.horizontalHeader().setDefaultAlignment(Qt.AlignmentFlag.AlignLeft)
        column.addWidget(self.table)
        self.thumbs = ThumbGrid()
        column.addWidget(self.thumbs)
        self.balance_title = label("Examples per class (training split)", "h2")
        self.balance_title.setToolTip("What training sees: the rows left after holding out the validation "
                                      "share, or the whole training file when there is a validation file")
        column.addWidget(self.balance_title)
        self.balance = ClassBalanceChart()
        column.addWidget(self.balance)
        self.balance_note = label("", "muted", wrap=True)
        column.addWidget(self.balance_note)
        self.clear()

    def clear(self) -> None:
        self.sizes.setText("")
        self.val_warning.hide()
        self.table.clear()
        self.table.setRowCount(0)
        self.table.hide()
        self.thumbs.set_samples([])
        self.balance.set_counts({})
        self.balance_title.hide()
        self.balance_note.hide()

    def show_reply(self, reply: dict[str, Any]) -> None:
        n_train, n_val = reply.get("n_train"), reply.get("n_val")
        if isinstance(n_train, int):
            val = f", {n_val:,} for validation" if isinstance(n_val, int) else ""
            self.sizes.setText(f"{n_train:,} examples for training{val}.")
        self.val_warning.setText(validation_warning(n_val) if isinstance(n_train, int) else "")
        self.val_warning.setVisible(bool(self.val_warning.text()))
        if reply.get("kind") == "images":
            self.thumbs.set_samples(reply.get("thumbnails") or [])
        else:
            self._fill_table(reply.get("columns") or [], reply.get("rows") or [])
        counts = reply.get("class_counts") or {}
        self.balance.set_counts(counts)
        self.balance_title.setVisible(bool(counts))
        small = self.balance.imbalanced()
        self.balance_note.setText(f"Few examples in {', '.join(small[:5])}: the model will rarely "
                                  "predict these classes." if small else "")
        self.balance_note.setVisible(bool(small))

    def _fill_table(self, columns: list[str], rows: list[dict[str, Any]]) -> None:
        if not columns and rows:
            columns = list(rows[0])
        self.table.setColumnCount(len(columns))
        self.table.setHorizontalHeaderLabels(columns)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, name in enumerate(columns):
                text = str(row.get(name, ""))
                item = QTableWidgetItem(text[:300])
                item.setToolTip(text[:2000])
                self.table.setItem(r, c, item)
        head = self.table.horizontalHeader()
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        if columns:
            # The widest column (the text) takes what is left, the label stays narrow.
            widest = max(range(len(columns)), key=lambda i: self.table.sizeHintForColumn(i))
            head.setSectionResizeMode(widest, QHeaderView.ResizeMode.Stretch)
        self.table.setVisible(bool(rows))
