"""Runs: every job the engine knows, live, to filter, sort, open, compare and clean up.

The list is the window's JobsState (app/state/job_list.py): read whenever the
connection (re)opens and kept current by the ``jobs`` topic, so jobs started by the
CLI or another window show up here too. The current row's details (RunDetails) are
re-read every couple of seconds while it runs; the selected rows are what the
actions act on.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QItemSelectionModel, QModelIndex, Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_process import EngineProcess
from app.models.jobs import display_name, is_system, run_summary
from app.pages.runs.queue_panel import QueuePanel
from app.state.navigation import Navigator, playground_can_open
from app.widgets.common import label
from app.widgets.empty_state import empty_state
from app.widgets.flow_layout import FlowLayout
from app.widgets.jobs_table import CREATED_COLUMN, NAME_COLUMN, STATE_GROUPS, JobsFilter, JobsModel
from app.widgets.run_details import RunDetails
from engine.api.job_terms import ACTIVE_STATES, FINETUNE, SWEEP

POLL_MS = 2000
LIST_LIMIT = 1000
RESUMABLE = ("stopped", "cancelled", "failed")
NAME_MIN_WIDTH = 170
LIST_MIN_HEIGHT = 100  # the table: a header and about three rows
DETAILS_MIN_HEIGHT = 150  # the details: title, facts line, the tab bar and a few lines


class RunsPage(QWidget):
    title = "Runs"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client
        self.model = JobsModel(self)
        self.proxy = JobsFilter(self)
        self.proxy.setSourceModel(self.model)
        self._selected_id: str | None = None  # the current row, shown in the details
        self._wanted: str | None = None  # a job another page started, selected once it is listed

        outer = QVBoxLayout(self)
        outer.setContentsMargins(28, 24, 28, 20)
        outer.setSpacing(10)
        outer.addWidget(label("Runs", "h1"))
        outer.addWidget(label("Every job the engine is running or has run. Closing Ember never "
                              "stops a job. Select several runs to compare them.", "muted", wrap=True))

        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter by name, task, model, method or state")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.setMinimumWidth(300)
        self.filter_edit.textChanged.connect(self._on_filter)
        self.state_combo = QComboBox()
        self.state_combo.addItems(list(STATE_GROUPS))
        self.state_combo.setToolTip("Show only the runs in this state")
        self.state_combo.currentTextChanged.connect(self._on_filter)
        self.system_check = QCheckBox("Show system jobs")
        self.system_check.setToolTip("Also list the engine's own jobs, such as Probe this machine "
                                     "(from Settings); they are not runs")
        self.system_check.toggled.connect(self._on_filter)

        self.open_button = self._button("Open in Monitor", "Follow this run's charts live "
                                        "(double-click a row does the same)", self.open_selected)
        self.compare_button = self._button("Compare", "Overlay the curves and specs of the "
                                           "selected runs (select two or more)", self.compare_selected)
        self.duplicate_button = self._button("Duplicate", "Open New fine-tune with this run's "
                                             "spec, to change it and start a new run",
                                             self.duplicate_selected)
        self.compress_button = self._button("Compress…", "Make smaller, faster variants of this "
                                            "finished fine-tune (quantize, prune, distil)",
                                            self.compress_selected)
        self.try_button = self._button("Try in Playground", "Chat with this finished language model, or "
                                       "classify text with this classifier", self.try_selected)
        self.lineage_button = self._button("Lineage…", "Where this run's model came from: spec, data and "
                                           "model hashes, versions, parent runs, artifacts", self.lineage_selected)
        self.resume_button = self._button("Resume", "Continue a stopped or failed fine-tune "
                                          "from its latest checkpoint", lambda: self._act("jobs.resume"))
        self.stop_button = self._button("Stop", "Ask the job to finish cleanly (a checkpoint "
                                        "is written; SIGKILL after a timeout)",
                                        lambda: self._act("jobs.stop"))
        self.cancel_button = self._button("Cancel", "Kill the job at once; a queued job never "
                                          "starts", lambda: self._act("jobs.cancel"), "danger")
        self.delete_button = self._button("Delete…", "Delete the run and its files "
                                          "(checkpoints, model)", self.delete_selected, "danger")
        self.refresh_button = self._button("Refresh", "Read the list again", self.reload)

        # Two rows, so the page fits the window's default width: what to show, what to do.
        tools = QHBoxLayout()
        tools.addWidget(self.filter_edit, 1)
        tools.addWidget(self.state_combo)
        tools.addWidget(self.system_check)
        tools.addStretch(1)
        tools.addWidget(self.refresh_button)
        outer.addLayout(tools)
        # What to do with the selected runs, then the job controls at the right; in a narrow
        # window the controls wrap onto a row of their own instead of widening the page.
        actions = QWidget()
        flow = FlowLayout(actions, spacing=10)
        for group, trailing in (((self.open_button, self.compare_button, self.duplicate_button,
                                  self.compress_button), False),
                                ((self.try_button, self.lineage_button, self.resume_button), False),
                                ((self.stop_button, self.cancel_button, self.delete_button), True)):
            box = QWidget()
            row = QHBoxLayout(box)
            row.setContentsMargins(0, 0, 0, 0)
            for button in group:
                row.addWidget(button)
            flow.addWidget(box, trailing=trailing)
        outer.addWidget(actions)

        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(CREATED_COLUMN, Qt.SortOrder.DescendingOrder)
        head = self.table.horizontalHeader()
        head.setHighlightSections(False)
        head.setSortIndicatorShown(True)
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # Name takes what the other columns leave, but never less than NAME_MIN_WIDTH (the
        # table scrolls sideways instead): a Stretch column could shrink to nothing.
        head.setSectionResizeMode(NAME_COLUMN, QHeaderView.ResizeMode.Interactive)
        self._fit_timer = QTimer(self, singleShot=True, interval=0)
        self._fit_timer.timeout.connect(self._fit_name_column)
        for signal in (self.proxy.modelReset, self.proxy.rowsInserted, self.proxy.dataChanged,
                       self.proxy.layoutChanged):
            signal.connect(lambda *_: self._fit_timer.start())
        self.table.selectionModel().currentRowChanged.connect(self._on_row_changed)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        self.table.doubleClicked.connect(lambda _index: self.open_selected())
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self._menu_actions: dict[QPushButton, QAction] = {}
        for button in (self.open_button, self.compare_button, self.duplicate_button,
                       self.compress_button, self.try_button, self.resume_button, self.stop_button,
                       self.cancel_button, self.delete_button):
            action = QAction(button.text(), self.table)
            action.triggered.connect(button.click)
            self.table.addAction(action)
            self._menu_actions[button] = action  # enabled like its button

        self.empty = empty_state(
            "No runs yet", "Start a fine-tune, probe this machine from Settings, or start a job with "
            "the ember command; it appears here.", "Start your first fine-tune",
            self.nav.action("new_finetune"), icon_name="runs")
        self.empty.layout().setContentsMargins(16, 8, 16, 8)  # it shares the height with the details
        self.list_stack = QStackedWidget()
        self.list_stack.addWidget(self.empty)
        self.list_stack.addWidget(self.table)

        self.details = RunDetails(self._client)
        self.details.lookup = self.model.lookup  # a variant's parent: its name and task, model, method
        self.details.run_link_activated.connect(self.select_run)

        # Low minimums, so the page fits a small window (1024 x 700): the table and the tabs
        # scroll inside what they get; the user can drag the divider.
        self.list_stack.setMinimumHeight(LIST_MIN_HEIGHT)
        self.details.setMinimumHeight(DETAILS_MIN_HEIGHT)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.list_stack)
        splitter.addWidget(self.details)
        # Queued jobs in run order, why each waits, reordering and the concurrency settings: a
        # third pane, so a long queue takes room from the table and details, not the window.
        self.queue_panel = QueuePanel(self._client)
        self._queue_timer = QTimer(self, singleShot=True, interval=0)  # once laid out
        self._queue_timer.timeout.connect(self._fit_queue)
        self.queue_panel.content_changed.connect(self._queue_timer.start)
        splitter.addWidget(self.queue_panel)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        splitter.setStretchFactor(2, 0)
        # About half and half to start; the user can drag.
        splitter.setSizes([300, 340, self.queue_panel.wanted_height()])
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        outer.addWidget(splitter, 1)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        # One timer ticks running durations and re-reads the current job's log.
        self._tick = QTimer(self, interval=POLL_MS)
        self._tick.timeout.connect(self._on_tick)
        self._tick.start()

        # The records come from the window's one JobsState (app/state/job_list.py).
        self.jobs = engine.jobs
        self.jobs.jobs_reset.connect(self._on_list)
        self.jobs.job_changed.connect(self._on_job_event)
        self.jobs.job_removed.connect(self._forget)
        self.jobs.load_failed.connect(self._show_error)
        self._client.disconnected.connect(self._update_buttons)
        if self.jobs.loaded:
            self._on_list()
        self._update_buttons()

    def _button(self, text: str, tip: str, slot, role: str = "") -> QPushButton:
        button = QPushButton(text)
        button.setToolTip(tip)
        if role:
            button.setProperty("role", role)
        button.clicked.connect(slot)
        return button

    def _fit_name_column(self) -> None:
        head = self.table.horizontalHeader()
        others = sum(head.sectionSize(c) for c in range(head.count()) if c != NAME_COLUMN)
        head.resizeSection(NAME_COLUMN,
                           max(NAME_MIN_WIDTH, self.table.viewport().width() - others - 2))

    def _fit_queue(self) -> None:
        """Give the queue pane the height it needs, up to a third of the three panes."""
        sizes = self.splitter.sizes()
        if len(sizes) != 3 or not sum(sizes):
            return
        want = min(self.queue_panel.wanted_height(), sum(sizes) // 3)
        change = want - sizes[2]
        if change <= 0:
            return  # never shrink what the user may have dragged open
        # From the table and the details, each in proportion to what it has above its minimum.
        spare = [max(0, sizes[0] - LIST_MIN_HEIGHT), max(0, sizes[1] - DETAILS_MIN_HEIGHT)]
        change = min(change, sum(spare))
        if change <= 0:
            return
        from_list = change * spare[0] // sum(spare)
        self.splitter.setSizes([sizes[0] - from_list, sizes[1] - (change - from_list), sizes[2] + change])

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit_timer.start()
        self._queue_timer.start()  # more room: the queue may get what it wants now

    # -- loading ---------------------------------------------------------------------

    def reload(self) -> None:
        """Ask the engine for the whole list again (every page follows)."""
        self.jobs.reload()

    def _on_list(self) -> None:
        self.message.hide()
        selected = self._selected_id
        self.model.set_jobs(self.jobs.all()[:LIST_LIMIT])
        self._show_list()
        if not (selected and self.select_run(selected)) and self.proxy.rowCount():
            self.table.selectRow(0)
        self._update_buttons()

    def _on_job_event(self, data: dict[str, Any]) -> None:
        job_id = data["id"]
        is_new = self.model.row_of(job_id) < 0
        # The event carries the whole public record (state, times, exit code, error, summary).
        self._on_job_record(data)
        self._show_list()
        if is_new and self._selected_id is None and self.proxy.rowCount():
            self.table.selectRow(0)

    def _on_job_record(self, job: dict[str, Any]) -> None:
        job = {k: v for k, v in job.items() if k != "result"}
        row = self.model.upsert(job)
        if job.get("id") == self._wanted:
            self._wanted = None
            self.select_run(job["id"])
        if job.get("id") == self._selected_id:
            self.details.show_job(self.model.job(row))
        self._update_buttons()

    def _forget(self, job_id: str) -> None:
        if job_id == self._selected_id:
            self._selected_id = None
            self.details.show_job(None)
        self.model.remove(job_id)
        self._show_list()
        self._update_buttons()

    def _show_list(self) -> None:
        """The table, or the empty state while there is no run (hidden system jobs do not count)."""
        jobs = self.model.jobs()
        has_runs = any(not is_system(job) for job in jobs) or (self.proxy.shows_system() and bool(jobs))
        self.list_stack.setCurrentWidget(self.table if has_runs else self.empty)
        self.details.setVisible(has_runs)  # nothing to detail: the empty state gets the room

    # -- selection ---------------------------------------------------------------------

    def _job_at(self, proxy_index: QModelIndex) -> dict[str, Any] | None:
        if not proxy_index.isValid():
            return None
        return self.model.job(self.proxy.mapToSource(proxy_index).row())

    def selected_job(self) -> dict[str, Any] | None:
        """The current row's job (the one the details show)."""
        row = self.model.row_of(self._selected_id) if self._selected_id else -1
        return self.model.job(row)

    def selected_jobs(self) -> list[dict[str, Any]]:
        """Every selected row's job, top to bottom as shown."""
        rows = sorted(self.table.selectionModel().selectedRows(), key=lambda i: i.row())
        return [job for job in (self._job_at(index) for index in rows) if job]

    def navigate(self, job_id: str) -> None:
        """Opened from another page on a job it started (Navigator.show("runs", job_id=...)): selected once it is
        listed."""
        if not self.select_run(job_id):
            self._wanted = job_id

    def select_run(self, job_id: str) -> bool:
        """Make ``job_id`` the only selected row (clearing filters that hide it)."""
        row = self.model.row_of(job_id)
        if row < 0:
            return False
        index = self.proxy.mapFromSource(self.model.index(row, 0))
        if not index.isValid():
            self.filter_edit.clear()
            self.state_combo.setCurrentIndex(0)
            if is_system(self.model.job(row) or {}):
                self.system_check.setChecked(True)
            index = self.proxy.mapFromSource(self.model.index(row, 0))
        self.table.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows)
        self.table.scrollTo(index)
        return True

    def _on_row_changed(self, current: QModelIndex, _previous) -> None:
        job = self._job_at(current)
        self._selected_id = job.get("id") if job else None
        self.details.show_job(job)
        self._update_buttons()

    def _on_filter(self, *_args) -> None:
        self.proxy.set_text(self.filter_edit.text())
        self.proxy.set_state_group(self.state_combo.currentText())
        self.proxy.set_show_system(self.system_check.isChecked())
        self._show_list()
        self._update_buttons()

    def _on_tick(self) -> None:
        if not self.isVisible():
            return
        self.model.refresh_durations()
        if self.details.is_active():
            self.details.refresh()

    # -- actions -----------------------------------------------------------------------

    def open_selected(self) -> None:
        job = self.selected_job()
        if job is not None and job.get("kind") == SWEEP:
            self.nav.show("compare", sweep=job["id"])  # a sweep is seen through its trials
        elif job is not None:
            self.nav.show("monitor", job_id=job["id"])

    def compare_selected(self) -> None:
        job = self.selected_job()
        if job is not None and job.get("kind") == SWEEP:
            self.nav.show("compare", sweep=job["id"])
            return
        ids = [job["id"] for job in self.selected_jobs() if job.get("kind") == FINETUNE]
        if len(ids) >= 2:
            self.nav.show("compare", job_ids=ids)

    def duplicate_selected(self) -> None:
        job = self.selected_job()
        if job is not None and job.get("kind") == FINETUNE:
            self.nav.show("new_finetune", spec=dict(job.get("spec") or {}), name=f"{display_name(job)} copy")

    def compress_selected(self) -> None:
        job = self.selected_job()
        if job is not None and job.get("kind") == FINETUNE and job.get("state") == "succeeded":
            self.nav.show("compress", source=job["id"])

    def try_selected(self) -> None:
        job = self.selected_job()
        if job is not None and self._can_try(job):
            self.nav.try_in_playground(job_id=job["id"])

    def _can_try(self, job: dict[str, Any]) -> bool:
        return playground_can_open(job, run_summary(job, self.model.lookup).get("task"))

    def lineage_selected(self) -> None:
        job = self.selected_job()
        if job is not None:
            from app.pages.runs.lineage_view import LineageDialog

            self.lineage_dialog = LineageDialog(self._client, job["id"], self)
            self.lineage_dialog.show()

    def _act(self, method: str) -> None:
        self.message.hide()
        for job in self.selected_jobs() or ([self.selected_job()] if self.selected_job() else []):
            self._client.request(method, {"id": job["id"]}, self._on_job_record, self._show_error)

    def delete_selected(self) -> None:
        jobs = self.selected_jobs()
        if not jobs:
            return
        names = ", ".join(self.model.title(job) for job in jobs[:5])
        if len(jobs) > 5:
            names += f" and {len(jobs) - 5} more"
        what = f"the run {names}" if len(jobs) == 1 else f"{len(jobs)} runs ({names})"
        answer = QMessageBox.question(
            self, "Delete runs",
            f"Delete {what}?\n\nIts files are deleted too: checkpoints, the trained model, "
            "logs and events. This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.message.hide()
        for job in jobs:
            job_id = job["id"]
            self._client.request("jobs.delete", {"id": job_id, "files": True},
                                 lambda _reply, job_id=job_id: self._forget(job_id),
                                 self._show_error)

    def _update_buttons(self) -> None:
        job = self.selected_job()
        jobs = self.selected_jobs() or ([job] if job else [])
        states = {j.get("state") for j in jobs}
        connected = self._client.is_connected
        finetunes = [j for j in jobs if j.get("kind") == FINETUNE]
        is_finetune = job is not None and job.get("kind") == FINETUNE
        self.open_button.setEnabled(job is not None)
        self.compare_button.setEnabled(len(finetunes) >= 2 or (job is not None and job.get("kind") == SWEEP))
        self.duplicate_button.setEnabled(is_finetune)
        self.compress_button.setEnabled(is_finetune and job.get("state") == "succeeded")
        self.try_button.setEnabled(job is not None and self._can_try(job))
        self.lineage_button.setEnabled(connected and job is not None)
        self.resume_button.setEnabled(connected and bool(finetunes) and all(
            j.get("state") in RESUMABLE for j in finetunes) and len(finetunes) == len(jobs))
        self.stop_button.setEnabled(connected and "running" in states)
        self.cancel_button.setEnabled(connected and bool(states & set(ACTIVE_STATES)))
        # Active runs too: the engine refuses those and says why.
        self.delete_button.setEnabled(connected and bool(jobs))
        self.refresh_button.setEnabled(connected)
        for button, action in self._menu_actions.items():
            action.setEnabled(button.isEnabled())

    def _show_error(self, err) -> None:
        self.message.setText(str(err))
        self.message.setVisible(True)
