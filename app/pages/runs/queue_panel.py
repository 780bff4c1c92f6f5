"""The Queue panel on the Runs page: queued jobs in the order they will run, why each waits,
controls to reorder and prioritize them, and the engine's concurrency settings.

Everything shown comes from ``queue.get`` when the connection opens and from the ``queue`` topic
after every change, whoever made it (another window, the CLI): two windows on one engine show the
same queue. The controls send ``queue.move``, ``jobs.prioritize`` and ``queue.configure``; the
engine answers with the new queue, and publishes it to everyone else.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.connection.engine_client import EngineClient
from app.widgets.common import label, scrolling_body

COLUMNS = ("#", "Name", "Priority", "Waiting for")
ROW_HEIGHT = 26
MAX_VISIBLE_ROWS = 5
MIN_HEIGHT = 90  # in a short window the panel scrolls inside this much; the Runs page can stay small


def resources_text(queue: dict[str, Any]) -> str:
    """'This machine: 1 of 2 CPU cores in use · GPUs: 0 busy, 1 free' from queue.get's resources."""
    local = (queue.get("resources") or {}).get("local") or {}
    used = local.get("used") or {}
    limit = local.get("cpu_limit")
    parts = [f"This machine: {used.get('cores', 0)} of {limit} CPU cores in use" if limit
             else "This machine"]
    gpus = local.get("gpus") or 0
    if gpus:
        parts.append(f"GPUs: {len(used.get('gpus') or {})} busy, {len((local.get('free') or {}).get('gpus') or [])}"
                     f" free of {gpus}")
    else:
        parts.append("no GPU")
    running = len(queue.get("running") or [])
    limit_jobs = (queue.get("settings") or {}).get("max_concurrent")
    parts.append(f"{running} of {limit_jobs} jobs running")
    return " · ".join(parts)


class QueuePanel(QWidget):
    content_changed = Signal()  # shown again: the queue's length (so its height) may differ

    def __init__(self, client: EngineClient, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._queue: dict[str, Any] = {"jobs": [], "running": [], "resources": {}, "settings": {}}
        self._loading = False  # set while the view is filled in, so no request goes out for it

        # The controls scroll inside the panel when the page gives it less than they need.
        outer = scrolling_body(self, spacing=6, margins=(0, 6, 0, 0))
        self.setMinimumHeight(MIN_HEIGHT)
        head = QHBoxLayout()
        self.title = label("Queue", "h2")
        head.addWidget(self.title)
        self.summary = label("", "muted", wrap=True)  # wraps rather than widen the page
        head.addWidget(self.summary, 1)
        outer.addLayout(head)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        header = self.table.horizontalHeader()
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setHighlightSections(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._on_selection)
        outer.addWidget(self.table)
        self.empty = label("No job is waiting: new jobs start as soon as their CPU cores and GPUs are free.",
                           "muted", wrap=True)
        outer.addWidget(self.empty)

        # Two rows, so the panel fits a narrow window: the selected job (shown while jobs wait),
        # then the engine's limits.
        self.job_controls = QWidget()
        controls = QHBoxLayout(self.job_controls)
        controls.setContentsMargins(0, 0, 0, 0)
        self.top_button = self._button("Move to top", "Run this job next", "top")
        self.up_button = self._button("Up", "Move it one place earlier", "up")
        self.down_button = self._button("Down", "Move it one place later", "down")
        self.bottom_button = self._button("Bottom", "Run it after every other queued job", "bottom")
        for button in (self.top_button, self.up_button, self.down_button, self.bottom_button):
            controls.addWidget(button)
        controls.addSpacing(12)
        controls.addWidget(label("Priority", "muted"))
        self.priority_spin = QSpinBox()
        self.priority_spin.setKeyboardTracking(False)  # one request when typing ends, not one per digit
        self.priority_spin.setRange(-1000, 1000)
        self.priority_spin.setToolTip("Higher runs first; jobs of one priority run in queue order")
        self.priority_spin.valueChanged.connect(self._on_priority)
        controls.addWidget(self.priority_spin)
        controls.addStretch(1)
        outer.addWidget(self.job_controls)
        limits = QHBoxLayout()
        limits.addWidget(label("Max jobs at once", "muted"))
        self.max_jobs_spin = QSpinBox()
        self.max_jobs_spin.setKeyboardTracking(False)  # one request when typing ends, not one per digit
        self.max_jobs_spin.setRange(1, 256)
        self.max_jobs_spin.setToolTip("How many jobs may run at the same time (kept when the engine restarts)")
        self.max_jobs_spin.valueChanged.connect(lambda v: self._configure(max_concurrent=v))
        limits.addWidget(self.max_jobs_spin)
        limits.addSpacing(12)
        limits.addWidget(label("CPU cores", "muted"))
        self.cores_spin = QSpinBox()
        self.cores_spin.setKeyboardTracking(False)  # one request when typing ends, not one per digit
        self.cores_spin.setRange(0, 100_000)
        self.cores_spin.setSpecialValueText("all")
        self.cores_spin.setToolTip("CPU cores jobs may use together; all = every core of this machine")
        self.cores_spin.valueChanged.connect(lambda v: self._configure(cpu_cores=v))
        limits.addWidget(self.cores_spin)
        limits.addSpacing(12)
        self.sharing_check = QCheckBox("Allow GPU sharing")
        self.sharing_check.setToolTip("Let two trainings use the same GPU (they compete for its memory)")
        self.sharing_check.toggled.connect(lambda on: self._configure(allow_gpu_sharing=on))
        limits.addWidget(self.sharing_check)
        limits.addStretch(1)
        outer.addLayout(limits)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        self._client.subscribe(["queue"], self._on_event)
        self._client.connected.connect(self.reload)
        self._client.disconnected.connect(self._update_controls)
        if self._client.is_connected:
            self.reload()
        self._show(self._queue)

    def _button(self, text: str, tip: str, to: str) -> QPushButton:
        button = QPushButton(text)
        button.setToolTip(tip)
        button.clicked.connect(lambda: self.move_selected(to))
        return button

    # -- what the engine says -------------------------------------------------------------

    def reload(self) -> None:
        self._client.request("queue.get", {}, self._show, self._show_error)

    def _on_event(self, _topic: str, _seq: int, data: dict[str, Any]) -> None:
        self._show(data)

    def _show(self, queue: dict[str, Any]) -> None:
        self.message.hide()
        self._queue = queue
        selected = self.selected_id()
        jobs = queue.get("jobs") or []
        self._loading = True
        try:
            self.table.setRowCount(len(jobs))
            for row, job in enumerate(jobs):
                texts = (str(row + 1), str(job.get("name") or job.get("id")), str(job.get("priority", 0)),
                         str(job.get("reason") or "starting"))
                for column, text in enumerate(texts):
                    item = QTableWidgetItem(text)
                    item.setData(Qt.ItemDataRole.UserRole, job.get("id"))
                    item.setToolTip(f"{job.get('id')} ({job.get('kind')}): {texts[3]}")
                    self.table.setItem(row, column, item)
            ids = self.queued_ids()
            if selected in ids:
                self.table.selectRow(ids.index(selected))
            else:
                self.table.clearSelection()
            self.table.setFixedHeight(self.table.horizontalHeader().height() + 4
                                      + ROW_HEIGHT * max(1, min(len(jobs), MAX_VISIBLE_ROWS)))
            self.table.setVisible(bool(jobs))
            self.job_controls.setVisible(bool(jobs))
            self.empty.setVisible(not jobs)
            settings = queue.get("settings") or {}
            if settings:
                self.max_jobs_spin.setValue(int(settings.get("max_concurrent") or 1))
                self.cores_spin.setValue(int(settings.get("cpu_cores") or 0))
                self.sharing_check.setChecked(bool(settings.get("allow_gpu_sharing")))
            self.summary.setText(f"{len(jobs)} waiting · {resources_text(queue)}" if settings else "")
            self._sync_priority()
        finally:
            self._loading = False
        self._update_controls()
        self.content_changed.emit()

    def wanted_height(self) -> int:
        """The height that shows everything without scrolling."""
        body = self.findChild(QWidget, "pageBody")
        return max(MIN_HEIGHT, body.sizeHint().height() if body is not None else MIN_HEIGHT)

    # -- reading the view -------------------------------------------------------------------

    def queued_ids(self) -> list[str]:
        """Queued job ids in the order they will run, as shown."""
        return [str(self.table.item(row, 0).data(Qt.ItemDataRole.UserRole)) for row in range(self.table.rowCount())]

    def reasons(self) -> dict[str, str]:
        return {str(job.get("id")): str(job.get("reason") or "") for job in self._queue.get("jobs") or []}

    def selected_id(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        return str(item.data(Qt.ItemDataRole.UserRole)) if item is not None else None

    def select(self, job_id: str) -> bool:
        ids = self.queued_ids()
        if job_id not in ids:
            return False
        self.table.selectRow(ids.index(job_id))
        return True

    # -- actions --------------------------------------------------------------------------

    def move_selected(self, to: str) -> None:
        job_id = self.selected_id()
        if job_id:
            self._client.request("queue.move", {"id": job_id, "to": to}, self._show, self._show_error)

    def _on_priority(self, value: int) -> None:
        job_id = self.selected_id()
        if self._loading or not job_id:
            return
        self._client.request("jobs.prioritize", {"id": job_id, "priority": value}, self._show, self._show_error)

    def _configure(self, **change: Any) -> None:
        if self._loading:
            return
        self._client.request("queue.configure", change, self._show, self._show_error)

    def _on_selection(self) -> None:
        self._loading = True
        try:
            self._sync_priority()
        finally:
            self._loading = False
        self._update_controls()

    def _sync_priority(self) -> None:
        job_id = self.selected_id()
        job = next((j for j in self._queue.get("jobs") or [] if j.get("id") == job_id), None)
        self.priority_spin.setValue(int(job.get("priority") or 0) if job else 0)

    def _update_controls(self) -> None:
        connected = self._client.is_connected
        ids = self.queued_ids()
        job_id = self.selected_id()
        index = ids.index(job_id) if job_id in ids else -1
        self.top_button.setEnabled(connected and index > 0)
        self.up_button.setEnabled(connected and index > 0)
        self.down_button.setEnabled(connected and 0 <= index < len(ids) - 1)
        self.bottom_button.setEnabled(connected and 0 <= index < len(ids) - 1)
        self.priority_spin.setEnabled(connected and index >= 0)
        for widget in (self.max_jobs_spin, self.cores_spin, self.sharing_check):
            widget.setEnabled(connected)

    def _show_error(self, err) -> None:
        self.message.setText(str(err))
        self.message.setVisible(True)
