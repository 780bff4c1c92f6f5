"""The list of finished runs a wizard's first step picks one from (Compress, Export).

A mixin rather than a widget: the list's methods (``select``, ``source``, ``source_ids``, ...)
are the step's own API, which the pages, tests and screenshot scripts call on the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from app.widgets.empty_state import EmptyState, empty_state

ID_ROLE = Qt.ItemDataRole.UserRole
SORT_ROLE = Qt.ItemDataRole.UserRole + 1


class RunRow(NamedTuple):
    """What one run's row shows: a text per column, sort values by column, extra tooltips by column."""

    cells: Sequence[str]
    sort: dict[int, float]
    tips: dict[int, str] = {}


class _Item(QTreeWidgetItem):
    """Sorts by value (time, metric), not by the text shown."""

    def __lt__(self, other: QTreeWidgetItem) -> bool:
        column = self.treeWidget().sortColumn() if self.treeWidget() else 0
        mine, theirs = self.data(column, SORT_ROLE), other.data(column, SORT_ROLE)
        if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
            return mine < theirs
        return str(self.text(column)).lower() < str(other.text(column)).lower()


class RunPicker:
    """Mixin for a Step: ``source_list`` (one run chosen), ``empty_note`` and the records behind the rows.

    While no run is listed, the list gives way to ``empty_note``: an empty state saying what to do first.
    """

    emit_changed: Callable[..., None]  # the Step's; annotated only, so the mixin does not shadow it
    source_list: QTreeWidget
    empty_note: EmptyState
    _records: dict[str, dict[str, Any]]
    _describe: Callable[[dict[str, Any]], RunRow]

    def build_run_list(self, box: QVBoxLayout, columns: Sequence[str], describe: Callable[[dict[str, Any]], RunRow],
                       empty_text: str, min_height: int, empty_title: str = "Nothing to choose yet",
                       empty_action: tuple[str, Callable[[], object]] | None = None) -> None:
        """Add the list and its empty state to ``box``; newest first, as the last column says when a run ended."""
        self._records, self._describe = {}, describe
        self.source_list = tree = QTreeWidget()
        tree.setColumnCount(len(columns))
        tree.setHeaderLabels(list(columns))
        tree.setRootIsDecorated(False)
        tree.setAlternatingRowColors(True)
        tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        tree.setSortingEnabled(True)
        tree.sortByColumn(len(columns) - 1, Qt.SortOrder.DescendingOrder)
        tree.setMinimumHeight(min_height)
        head = tree.header()
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setStretchLastSection(True)
        tree.itemSelectionChanged.connect(self.emit_changed)
        box.addWidget(tree)
        action_text, on_action = empty_action or (None, None)
        self.empty_note = empty_state(empty_title, empty_text, action_text, on_action, icon_name="runs")
        self.empty_note.setMinimumHeight(min_height)
        box.addWidget(self.empty_note)
        self._show_list()

    def _show_list(self) -> None:
        """The list when it has runs, else the empty state in its place."""
        self.source_list.setVisible(bool(self._records))
        self.empty_note.setVisible(not self._records)

    def set_runs(self, records: list[dict[str, Any]]) -> None:
        """Replace the list with ``records``, keeping the selection."""
        chosen = self.source_id()
        self._records = {}
        self.source_list.blockSignals(True)
        self.source_list.clear()
        for record in records:
            self._add(record)
        self.source_list.blockSignals(False)
        self._show_list()
        if chosen and not self.select(chosen):
            self.emit_changed()

    def upsert(self, record: dict[str, Any]) -> None:
        """Add ``record``, or refresh its row (a jobs.get reply brings more than the list had, e.g. a result)."""
        job_id = record["id"]
        old = self._records.get(job_id)
        if old is None:
            self._add(record)
            self._show_list()
            return
        self._records[job_id] = {**old, **record}
        item = self._item(job_id)
        if item is not None:
            self._fill(item, self._records[job_id])
        if job_id == self.source_id():
            self.emit_changed()

    def remove(self, job_id: str) -> None:
        item = self._item(job_id)
        if item is not None:
            self._records.pop(job_id, None)
            self.source_list.takeTopLevelItem(self.source_list.indexOfTopLevelItem(item))
            self._show_list()
            self.emit_changed()

    def _add(self, record: dict[str, Any]) -> None:
        self._records[record["id"]] = record
        item = _Item()
        self._fill(item, record)
        self.source_list.addTopLevelItem(item)

    def _fill(self, item: QTreeWidgetItem, record: dict[str, Any]) -> None:
        row = self._describe(record)
        for column, text in enumerate(row.cells):
            item.setText(column, text)
        item.setData(0, ID_ROLE, record["id"])
        for column, value in row.sort.items():
            item.setData(column, SORT_ROLE, value)
        item.setToolTip(0, record["id"])
        for column, tip in row.tips.items():
            item.setToolTip(column, tip)

    def _item(self, job_id: str) -> QTreeWidgetItem | None:
        for i in range(self.source_list.topLevelItemCount()):
            item = self.source_list.topLevelItem(i)
            if item.data(0, ID_ROLE) == job_id:
                return item
        return None

    def source_ids(self) -> list[str]:
        """The runs listed, top to bottom."""
        return [self.source_list.topLevelItem(i).data(0, ID_ROLE) for i in range(self.source_list.topLevelItemCount())]

    def row_text(self, job_id: str) -> list[str]:
        item = self._item(job_id)
        return [item.text(c) for c in range(self.source_list.columnCount())] if item is not None else []

    def select(self, job_id: str) -> bool:
        item = self._item(job_id)
        if item is None:
            return False
        self.source_list.setCurrentItem(item)
        item.setSelected(True)
        self.source_list.scrollToItem(item)
        return True

    def source_id(self) -> str | None:
        items = self.source_list.selectedItems()
        return items[0].data(0, ID_ROLE) if items else None

    def source(self) -> dict[str, Any] | None:
        job_id = self.source_id()
        return self._records.get(job_id) if job_id else None
