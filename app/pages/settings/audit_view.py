"""Settings › Audit log: every state-changing request the engine took, who asked, and how it went.

Pages come from ``audit.list`` (newest first; "Load more" asks for the next page). The filter
(an action or glob such as ``jobs.*``, a text, failed only) is applied by the engine, so the count
shown is of every matching record. Export… writes the matching records to CSV or JSON Lines,
page by page, with ``until`` pinned to the moment it began so records written meanwhile neither
shift the pages nor appear twice. Params arrive redacted by the engine (passwords, tokens: ***).
"""

from __future__ import annotations

import csv
import json
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.text import format as fmt
from app.widgets.common import card, label
from engine.api.audit_rows import COLUMNS, row

PAGE = 100
EXPORT_PAGE = 500
HEADERS = ("Time", "User", "Client", "Action", "Target", "OK", "Error")
ACTIONS = ("All actions", "jobs.*", "jobs.start", "jobs.stop", "jobs.cancel", "jobs.resume", "jobs.delete",
           "queue.*", "hosts.*", "templates.*", "engine.shutdown")


class AuditView(QWidget):
    """The audit log as a card: filters, a table, Load more and Export…."""

    exported = Signal(str, int)  # path, records written
    export_failed = Signal(str)

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._records: list[dict[str, Any]] = []
        self._total = 0
        self._next: int | None = None
        self._generation = 0  # replies to an older filter are dropped

        frame, box = card()
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(frame)

        head = QHBoxLayout()
        head.addWidget(label("Audit log", "h2"), 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.reload)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Write the records that match the filter to CSV or JSON Lines")
        self.export_button.clicked.connect(self.export_clicked)
        head.addWidget(self.refresh_button)
        head.addWidget(self.export_button)
        box.addLayout(head)
        box.addWidget(label("Every request that changed something (jobs started, stopped or deleted, hosts, "
                            "templates, users, the engine stopped), with the user and the client that sent it. "
                            "Secrets are never stored.", "muted", wrap=True))

        filters = QHBoxLayout()
        self.action_combo = QComboBox()
        self.action_combo.setEditable(True)
        self.action_combo.addItems(list(ACTIONS))
        self.action_combo.setToolTip("An action, or a glob such as jobs.*")
        self.action_combo.currentTextChanged.connect(self._filter_changed)
        self.text_edit = QLineEdit()
        self.text_edit.setPlaceholderText("Filter by client, target, params or error")
        self.text_edit.setClearButtonEnabled(True)
        self.text_edit.textChanged.connect(self._filter_changed)
        self.user_edit = QLineEdit()
        self.user_edit.setPlaceholderText("User")
        self.user_edit.setAccessibleName("Filter by user")
        self.user_edit.setToolTip("Only this user's requests (local: the engine's own admin on its machine)")
        self.user_edit.setClearButtonEnabled(True)
        self.user_edit.textChanged.connect(self._filter_changed)
        self.failed_check = QCheckBox("Failed only")
        self.failed_check.toggled.connect(self._filter_changed)
        filters.addWidget(self.action_combo)
        filters.addWidget(self.user_edit)
        filters.addWidget(self.text_edit, 1)
        filters.addWidget(self.failed_check)
        box.addLayout(filters)

        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(list(HEADERS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.setMinimumHeight(220)
        head_view = self.table.horizontalHeader()
        head_view.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head_view.setStretchLastSection(True)
        box.addWidget(self.table)

        foot = QHBoxLayout()
        self.count_label = label("", "muted")
        self.more_button = QPushButton("Load more")
        self.more_button.clicked.connect(self.load_more)
        foot.addWidget(self.count_label, 1)
        foot.addWidget(self.more_button)
        box.addLayout(foot)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        box.addWidget(self.message)

        self._debounce = QTimer(self, singleShot=True, interval=300)
        self._debounce.timeout.connect(self.reload)
        self._client.connected.connect(lambda *_: self.reload())
        self._client.disconnected.connect(self._update_buttons)
        if self._client.is_connected:
            self.reload()
        self._update_buttons()

    # -- loading -------------------------------------------------------------------------

    def filters(self) -> dict[str, Any]:
        """The audit.list filter the controls describe."""
        out: dict[str, Any] = {}
        action = self.action_combo.currentText().strip()
        if action and action != ACTIONS[0]:
            out["action"] = action
        if self.text_edit.text().strip():
            out["text"] = self.text_edit.text().strip()
        if self.user_edit.text().strip():
            out["user"] = self.user_edit.text().strip()
        if self.failed_check.isChecked():
            out["ok"] = False
        return out

    def _filter_changed(self, *_args: Any) -> None:
        self._debounce.start()

    def reload(self) -> None:
        self._generation += 1
        self._records, self._next = [], None
        self._fetch(0)

    def load_more(self) -> None:
        if self._next is not None:
            self._fetch(self._next)

    def _fetch(self, offset: int) -> None:
        if not self._client.is_connected:
            return
        generation = self._generation
        self._client.request("audit.list", {"limit": PAGE, "offset": offset, **self.filters()},
                             lambda reply: self._on_page(reply, generation, offset), self._show_error)

    def _on_page(self, reply: dict[str, Any], generation: int, offset: int) -> None:
        if generation != self._generation:
            return
        self.message.hide()
        if offset == 0:
            self._records = []
        self._records += reply.get("records") or []
        self._total = int(reply.get("total") or 0)
        self._next = reply.get("next_offset")
        self._fill()

    def _fill(self) -> None:
        self.table.setRowCount(len(self._records))
        for r, rec in enumerate(self._records):
            ok = bool(rec.get("ok"))
            cells = (fmt.timestamp(rec.get("t")), rec.get("user") or "", rec.get("client", ""), rec.get("action", ""),
                     rec.get("target", ""), "yes" if ok else "no", rec.get("error") or "")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(str(text))
                if c == 0:
                    item.setToolTip(json.dumps(rec.get("params") or {}, indent=1)[:2000])
                if c == HEADERS.index("OK") and not ok:
                    item.setForeground(Qt.GlobalColor.darkRed)
                self.table.setItem(r, c, item)
        self.count_label.setText(f"Showing {len(self._records)} of {self._total} records" if self._total
                                 else "No records match.")
        self._update_buttons()

    def rows(self) -> list[dict[str, Any]]:
        """The records shown, newest first."""
        return list(self._records)

    def _update_buttons(self) -> None:
        connected = self._client.is_connected
        self.refresh_button.setEnabled(connected)
        self.export_button.setEnabled(connected)
        self.more_button.setEnabled(connected and self._next is not None)

    def _show_error(self, err: Any) -> None:
        self.message.setText(f"Could not read the audit log: {err}")
        self.message.show()

    # -- export --------------------------------------------------------------------------

    def export_clicked(self) -> None:
        path, chosen = QFileDialog.getSaveFileName(
            self, "Export the audit log", "ember-audit.csv", "CSV (*.csv);;JSON Lines (*.jsonl)",
            options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            if "jsonl" in chosen and not path.endswith(".jsonl"):
                path += ".jsonl"
            self.export(path)

    def export(self, path: str) -> None:
        """Write every record matching the filter to ``path`` (.jsonl: JSON Lines, else CSV); emits ``exported``."""
        filters = {**self.filters(), "until": time.time() + 0.001}
        records: list[dict[str, Any]] = []
        self.export_button.setEnabled(False)

        def page(offset: int) -> None:
            self._client.request("audit.list", {"limit": EXPORT_PAGE, "offset": offset, **filters},
                                 got, failed)

        def got(reply: dict[str, Any]) -> None:
            records.extend(reply.get("records") or [])
            if reply.get("next_offset") is not None and reply.get("records"):
                page(reply["next_offset"])
                return
            try:
                write(path, records)
            except OSError as exc:
                failed(exc)
                return
            self._update_buttons()
            self.count_label.setText(f"Exported {len(records)} records to {path}")
            self.exported.emit(path, len(records))

        def failed(err: Any) -> None:
            self._update_buttons()
            self._show_error(err)
            self.export_failed.emit(str(err))

        page(0)


def write(path: str, records: list[dict[str, Any]]) -> None:
    """CSV (the columns ``ember audit --csv`` writes) or, for a .jsonl name, one JSON record a line."""
    if path.lower().endswith(".jsonl"):
        with open(path, "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, sort_keys=True) + "\n")
        return
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for rec in records:
            w.writerow(row(rec))
