"""The lower half of the Runs page: one job's overview, spec, log, events, checkpoints, lineage.

The events are what the job wrote to events.jsonl, replayed from the start and
then followed live through a ``run/<id>/*`` subscription (events can arrive
after the job's final state, while the engine catches up with the file). The
log is the job's stdout.log (``jobs.logs``), which has no event, so the Runs
page calls ``refresh`` on a timer while the job is active. The record with its
``result`` (``jobs.get``) and the files (``jobs.artifacts``) are read when the
job is shown, when its state changes and after a checkpoint or artifact event;
the files and their two tabs are app/widgets/run_outputs.py.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_client import EngineClient, Subscription
from app.models.jobs import (
    Lookup,
    best_text,
    metrics_text,
    parent_id,
    peak_text,
    run_summary,
    run_title,
    strategy_text,
)
from app.text import format as fmt
from app.widgets.common import FactsView, label
from app.widgets.run_outputs import RunOutputs
from engine.api.job_terms import ACTIVE_STATES, FINETUNE

LOG_TAIL = 500
MAX_EVENT_LINES = 5000  # older lines scroll away; the Monitor page is for long histories
FLUSH_MS = 100
EVENT_LINE_CHARS = 200
TABS_MIN_HEIGHT = 90


def event_line(topic: str, event: dict[str, Any]) -> str:
    kind = topic.rsplit("/", 1)[-1]
    data = {k: v for k, v in event.items() if k not in ("t", "kind")}
    text = " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" if isinstance(v, (dict, list))
                    else f"{k}={v}" for k, v in data.items())
    if len(text) > EVENT_LINE_CHARS:
        text = text[:EVENT_LINE_CHARS - 1] + "…"
    return f"{fmt.timestamp(event.get('t'))}  {kind:<10} {text}"


def _yaml(spec: dict[str, Any]) -> str:
    import yaml  # here, not at the top: the Runs page is built at startup

    return yaml.safe_dump(spec, sort_keys=False)


def _text_view(placeholder: str) -> QPlainTextEdit:
    view = QPlainTextEdit()
    view.setObjectName("log")
    view.setReadOnly(True)
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    view.setPlaceholderText(placeholder)
    return view


def _scrolling(widget: QWidget) -> QScrollArea:
    scroll = QScrollArea()
    scroll.setObjectName("pageScroll")  # the page's background, as the Overview tab
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QScrollArea.Shape.NoFrame)
    scroll.setWidget(widget)
    return scroll


class RunDetails(QWidget):
    run_link_activated = Signal(str)  # a parent/child run was clicked: select it

    def __init__(self, client: EngineClient, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self.lookup: Lookup | None = None  # other jobs by id (the Runs page's): a variant's parent
        self._job: dict[str, Any] | None = None
        self._full: dict[str, Any] = {}  # jobs.get of the shown job (has `result`)
        self._final_metrics: dict[str, Any] = {}
        self._events: Subscription | None = None
        self._pending_lines: list[str] = []
        self._flush = QTimer(self, singleShot=True, interval=FLUSH_MS)
        self._flush.timeout.connect(self._flush_events)
        # The Checkpoints and Artifacts & lineage tabs, and the jobs.artifacts reply behind them.
        self.outputs = RunOutputs(client, self)
        self.outputs.run_link_activated.connect(self.run_link_activated.emit)
        self.outputs.files_changed.connect(self._show_facts)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        self.title = label("Details", "h2", wrap=True)  # a long run name wraps, never widens the page
        self.meta = label("", "muted", wrap=True)
        self.meta.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error = label("", "error", wrap=True)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.hide()

        # Two columns of facts: the job (left) and, for a fine-tune, what it trained (right).
        self.facts = FactsView()
        self.training_facts = FactsView()
        self._fact_rows_shown: tuple[list, list] = ([], [])
        facts_body = QWidget()
        facts_body.setObjectName("pageBody")
        columns = QHBoxLayout(facts_body)
        columns.setSpacing(32)
        for view in (self.facts, self.training_facts):
            column = QVBoxLayout()
            column.addWidget(view)
            column.addStretch(1)
            columns.addLayout(column, 1)
        overview = QScrollArea()
        overview.setObjectName("pageScroll")
        overview.setWidgetResizable(True)
        overview.setFrameShape(QScrollArea.Shape.NoFrame)
        overview.setWidget(facts_body)

        self.spec_view = _text_view("This job has no spec.")
        self.copy_spec_button = QPushButton("Copy spec")
        self.copy_spec_button.setToolTip("Copy the spec as YAML, ready for a job file")
        self.copy_spec_button.clicked.connect(
            lambda: QApplication.clipboard().setText(self.spec_view.toPlainText()))
        spec_tab = QWidget()
        spec_box = QVBoxLayout(spec_tab)
        spec_box.addWidget(self.spec_view, 1)
        spec_box.addWidget(self.copy_spec_button, 0, Qt.AlignmentFlag.AlignRight)

        self.log_view = _text_view("Select a run to see its log.")
        self.events_view = _text_view("Select a run to see its events.")
        self.events_view.setMaximumBlockCount(MAX_EVENT_LINES)

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(overview, "Overview")
        self.tabs.addTab(spec_tab, "Spec")
        self.tabs.addTab(self.log_view, "Log")
        self.tabs.addTab(self.events_view, "Events")
        # Scrolling, so their tables and notes do not set how short the details may get.
        self.tabs.addTab(_scrolling(self.outputs.checkpoints_tab), "Checkpoints")
        self.tabs.addTab(_scrolling(self.outputs.artifacts_tab), "Artifacts && lineage")
        layout.addWidget(self.title)
        layout.addWidget(self.meta)
        layout.addWidget(self.error)
        self.tabs.setMinimumHeight(TABS_MIN_HEIGHT)  # the views inside scroll; the page stays short
        layout.addWidget(self.tabs, 1)
        self._show_facts()

    @property
    def job_id(self) -> str | None:
        return self._job.get("id") if self._job else None

    # The widgets of the Checkpoints and Artifacts & lineage tabs (they live in RunOutputs).

    @property
    def checkpoints(self) -> QTableWidget:
        return self.outputs.checkpoints

    @property
    def checkpoints_note(self) -> QLabel:
        return self.outputs.checkpoints_note

    @property
    def artifacts(self) -> QTableWidget:
        return self.outputs.artifacts

    @property
    def artifacts_note(self) -> QLabel:
        return self.outputs.artifacts_note

    @property
    def lineage(self) -> QLabel:
        return self.outputs.lineage

    def show_job(self, job: dict[str, Any] | None) -> None:
        """Show ``job`` (None: nothing selected); fetches its log, events and files when new."""
        new = (job or {}).get("id") != self.job_id
        previous_state = (self._job or {}).get("state")
        self._job = dict(job) if job else None
        self.outputs.set_job(self._job, new)
        if new:
            self.log_view.clear()
            self.events_view.clear()
            self._pending_lines.clear()
            self._full, self._final_metrics = {}, {}
            if self._events is not None:
                self._client.unsubscribe(self._events)
                self._events = None
            if job is not None:
                self._events = self._client.subscribe([f"run/{job['id']}/*"], self._add_event,
                                                      since=0)
            spec = (job or {}).get("spec")
            self.spec_view.setPlainText(_yaml(spec) if spec else "")
            self.copy_spec_button.setEnabled(bool(spec))
        self._show_facts()
        if job is not None and (new or job.get("state") != previous_state):
            self.refresh()
            self._fetch_record()
            self.outputs.fetch()

    def refresh(self) -> None:
        """Fetch the log of the shown job again (and let its running duration tick)."""
        job_id = self.job_id
        if job_id is None or not self._client.is_connected:
            return
        if self.is_active():
            self._show_facts()
        self._client.request("jobs.logs", {"id": job_id, "tail": LOG_TAIL},
                             lambda reply: self._show_log(job_id, reply), lambda _err: None)

    def is_active(self) -> bool:
        return bool(self._job) and self._job.get("state") in ACTIVE_STATES

    # -- the record ------------------------------------------------------------

    def _fetch_record(self) -> None:
        job_id = self.job_id
        if job_id is None or not self._client.is_connected:
            return

        def got(reply: dict[str, Any]) -> None:
            if job_id != self.job_id:
                return  # the user moved on while the request was out
            self._full = reply
            result = reply.get("result") or {}
            metrics = result.get("metrics") if isinstance(result, dict) else None
            if isinstance(metrics, dict):
                self._final_metrics = metrics
            elif reply.get("kind") == FINETUNE and reply.get("state") not in ACTIVE_STATES:
                # No result file: the last evaluation is the final word.
                self._client.request("jobs.metrics", {"id": job_id, "kind": "eval"},
                                     lambda r: self._got_eval(job_id, r), lambda _e: None)
            self._show_facts()

        self._client.request("jobs.get", {"id": job_id}, got, lambda _err: None)

    def _got_eval(self, job_id: str, reply: dict[str, Any]) -> None:
        rows = reply.get("metrics") or []
        if job_id != self.job_id or not rows:
            return
        last = max(row["step"] for row in rows)
        self._final_metrics = {row["name"]: row["value"] for row in rows if row["step"] == last}
        self._show_facts()

    # -- facts ----------------------------------------------------------------------------

    def _show_facts(self) -> None:
        job = self._job
        if job is None:
            self.title.setText("Details")
            self.meta.clear()
            self.error.hide()
            self._set_facts([("Run", "Select a run in the table above.")])
            self.spec_view.clear()
            self.copy_spec_button.setEnabled(False)
            self.log_view.setPlaceholderText("Select a run to see its log.")
            self.events_view.setPlaceholderText("Select a run to see its events.")
            self.outputs.show_lineage()
            return
        name = run_title(job, self.lookup)
        self.title.setText(f"{name}  ({job.get('state')})")
        facts = [str(job.get("id")), str(job.get("kind")),
                 f"started {fmt.timestamp(job.get('started_at'))}"]
        if job.get("ended_at"):
            facts.append(f"ended {fmt.timestamp(job.get('ended_at'))}")
        if job.get("exit_code") is not None:
            facts.append(f"exit code {job['exit_code']}")
        self.meta.setText("  ·  ".join(facts))
        error = job.get("error") or {}
        text = " ".join(filter(None, [error.get("message"), error.get("hint")]))
        self.error.setText(text)
        self.error.setVisible(bool(text))
        self._set_facts(self._fact_rows(job), self._training_rows(job))
        active = job.get("state") in ACTIVE_STATES
        self.log_view.setPlaceholderText("Nothing in this run's log yet." if active else
                                         "This run wrote nothing to its log (stdout.log).")
        self.events_view.setPlaceholderText("No events from this run yet." if active else
                                            "This run recorded no events.")

    def fact(self, key: str) -> str:
        """The overview's text for ``key`` in either column ('' when absent)."""
        return self.facts.value(key) or self.training_facts.value(key)

    def _set_facts(self, rows: list[tuple[str, str]],
                   training: list[tuple[str, str]] | None = None) -> None:
        shown = (rows, training or [])
        if shown == self._fact_rows_shown:
            return  # the running-duration tick: nothing else changed
        self._fact_rows_shown = shown
        for view, view_rows in zip((self.facts, self.training_facts), shown, strict=True):
            for old in view.findChildren(QLabel):
                old.hide()  # set_facts deletes them later; never paint old and new together
            view.set_facts(view_rows)

    def _fact_rows(self, job: dict[str, Any]) -> list[tuple[str, str]]:
        rows = [("State", str(job.get("state", ""))),
                ("Kind", str(job.get("kind", ""))),
                ("Created", fmt.timestamp(job.get("created_at"))),
                ("Started", fmt.timestamp(job.get("started_at"))),
                ("Ended", fmt.timestamp(job.get("ended_at"))),
                ("Duration", fmt.job_duration(job)),
                ("Exit code", "—" if job.get("exit_code") is None else str(job["exit_code"]))]
        error = job.get("error") or {}
        if error:
            rows.append(("Error", error.get("message") or "—"))
            if error.get("hint"):
                rows.append(("What to try", error["hint"]))
        rows.append(("Run folder", str(job.get("run_dir") or "—")))
        return rows

    def _training_rows(self, job: dict[str, Any]) -> list[tuple[str, str]]:
        if job.get("kind") != FINETUNE:
            # A variant or export: what it was made from, and that run's task, model and method.
            info = run_summary(job, self.lookup)
            parent = parent_id(job)
            record = self.lookup(parent) if self.lookup and parent else None
            if not parent:
                return []
            rows = [("Made from", run_title(record, self.lookup) if record else parent)]
            return rows + [(key.capitalize(), str(info.get(key) or "—")) for key in ("task", "model", "method")]
        info = run_summary({**job, **self._full}, self.lookup)
        memory = (self.outputs.files or {}).get("memory") or {}
        return [("Task", str(info.get("task") or "—")),
                ("Model", str(info.get("model") or "—")),
                ("Method", str(info.get("method") or "—")),
                ("Strategy", strategy_text(info)),
                ("Best metric", best_text(info.get("best"))),
                ("Final metrics", metrics_text(self._final_metrics)),
                # How far the fit estimate made before the run was from what it used.
                ("Peak memory", peak_text(info.get("estimated_peak") or memory.get("estimated"),
                                          info.get("measured_peak") or memory.get("measured")))]

    # -- log and events -------------------------------------------------------------------

    def _show_log(self, job_id: str, reply: dict[str, Any]) -> None:
        if job_id != self.job_id:
            return  # the user moved on while the request was out
        text = "\n".join(reply.get("lines", []))
        if text != self.log_view.toPlainText():
            _replace_keeping_end(self.log_view, text)

    def _add_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        # A replay can bring thousands of events at once: add them in batches.
        self._pending_lines.append(event_line(topic, data))
        if not self._flush.isActive():
            self._flush.start()
        self.outputs.event_seen(topic.rsplit("/", 1)[-1])  # a new checkpoint: list the files again

    def _flush_events(self) -> None:
        lines, self._pending_lines = self._pending_lines, []
        if not lines:
            return
        bar = self.events_view.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        self.events_view.appendPlainText("\n".join(lines))
        if at_end:
            bar.setValue(bar.maximum())


def _replace_keeping_end(view: QPlainTextEdit, text: str) -> None:
    """Replace the text; stay at the bottom if the user was there (tail -f behaviour)."""
    bar = view.verticalScrollBar()
    at_end = bar.value() >= bar.maximum() - 2
    view.setPlainText(text)
    if at_end:
        bar.setValue(bar.maximum())
