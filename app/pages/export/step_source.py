"""Step 1: the finished run whose model is exported (a fine-tune or a compression variant)."""

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
from app.jobs_model import display_name, metric_value
from app.pages.export.plan import FINETUNE, model_file, onnx_only, source_task
from app.pages.new_finetune.parts import Step, show_text, step_header
from app.pages.variants.data import technique_label
from app.widgets.common import FactsView, card, label

COLUMNS = ("Run", "Kind", "Variant", "Task", "Accuracy", "Finished")
ACCURACY_COLUMN, FINISHED_COLUMN = 4, 5
SORT_ROLE = Qt.ItemDataRole.UserRole + 1


def variant_text(record: dict[str, Any]) -> str:
    if record.get("kind") == FINETUNE and not (record.get("spec") or {}).get("distill"):
        return "the fine-tune itself"
    return technique_label(record)


def accuracy(record: dict[str, Any]) -> float | None:
    """The variant's accuracy from its result (jobs.get), else a fine-tune's best accuracy."""
    evaluation = (record.get("result") or {}).get("evaluation") or {}
    value = (evaluation.get("variant") or {}).get("accuracy")
    if isinstance(value, (int, float)):
        return float(value)
    best = (record.get("summary") or {}).get("best") or {}
    if best.get("metric") == "accuracy" and isinstance(best.get("value"), (int, float)):
        return float(best["value"])
    return None


class _Item(QTreeWidgetItem):
    """Sorts by value (time, accuracy), not by the text shown."""

    def __lt__(self, other: QTreeWidgetItem) -> bool:
        column = self.treeWidget().sortColumn() if self.treeWidget() else 0
        mine, theirs = self.data(column, SORT_ROLE), other.data(column, SORT_ROLE)
        if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
            return mine < theirs
        return str(self.text(column)).lower() < str(other.text(column)).lower()


class SourceStep(Step):
    title = "Source"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._records: dict[str, dict[str, Any]] = {}
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Which model to export?",
                                    "Every finished fine-tune and compression variant is listed. Each "
                                    "format you pick next is checked against this model before it is "
                                    "called done."))
        frame, box = card()
        self.source_list = QTreeWidget()
        self.source_list.setColumnCount(len(COLUMNS))
        self.source_list.setHeaderLabels(list(COLUMNS))
        self.source_list.setRootIsDecorated(False)
        self.source_list.setAlternatingRowColors(True)
        self.source_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.source_list.setSortingEnabled(True)
        self.source_list.sortByColumn(FINISHED_COLUMN, Qt.SortOrder.DescendingOrder)
        self.source_list.setMinimumHeight(240)
        head = self.source_list.header()
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setStretchLastSection(True)
        self.source_list.itemSelectionChanged.connect(self.emit_changed)
        box.addWidget(self.source_list)
        self.empty_note = label("No finished runs with a model yet. Fine-tune one (or compress it); it is "
                                "listed here once it has succeeded.", "muted", wrap=True)
        box.addWidget(self.empty_note)
        self.facts = FactsView()
        box.addWidget(self.facts)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)
        self.message_for("source_run")
        box.addWidget(self.field_messages["source_run"])
        box.addWidget(self.general_message)
        outer.addWidget(frame)
        outer.addStretch(1)

    # -- the list ----------------------------------------------------------------------------

    def set_runs(self, records: list[dict[str, Any]]) -> None:
        """Replace the list with ``records``, keeping the selection."""
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
        """Add ``record``, or refresh its row (a jobs.get reply brings the result and its accuracy)."""
        run_id = record["id"]
        old = self._records.get(run_id)
        if old is not None:
            self._records[run_id] = {**old, **record}
            item = self._item(run_id)
            if item is not None:
                self._fill(item, self._records[run_id])
            if run_id == self.source_id():
                self.emit_changed()
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
        self._records[record["id"]] = record
        item = _Item()
        self._fill(item, record)
        self.source_list.addTopLevelItem(item)

    def _fill(self, item: QTreeWidgetItem, record: dict[str, Any]) -> None:
        ended = record.get("ended_at") or record.get("created_at")
        value = accuracy(record)
        cells = (display_name(record), str(record.get("kind") or ""), variant_text(record),
                 self.task(record).replace("_", " ") or "—",
                 metric_value(value) if value is not None else "—", fmt.timestamp(ended))
        for column, text in enumerate(cells):
            item.setText(column, text)
        item.setData(0, Qt.ItemDataRole.UserRole, record["id"])
        item.setData(ACCURACY_COLUMN, SORT_ROLE, value if value is not None else -1.0)
        item.setData(FINISHED_COLUMN, SORT_ROLE, fmt.to_epoch(ended) or 0.0)
        item.setToolTip(0, record["id"])
        if onnx_only(record):
            item.setToolTip(2, "An ONNX-only variant: TorchScript and torch.export need its parent's weights.")

    def task(self, record: dict[str, Any] | None) -> str:
        """The record's task, or that of the run it came from (a variant's record does not say)."""
        for _ in range(8):  # a variant of a variant of ... a fine-tune
            if record is None or source_task(record):
                return source_task(record)
            parent = record.get("parent_id") or (record.get("spec") or {}).get("source_run")
            record = self._records.get(str(parent)) if parent else None
        return ""

    def _item(self, run_id: str) -> QTreeWidgetItem | None:
        for i in range(self.source_list.topLevelItemCount()):
            item = self.source_list.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == run_id:
                return item
        return None

    def source_ids(self) -> list[str]:
        return [self.source_list.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole)
                for i in range(self.source_list.topLevelItemCount())]

    def row_text(self, run_id: str) -> list[str]:
        item = self._item(run_id)
        return [item.text(c) for c in range(len(COLUMNS))] if item is not None else []

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

    def show_source(self, record: dict[str, Any] | None) -> None:
        """The chosen run's facts: what it is and where its model lies."""
        if record is None:
            self.facts.set_facts([])
            show_text(self.note, "")
            return
        self.facts.set_facts([("Run", f"{display_name(record)} ({record.get('id')})"),
                              ("Variant", variant_text(record)), ("Model file", model_file(record))])
        show_text(self.note, "A quantized variant is an ONNX model: TorchScript and torch.export are not "
                             "offered, and its parity figures (against the fp32 model it came from) are "
                             "reported, not enforced." if onnx_only(record) else "")

    def blocking(self) -> list[str]:
        return [] if self.source_id() else ["choose a run to export"]
