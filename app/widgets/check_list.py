"""Checkboxes in two columns, each with lines that say what it does and a red line that says why it is off."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QGridLayout, QLabel, QVBoxLayout, QWidget

from app.widgets.common import label, show_text

INDENT = 24  # lines under a checkbox start where its text does


class CheckList(QWidget):
    """``checks`` and ``reasons`` by key; ``toggled`` on any tick. Spacing is given so each wizard keeps its look."""

    toggled = Signal()

    def __init__(self, spacing: tuple[int, int, int], parent: QWidget | None = None):
        """``spacing``: between the columns, between the rows, between a checkbox and its lines."""
        super().__init__(parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setHorizontalSpacing(spacing[0])
        self._grid.setVerticalSpacing(spacing[1])
        self._grid.setColumnStretch(0, 1)
        self._grid.setColumnStretch(1, 1)
        self._line_spacing = spacing[2]
        self.checks: dict[str, QCheckBox] = {}
        self.reasons: dict[str, QLabel] = {}
        self.blocks: dict[str, QWidget] = {}  # a checkbox with its lines
        self._shown: list[str] | None = None  # show_only's keys; None: every one, in the order added

    def add(self, key: str, title: str, lines: Sequence[tuple[str, str]]) -> QCheckBox:
        """A bold checkbox and its ``lines`` of (text, role), next in reading order (left, right, next row)."""
        widget = QWidget()
        block = QVBoxLayout(widget)
        block.setContentsMargins(0, 0, 0, 0)
        block.setSpacing(self._line_spacing)
        check = QCheckBox(title)
        check.setStyleSheet("font-weight: 600;")
        check.toggled.connect(self.toggled)
        self.checks[key] = check
        block.addWidget(check)
        for text, role in lines:
            line = label(text, role, wrap=True)
            line.setContentsMargins(INDENT, 0, 0, 0)
            block.addWidget(line)
        reason = label("", "error", wrap=True)
        reason.setContentsMargins(INDENT, 0, 0, 0)
        reason.hide()
        self.reasons[key] = reason
        block.addWidget(reason)
        block.addStretch(1)
        self.blocks[key] = widget
        index = len(self.checks) - 1
        self._grid.addWidget(widget, index // 2, index % 2)
        return check

    def show_only(self, keys: Collection[str]) -> None:
        """Show the checkboxes ``keys`` in that order, without gaps, and hide the rest, which then count as
        unticked."""
        for block in self.blocks.values():
            self._grid.removeWidget(block)
        shown = self._shown = [k for k in keys if k in self.blocks]
        for index, key in enumerate(shown):
            self._grid.addWidget(self.blocks[key], index // 2, index % 2)
        for key, block in self.blocks.items():
            block.setHidden(key not in keys)

    def set_reason(self, key: str, reason: str, tip: str = "", enabled: bool = True) -> None:
        """Disable (and untick) ``key`` while there is a ``reason``, shown under it; ``tip`` otherwise."""
        check = self.checks[key]
        check.setEnabled(enabled and not reason)
        if reason and check.isChecked():
            check.setChecked(False)
        show_text(self.reasons[key], reason)
        check.setToolTip(reason or tip)

    def shown(self) -> list[str]:
        """The keys shown, in reading order."""
        return list(self.blocks) if self._shown is None else list(self._shown)

    def checked(self) -> list[str]:
        """The keys ticked, enabled and shown, in the order they were added."""  # the spec's order, not the grid's
        return [k for k, c in self.checks.items() if c.isChecked() and c.isEnabled() and not self.blocks[k].isHidden()]
