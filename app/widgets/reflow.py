"""Columns side by side when the window is wide enough, one under the other when it is not.

A row of cards (a form beside its estimate or preview) needs the sum of their widths; on a
1024-pixel screen or half of a wide one that sum does not fit, and a plain QHBoxLayout
would force a horizontal scroll bar on the whole step. ``Reflow`` asks only for its widest
column and lays the columns out in a row whenever the row fits (at least ``wide`` pixels,
and never less than the columns' minimum widths), else in a column.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QBoxLayout, QLayout, QSizePolicy, QWidget

_ROW, _COLUMN = QBoxLayout.Direction.LeftToRight, QBoxLayout.Direction.TopToBottom


class Reflow(QWidget):
    def __init__(self, spacing: int = 14, wide: int = 0, parent: QWidget | None = None):
        super().__init__(parent)
        self._box = QBoxLayout(_ROW, self)
        self._box.setContentsMargins(0, 0, 0, 0)
        self._box.setSpacing(spacing)
        # The widget's minimum is its own (the widest column), not the row's sum.
        self._box.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        self._wide = wide
        self._stretches: list[int] = []
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def add(self, item: QWidget | QLayout, stretch: int = 1) -> None:
        """Add a column (a widget or a layout); ``stretch`` shares the row's width."""
        if isinstance(item, QLayout):
            self._box.addLayout(item, stretch)
        else:
            self._box.addWidget(item, stretch)
        self._stretches.append(stretch)

    def is_row(self) -> bool:
        return self._box.direction() == _ROW

    def row_width(self) -> int:
        """The least width at which the columns sit side by side."""
        items = [self._box.itemAt(i) for i in range(self._box.count())]
        need = sum(item.minimumSize().width() for item in items) + self._box.spacing() * max(len(items) - 1, 0)
        return max(need, self._wide)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        items = [self._box.itemAt(i) for i in range(self._box.count())]
        width = max((item.minimumSize().width() for item in items), default=0)
        return QSize(width, self._box.minimumSize().height())

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        hint = self._box.sizeHint()
        return QSize(min(hint.width(), self.row_width()), hint.height())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        if self._set_direction(event.size().width()):
            self.updateGeometry()
        super().resizeEvent(event)

    def _set_direction(self, width: int) -> bool:
        direction = _ROW if width >= self.row_width() else _COLUMN
        if self._box.direction() == direction:
            return False
        self._box.setDirection(direction)
        # In a column each card takes its own height; in a row they share the width by stretch.
        for i, stretch in enumerate(self._stretches):
            self._box.setStretch(i, stretch if direction == _ROW else 0)
        return True
