"""The loaded models: one inference worker each in the engine (``playground.workers``), with memory and Unload.

A model stays loaded while it is used and for a while after (the engine stops an idle worker by itself);
Unload (``playground.unload``) frees its memory now. The list is read when the page asks (after each
answer, on a timer while shown) and after an unload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.text import format as fmt
from app.widgets.common import label, row_table, show_text

COLUMNS = ("Model", "Memory")
POLL_MS = 5000
ROW_HEIGHT, MAX_ROWS = 28, 5  # the list grows with its rows up to this many, then scrolls


def state_text(worker: dict[str, Any]) -> str:
    """'ready, chat', 'answering, classifier', 'loading'."""
    state = str(worker.get("state") or "")
    if state == "ready" and worker.get("busy"):
        state = "answering"
    kind = {"chat": "chat", "classify": "classifier"}.get(str(worker.get("kind") or ""), "")
    return f"{state}, {kind}" if kind else state


class LoadedModels(QWidget):
    def __init__(self, client: Any, title_for: Callable[[dict[str, Any]], str] | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._title_for = title_for  # a worker's model as the pickers name it (a run's name, not its id)
        self.workers: list[dict[str, Any]] = []
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(6)
        self.table = row_table(COLUMNS, "Loaded models")
        self.table.setShowGrid(False)
        self.table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        self.table.itemSelectionChanged.connect(self._update)
        box.addWidget(self.table)
        self.note = label("", "muted", wrap=True)
        box.addWidget(self.note)
        self.error = label("", "error", wrap=True)
        self.error.hide()
        box.addWidget(self.error)
        row = QHBoxLayout()
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Read the loaded models again")
        self.refresh_button.clicked.connect(self.reload)
        self.unload_button = QPushButton("Unload")
        self.unload_button.setToolTip("Stop the selected model's worker and free its memory; the next question "
                                      "to it loads it again")
        self.unload_button.clicked.connect(self.unload_selected)
        row.addWidget(self.refresh_button)
        row.addStretch(1)
        row.addWidget(self.unload_button)
        box.addLayout(row)
        self._poll = QTimer(self, interval=POLL_MS)
        self._poll.timeout.connect(self._tick)
        self._poll.start()
        client.connected.connect(lambda *_: self.reload())
        client.disconnected.connect(self._update)
        self._show([])

    def _tick(self) -> None:
        if self.isVisible() and self._client.is_connected:
            self.reload()

    def reload(self) -> None:
        if self._client.is_connected:
            self._client.request("playground.workers", {}, lambda r: self._show(r.get("workers") or []),
                                 self._failed)

    def _failed(self, err: Any) -> None:
        show_text(self.error, str(err))

    def _show(self, workers: list[dict[str, Any]]) -> None:
        show_text(self.error, "")
        selected = self.selected()
        keep = selected.get("label") if selected else None
        self.workers = list(workers)
        self.table.setRowCount(len(self.workers))
        for r, worker in enumerate(self.workers):
            name = self.title(worker)
            state = state_text(worker)
            cells = (name if state.startswith("ready") else f"{name} ({state})",
                     fmt.size(worker.get("rss")) if worker.get("rss") else "—")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{name}: {state}, process {worker.get('pid')}")
                self.table.setItem(r, c, item)
            if worker.get("label") == keep:
                self.table.selectRow(r)
        rows = min(max(len(self.workers), 1), MAX_ROWS)
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height() + rows * ROW_HEIGHT + 4)
        total = sum(int(w.get("rss") or 0) for w in self.workers)
        self.note.setText("No model loaded: the first question to a model loads it." if not self.workers else
                          f"{len(self.workers)} loaded, {fmt.size(total)} in all. An unused model is unloaded "
                          "after a while.")
        self._update()

    def title(self, worker: dict[str, Any]) -> str:
        found = self._title_for(worker.get("model") or {}) if self._title_for else ""
        return found or str(worker.get("label") or "")

    def selected(self) -> dict[str, Any] | None:
        rows = {i.row() for i in self.table.selectedItems()}
        row = rows.pop() if len(rows) == 1 else -1
        return self.workers[row] if 0 <= row < len(self.workers) else None

    def unload_selected(self) -> None:
        worker = self.selected()
        if worker is None:
            return
        self.unload_button.setEnabled(False)
        self._client.request("playground.unload", {"model": worker.get("model")}, lambda _r: self.reload(),
                             self._failed)

    def _update(self) -> None:
        self.unload_button.setEnabled(self.selected() is not None and self._client.is_connected)
        self.refresh_button.setEnabled(self._client.is_connected)
