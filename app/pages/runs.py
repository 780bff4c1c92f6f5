"""Runs: every job the engine knows, live, with its log.

The list comes from ``jobs.list`` whenever the connection (re)opens, and stays
current through the ``jobs`` topic, so jobs started by the CLI or another
window show up here too. The selected job's log and events (RunDetails) are
re-read every couple of seconds while it runs.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.engine_process import EngineProcess
from app.jobs_model import ACTIVE_STATES, JobsModel
from app.widgets.common import label
from app.widgets.run_details import RunDetails

POLL_MS = 2000


class RunsPage(QWidget):
    title = "Runs"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = engine.client
        self.model = JobsModel(self)
        self._selected_id: str | None = None

        outer = QVBoxLayout(self)
        outer.setContentsMargins(28, 24, 28, 20)
        outer.setSpacing(12)

        header = QHBoxLayout()
        titles = QVBoxLayout()
        titles.addWidget(label("Runs", "h1"))
        titles.addWidget(label("Every job the engine is running or has run. Closing Ember "
                               "never stops a job.", "muted"))
        header.addLayout(titles, 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.reload)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Ask the job to finish cleanly (SIGTERM, then SIGKILL "
                                    "after a timeout)")
        self.stop_button.clicked.connect(lambda: self._act("jobs.stop"))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setProperty("role", "danger")
        self.cancel_button.setToolTip("Kill the job at once; a queued job never starts")
        self.cancel_button.clicked.connect(lambda: self._act("jobs.cancel"))
        for button in (self.refresh_button, self.stop_button, self.cancel_button):
            header.addWidget(button, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addLayout(header)

        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        head = self.table.horizontalHeader()
        head.setHighlightSections(False)
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.selectionModel().currentRowChanged.connect(self._on_row_changed)
        self.empty = label("No runs yet. Probe this machine from Settings, or start a job "
                           "with the ember command; it will appear here.", "muted", wrap=True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.list_stack = QStackedWidget()
        self.list_stack.addWidget(self.empty)
        self.list_stack.addWidget(self.table)

        self.details = RunDetails(self._client)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.list_stack)
        splitter.addWidget(self.details)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([320, 320])  # half and half to start; the user can drag
        splitter.setChildrenCollapsible(False)
        outer.addWidget(splitter, 1)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        # One timer ticks running durations and re-reads the selected job's log and events.
        self._tick = QTimer(self, interval=POLL_MS)
        self._tick.timeout.connect(self._on_tick)
        self._tick.start()

        self._client.subscribe(["jobs"], self._on_job_event)
        self._client.connected.connect(self.reload)
        self._client.disconnected.connect(self._update_buttons)
        if self._client.is_connected:
            self.reload()
        self._update_buttons()

    # -- loading ---------------------------------------------------------------------

    def reload(self) -> None:
        self._client.request("jobs.list", {"limit": 200}, self._on_list, self._show_error)

    def _on_list(self, reply: dict[str, Any]) -> None:
        self.message.hide()
        selected = self._selected_id
        self.model.set_jobs(reply.get("jobs", []))
        self.list_stack.setCurrentWidget(self.table if self.model.rowCount() else self.empty)
        row = self.model.row_of(selected) if selected else -1
        if row < 0 and self.model.rowCount():
            row = 0
        if row >= 0:
            self.table.selectRow(row)
        self._update_buttons()

    def _on_job_event(self, _topic: str, _seq: int, data: dict[str, Any]) -> None:
        if not data.get("id"):
            return
        is_new = self.model.row_of(data["id"]) < 0
        # The event carries the whole public record (state, times, exit code, error).
        self._on_job_record(data)
        self.list_stack.setCurrentWidget(self.table)
        if is_new and self._selected_id is None:
            self.table.selectRow(0)

    def _on_job_record(self, job: dict[str, Any]) -> None:
        job = {k: v for k, v in job.items() if k != "result"}
        row = self.model.upsert(job)
        if job.get("id") == self._selected_id:
            self.details.show_job(self.model.job(row))
        self._update_buttons()

    # -- selection, log and actions ----------------------------------------------------------

    def selected_job(self) -> dict[str, Any] | None:
        row = self.model.row_of(self._selected_id) if self._selected_id else -1
        return self.model.job(row)

    def _on_row_changed(self, current, _previous) -> None:
        job = self.model.job(current.row())
        self._selected_id = job.get("id") if job else None
        self.details.show_job(job)
        self._update_buttons()

    def _on_tick(self) -> None:
        if not self.isVisible():
            return
        self.model.refresh_durations()
        if self.details.is_active():
            self.details.refresh()

    def _act(self, method: str) -> None:
        job = self.selected_job()
        if job is None:
            return
        self.message.hide()
        self._client.request(method, {"id": job["id"]}, self._on_job_record, self._show_error)

    def _update_buttons(self) -> None:
        job = self.selected_job()
        state = job.get("state") if job else None
        connected = self._client.is_connected
        self.stop_button.setEnabled(connected and state == "running")
        self.cancel_button.setEnabled(connected and state in ACTIVE_STATES)
        self.refresh_button.setEnabled(connected)

    def _show_error(self, err) -> None:
        self.message.setText(str(err))
        self.message.setVisible(True)
