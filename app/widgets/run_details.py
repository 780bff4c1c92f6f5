"""The lower half of the Runs page: one job's facts, its log and its events.

The events are what the job wrote to events.jsonl, replayed from the start and
then followed live through a ``run/<id>/*`` subscription (events can arrive
after the job's final state, while the engine catches up with the file). The
log is the job's stdout.log (``jobs.logs``), which has no event, so the Runs
page calls ``refresh`` on a timer while the job is active.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QPlainTextEdit, QTabWidget, QVBoxLayout, QWidget

from app import format as fmt
from app.engine_client import EngineClient, Subscription
from app.widgets.common import label

LOG_TAIL = 500
MAX_EVENT_LINES = 5000  # older lines scroll away; the Monitor page is for long histories
FLUSH_MS = 100
EVENT_LINE_CHARS = 200
ACTIVE_STATES = ("queued", "running", "stopping")


def event_line(topic: str, event: dict[str, Any]) -> str:
    kind = topic.rsplit("/", 1)[-1]
    data = {k: v for k, v in event.items() if k not in ("t", "kind")}
    text = " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" if isinstance(v, (dict, list))
                    else f"{k}={v}" for k, v in data.items())
    if len(text) > EVENT_LINE_CHARS:
        text = text[:EVENT_LINE_CHARS - 1] + "…"
    return f"{fmt.timestamp(event.get('t'))}  {kind:<10} {text}"


def _text_view(placeholder: str) -> QPlainTextEdit:
    view = QPlainTextEdit()
    view.setObjectName("log")
    view.setReadOnly(True)
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    view.setPlaceholderText(placeholder)
    return view


class RunDetails(QWidget):
    def __init__(self, client: EngineClient, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._job: dict[str, Any] | None = None
        self._events: Subscription | None = None
        self._pending_lines: list[str] = []
        self._flush = QTimer(self, singleShot=True, interval=FLUSH_MS)
        self._flush.timeout.connect(self._flush_events)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        self.title = label("Details", "h2")
        self.meta = label("", "muted", wrap=True)
        self.meta.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error = label("", "error", wrap=True)
        self.error.hide()
        self.log_view = _text_view("Select a run to see its log.")
        self.events_view = _text_view("Select a run to see its events.")
        self.events_view.setMaximumBlockCount(MAX_EVENT_LINES)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.log_view, "Log")
        self.tabs.addTab(self.events_view, "Events")
        # Until the user picks a tab, show the log when there is one, else the events.
        self._tab_chosen = False
        self.tabs.tabBarClicked.connect(lambda _index: setattr(self, "_tab_chosen", True))
        layout.addWidget(self.title)
        layout.addWidget(self.meta)
        layout.addWidget(self.error)
        layout.addWidget(self.tabs, 1)

    @property
    def job_id(self) -> str | None:
        return self._job.get("id") if self._job else None

    def show_job(self, job: dict[str, Any] | None) -> None:
        """Show ``job`` (None: nothing selected); fetches its log and events when it is new."""
        new = (job or {}).get("id") != self.job_id
        previous_state = (self._job or {}).get("state")
        self._job = dict(job) if job else None
        if new:
            self.log_view.clear()
            self.events_view.clear()
            self._pending_lines.clear()
            if self._events is not None:
                self._client.unsubscribe(self._events)
                self._events = None
            if job is not None:
                self._events = self._client.subscribe([f"run/{job['id']}/*"], self._add_event,
                                                      since=0)
        self._show_facts()
        if job is not None and (new or job.get("state") != previous_state):
            self.refresh()

    def refresh(self) -> None:
        """Fetch the log of the shown job again."""
        job_id = self.job_id
        if job_id is None or not self._client.is_connected:
            return
        self._client.request("jobs.logs", {"id": job_id, "tail": LOG_TAIL},
                             lambda reply: self._show_log(job_id, reply), lambda _err: None)

    def is_active(self) -> bool:
        return bool(self._job) and self._job.get("state") in ACTIVE_STATES

    def _show_facts(self) -> None:
        job = self._job
        if job is None:
            self.title.setText("Details")
            self.meta.clear()
            self.error.hide()
            self.log_view.setPlaceholderText("Select a run to see its log.")
            self.events_view.setPlaceholderText("Select a run to see its events.")
            return
        self.title.setText(f"{job.get('id')}  ({job.get('kind')}, {job.get('state')})")
        facts = [f"started {fmt.timestamp(job.get('started_at'))}"]
        if job.get("ended_at"):
            facts.append(f"ended {fmt.timestamp(job.get('ended_at'))}")
        if job.get("exit_code") is not None:
            facts.append(f"exit code {job['exit_code']}")
        if job.get("run_dir"):
            facts.append(str(job["run_dir"]))
        self.meta.setText("  ·  ".join(facts))
        error = job.get("error") or {}
        text = " ".join(filter(None, [error.get("message"), error.get("hint")]))
        self.error.setText(text)
        self.error.setVisible(bool(text))
        active = job.get("state") in ACTIVE_STATES
        self.log_view.setPlaceholderText("Nothing in this run's log yet." if active else
                                         "This run wrote nothing to its log (stdout.log).")
        self.events_view.setPlaceholderText("No events from this run yet." if active else
                                            "This run recorded no events.")

    def _show_log(self, job_id: str, reply: dict[str, Any]) -> None:
        if job_id != self.job_id:
            return  # the user moved on while the request was out
        text = "\n".join(reply.get("lines", []))
        if text != self.log_view.toPlainText():
            _replace_keeping_end(self.log_view, text)
        if not self._tab_chosen:
            self.tabs.setCurrentWidget(self.log_view if text else self.events_view)

    def _add_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        # A replay can bring thousands of events at once: add them in batches.
        self._pending_lines.append(event_line(topic, data))
        if not self._flush.isActive():
            self._flush.start()

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
