"""Step 1: the finished fine-tune to compress (the parent of every variant)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.jobs_model import best_text, display_name
from app.pages.compress.techniques import source_facts
from app.pages.new_finetune.parts import Step, step_header
from app.widgets.common import card, label

COLUMNS = ("Run", "Task", "Model", "Method", "Best metric", "Finished")
SORT_ROLE = Qt.ItemDataRole.UserRole + 1


class _Item(QTreeWidgetItem):
    """Sorts by value (time, metric), not by the text shown."""

    def __lt__(self, other: QTreeWidgetItem) -> bool:
        column = self.treeWidget().sortColumn() if self.treeWidget() else 0
        mine, theirs = self.data(column, SORT_ROLE), other.data(column, SORT_ROLE)
        if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
            return mine < theirs
        return str(self.text(column)).lower() < str(other.text(column)).lower()


class SourceStep(Step):
    title = "Source run"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._records: dict[str, dict[str, Any]] = {}
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Which run to compress?",
                                    "Every finished fine-tune is listed. Each technique you pick next "
                                    "makes one variant of it, measured side by side with it."))
        frame, box = card()
        self.source_list = QTreeWidget()
        self.source_list.setColumnCount(len(COLUMNS))
        self.source_list.setHeaderLabels(list(COLUMNS))
        self.source_list.setRootIsDecorated(False)
        self.source_list.setAlternatingRowColors(True)
        self.source_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.source_list.setSortingEnabled(True)
        self.source_list.sortByColumn(len(COLUMNS) - 1, Qt.SortOrder.DescendingOrder)
        self.source_list.setMinimumHeight(260)
        head = self.source_list.header()
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setStretchLastSection(True)
        self.source_list.itemSelectionChanged.connect(self.emit_changed)
        box.addWidget(self.source_list)
        self.empty_note = label("No finished fine-tunes yet. Train one on New fine-tune; it is listed "
                                "here once it has succeeded.", "muted", wrap=True)
        box.addWidget(self.empty_note)
        box.addWidget(self.general_message)
        outer.addWidget(frame)
        outer.addStretch(1)

    # -- the list ----------------------------------------------------------------------------

    def set_runs(self, records: list[dict[str, Any]]) -> None:
        """Replace the list with ``records`` (finished fine-tunes), keeping the selection."""
        chosen = self.source_id()
        self._records = {}
        self.source_list.blockSignals(True)
        self.source_list.clear()
        for record in records:
            self._add(record)
        self.source_list.blockSignals(False)
        self.empty_note.setVisible(not self._records)
        if chosen and not self.select(chosen):
            self.emit_changed()

    def upsert(self, record: dict[str, Any]) -> None:
        if record.get("id") in self._records:
            self._records[record["id"]] = record
            return
        self._add(record)
        self.empty_note.setVisible(False)

    def remove(self, run_id: str) -> None:
        item = self._item(run_id)
        if item is not None:
            self._records.pop(run_id, None)
            self.source_list.takeTopLevelItem(self.source_list.indexOfTopLevelItem(item))
            self.empty_note.setVisible(not self._records)
            self.emit_changed()

    def _add(self, record: dict[str, Any]) -> None:
        info = source_facts(record)
        self._records[record["id"]] = record
        ended = record.get("ended_at") or record.get("created_at")
        cells = (display_name(record), str(info.get("task") or "").replace("_", " "),
                 str(info.get("model") or "—"), str(info.get("method") or "—"),
                 best_text(info.get("best")), fmt.timestamp(ended))
        item = _Item(list(cells))
        item.setData(0, Qt.ItemDataRole.UserRole, record["id"])
        best = (info.get("best") or {}).get("value")
        if isinstance(best, (int, float)):
            item.setData(4, SORT_ROLE, float(best))
        item.setData(5, SORT_ROLE, fmt.to_epoch(ended) or 0.0)
        item.setToolTip(0, record["id"])
        self.source_list.addTopLevelItem(item)

    def _item(self, run_id: str) -> QTreeWidgetItem | None:
        for i in range(self.source_list.topLevelItemCount()):
            item = self.source_list.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == run_id:
                return item
        return None

    def source_ids(self) -> list[str]:
        """The runs listed, top to bottom."""
        return [self.source_list.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole)
                for i in range(self.source_list.topLevelItemCount())]

    def select(self, run_id: str) -> bool:
        item = self._item(run_id)
        if item is None:
            return False
        self.source_list.setCurrentItem(item)
        item.setSelected(True)
        self.source_list.scrollToItem(item)
        return True

    def source_id(self) -> str | None:
        items = self.source_list.selectedItems()
        return items[0].data(0, Qt.ItemDataRole.UserRole) if items else None

    def source(self) -> dict[str, Any] | None:
        run_id = self.source_id()
        return self._records.get(run_id) if run_id else None

    def blocking(self) -> list[str]:
        return [] if self.source_id() else ["choose a source run"]
