"""Small building blocks every page uses: headings, cards, key/value facts and row-picked tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QGridLayout,
    QHeaderView,
    QLabel,
    QScrollArea,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from app.state.style import set_role
from app.text.glossary import OPTION_TERMS, option_tooltip


def label(text: str, role: str = "", wrap: bool = False) -> QLabel:
    widget = QLabel(text)
    if role:
        set_role(widget, role)
    widget.setWordWrap(wrap)
    return widget


def say(widget: QLabel, text: str, error: bool = False) -> None:
    """Show ``text`` in a status label, in the error colour when ``error``."""
    set_role(widget, "error" if error else "muted")
    widget.style().polish(widget)  # the stylesheet notices the new role
    widget.setText(text)
    widget.show()


def card(parent: QWidget | None = None) -> tuple[QFrame, QVBoxLayout]:
    """A white rounded panel; returns the frame and its layout."""
    frame = QFrame(parent)
    set_role(frame, "card")
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(18, 16, 18, 16)
    layout.setSpacing(10)
    return frame, layout


def scrolling_body(page: QWidget, spacing: int = 16,
                   margins: tuple[int, int, int, int] = (28, 24, 28, 24)) -> QVBoxLayout:
    """Fill ``page`` with a frameless scroll area; returns the layout of its body, padded by ``margins``."""
    scroll = QScrollArea(page)
    scroll.setObjectName("pageScroll")
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QScrollArea.Shape.NoFrame)
    body = QWidget()
    body.setObjectName("pageBody")
    scroll.setWidget(body)
    QVBoxLayout(page).addWidget(scroll)
    page.layout().setContentsMargins(0, 0, 0, 0)
    outer = QVBoxLayout(body)
    outer.setContentsMargins(*margins)
    outer.setSpacing(spacing)
    return outer


class FactsView(QWidget):
    """Two columns of facts (label: value); values can be selected and copied."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setHorizontalSpacing(20)
        self._grid.setVerticalSpacing(7)
        self._grid.setColumnStretch(1, 1)
        self._grid.setColumnMinimumWidth(0, 120)  # cards line up with each other
        self._rows: dict[str, QLabel] = {}

    def set_facts(self, facts: Iterable[tuple[str, str]]) -> None:
        while self._grid.count():
            item = self._grid.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self._rows.clear()
        for row, (key, value) in enumerate(facts):
            key_label = label(key, "factKey")
            key_label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
            value_label = label(value, "factValue", wrap=True)
            value_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self._grid.addWidget(key_label, row, 0)
            self._grid.addWidget(value_label, row, 1)
            self._rows[key] = value_label

    def value(self, key: str) -> str:
        """The text shown for ``key`` ('' when absent); tests and screenshots read it."""
        widget = self._rows.get(key)
        return widget.text() if widget is not None else ""

    def keys(self) -> list[str]:
        return list(self._rows)


def show_text(widget: QLabel, text: str) -> None:
    """Set a note's text and hide it while empty, so empty notes leave no gaps (as the wizards' parts.show_text)."""
    widget.setText(text)
    widget.setVisible(bool(text))


def call_window(widget: QWidget, name: str, *args: Any) -> Any:
    """``widget.window().<name>(*args)``: cross-page navigation; None outside a MainWindow (a page tested alone)."""
    target = getattr(widget.window(), name, None)
    return target(*args) if callable(target) else None


def row_table(columns: Sequence[str], name: str, stretch: int = 0) -> QTableWidget:
    """A read-only table picked a whole row at a time: column ``stretch`` (negative: from the end) takes the
    spare width, the others fit their contents."""
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(list(columns))
    table.setAccessibleName(name)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.verticalHeader().hide()
    head = table.horizontalHeader()
    wide = stretch % len(columns)
    for col in range(len(columns)):
        head.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch if col == wide
                                  else QHeaderView.ResizeMode.ResizeToContents)
    return table


def tip_combo_items(combo, keys: dict[object, str] | None = None) -> None:
    """Give each item of ``combo`` the tooltip of its option key: ``keys[data]``, or its data itself."""
    for index in range(combo.count()):
        data = combo.itemData(index)
        key = (keys or {}).get(data, data)
        if key in OPTION_TERMS:
            combo.setItemData(index, option_tooltip(key), Qt.ItemDataRole.ToolTipRole)
