"""A layout that lines its widgets up in a row and wraps onto the next row when the width runs out.

A row of buttons in a QHBoxLayout makes the window at least as wide as all of them;
in a FlowLayout the narrowest the row can be is its widest single widget, so a
page still lays out in a small window (groups of buttons then take two rows).
A widget added with ``trailing=True`` sits at the right edge of its row, as after
a stretch.

The height the rows take at the current width becomes the parent widget's minimum
height, rather than a height-for-width: a layout with height-for-width makes
every box layout above it (and a scroll area) size by preferred heights, and the
page could no longer shrink to its minimum.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QWidget, QWidgetItem


class FlowLayout(QLayout):
    def __init__(self, parent: QWidget | None = None, spacing: int = 8):
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._trailing: set[int] = set()  # ids of the items kept at the right edge
        self._gap = spacing
        self.setContentsMargins(0, 0, 0, 0)

    def addWidget(self, widget: QWidget, trailing: bool = False) -> None:  # noqa: N802 - Qt's name
        self.addChildWidget(widget)
        item = QWidgetItem(widget)
        self._items.append(item)
        if trailing:
            self._trailing.add(id(item))
        self.invalidate()

    # -- QLayout ---------------------------------------------------------------------

    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        if not 0 <= index < len(self._items):
            return None
        item = self._items.pop(index)
        self._trailing.discard(id(item))
        return item

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802
        return Qt.Orientation(0)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802
        super().setGeometry(rect)
        height = self._arrange(rect, apply=True)
        parent = self.parentWidget()
        if parent is not None and parent.minimumHeight() != height:
            parent.setMinimumHeight(height)  # more rows at this width: the page above makes room

    def sizeHint(self) -> QSize:  # noqa: N802 - all in one row
        shown = self._shown()
        margins = self.contentsMargins()
        width = sum(item.sizeHint().width() for item in shown) + self._gap * max(0, len(shown) - 1)
        height = max((item.sizeHint().height() for item in shown), default=0)
        return QSize(width + margins.left() + margins.right(), height + margins.top() + margins.bottom())

    def rows_at(self, width: int) -> int:
        """How many rows the widgets take in ``width`` pixels."""
        height = self._arrange(QRect(0, 0, width, 0), apply=False)
        row = max((item.sizeHint().height() for item in self._shown()), default=0)
        return max(1, round((height + self._gap) / (row + self._gap))) if row else 0

    def minimumSize(self) -> QSize:  # noqa: N802 - the widest single widget
        size = QSize()
        for item in self._shown():
            size = size.expandedTo(item.minimumSize())
        margins = self.contentsMargins()
        return size + QSize(margins.left() + margins.right(), margins.top() + margins.bottom())

    # -- placing ------------------------------------------------------------------------

    def _shown(self) -> list[QLayoutItem]:
        return [item for item in self._items if not item.isEmpty()]

    def _arrange(self, rect: QRect, apply: bool) -> int:
        """Place the items row by row inside ``rect``; returns the height used."""
        margins = self.contentsMargins()
        area = rect.adjusted(margins.left(), margins.top(), -margins.right(), -margins.bottom())
        rows: list[list[QLayoutItem]] = [[]]
        used = 0
        for item in self._shown():
            width = item.sizeHint().width()
            if rows[-1] and used + self._gap + width > area.width():
                rows.append([])
                used = 0
            used += (self._gap if rows[-1] else 0) + width
            rows[-1].append(item)
        y = area.y()
        for row in rows:
            if not row:
                continue
            height = max(item.sizeHint().height() for item in row)
            x = area.x()
            for item in row:
                size = item.sizeHint()
                if id(item) in self._trailing:
                    rest = sum(other.sizeHint().width() + self._gap for other in row[row.index(item) + 1:])
                    x = max(x, area.right() + 1 - rest - size.width())
                if apply:
                    item.setGeometry(QRect(QPoint(x, y), QSize(min(size.width(), area.width()), height)))
                x += size.width() + self._gap
            y += height + self._gap
        return y - self._gap - rect.y() + margins.bottom() if y > area.y() else margins.top() + margins.bottom()
