"""A horizontal bar per class: how many examples each label has, so imbalance shows at a glance."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

BAR = QColor("#e8590c")  # the accent colour of the stylesheet
SMALL = QColor("#e03131")  # classes far below the largest one
TEXT = QColor("#1f2328")
MUTED = QColor("#5a6472")
TRACK = QColor("#eef1f4")
ROW_H = 20
MAX_ROWS = 30


class ClassBalanceChart(QWidget):
    """``set_counts({label: n})``; classes under a fifth of the largest are drawn red."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.counts: dict[str, int] = {}
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip("Examples per class in the training data")

    def set_counts(self, counts: dict[str, int] | None) -> None:
        self.counts = {str(k): int(v) for k, v in (counts or {}).items()}
        self.setVisible(bool(self.counts))
        self.updateGeometry()
        self.update()

    def imbalanced(self) -> list[str]:
        top = max(self.counts.values(), default=0)
        return [k for k, v in self.counts.items() if top and v < top / 5]

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        rows = min(len(self.counts), MAX_ROWS) + (1 if len(self.counts) > MAX_ROWS else 0)
        return QSize(320, max(rows, 1) * ROW_H + 4)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return self.sizeHint()

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        if not self.counts:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        metrics = QFontMetrics(self.font())
        items = list(self.counts.items())[:MAX_ROWS]
        name_w = min(max(metrics.horizontalAdvance(k) for k, _ in items) + 10, self.width() // 3)
        count_w = metrics.horizontalAdvance(f"{max(self.counts.values()):,}") + 12
        bar_w = max(self.width() - name_w - count_w, 20)
        top = max(self.counts.values()) or 1
        small = set(self.imbalanced())
        for row, (name, n) in enumerate(items):
            y = row * ROW_H + 2
            painter.setPen(TEXT)
            text_rect = QRectF(0, y, name_w - 8, ROW_H - 4)
            painter.drawText(text_rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                             metrics.elidedText(name, Qt.TextElideMode.ElideRight, name_w - 8))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(TRACK)
            painter.drawRoundedRect(QRectF(name_w, y + 3, bar_w, ROW_H - 10), 3, 3)
            painter.setBrush(SMALL if name in small else BAR)
            painter.drawRoundedRect(QRectF(name_w, y + 3, max(bar_w * n / top, 2), ROW_H - 10), 3, 3)
            painter.setPen(MUTED)
            painter.drawText(QRectF(name_w + bar_w + 6, y, count_w, ROW_H - 4),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, f"{n:,}")
        if len(self.counts) > MAX_ROWS:
            painter.setPen(MUTED)
            painter.drawText(QRectF(0, MAX_ROWS * ROW_H + 2, self.width(), ROW_H - 4),
                             Qt.AlignmentFlag.AlignLeft, f"…and {len(self.counts) - MAX_ROWS} more classes")
        painter.end()
