"""Monitor: one fine-tune, live: charts, progress, its log, and Stop / Cancel / Resume.

The run's events come from a ``run/<id>/*`` subscription made with ``since=0``:
the engine replays the stored history first and then carries on live, so a
window opened in the middle of a run (or after closing the last one) shows the
whole run. The job record (state, error) comes from the window's JobsState
(app/state/job_list.py) and ``jobs.get`` for the result. The log has no events: it is re-read every second
while the run is active and once more when it ends.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_client import Subscription
from app.connection.engine_process import EngineProcess
from app.models.jobs import metrics_text
from app.pages.monitor.answer_samples import AnswerSamples
from app.pages.monitor.banner import EventBanner
from app.pages.monitor.run_charts import RunCharts
from app.pages.monitor.speed_line import layout_summary, perf_summary, speed_summary
from app.state.navigation import Navigator, playground_can_open
from app.text import format as fmt
from app.text.glossary import term_tooltip
from app.widgets.common import label, show_text
from app.widgets.empty_state import empty_state
from app.widgets.jobs_table import STATE_COLOURS
from app.widgets.log_pane import LogPane
from engine.api.job_terms import ACTIVE_STATES, FINETUNE, LIVE_STATES

KIND = FINETUNE
LOG_TAIL = 2000
POLL_MS = 1000
STATUS_MS = 150  # progress labels follow the events at most this often
RESUMABLE = ("stopped", "cancelled", "failed")  # what jobs.resume accepts


def event_note(kind: str, data: dict[str, Any]) -> str:
    """The log line an evaluation or a checkpoint gets ('' for other events): the job writes
    none to its log for them (it does for a resume, a stop and early stopping)."""
    step = data.get("step")
    at = f" at step {step:,}" if isinstance(step, int) else ""
    if kind == "eval":
        return f"evaluation{at}: {metrics_text(data.get('metrics') or {})}"
    if kind == "checkpoint":
        seconds = data.get("seconds")
        slow = isinstance(seconds, (int, float)) and seconds >= 1  # a slow save is worth knowing
        took = f" in {fmt.duration(float(seconds))}" if slow else ""
        return f"checkpoint saved{at}{took}"
    return ""


def evaluating_text(data: dict[str, Any]) -> str:
    """'evaluating at step 20: generating answers 5/30' while an evaluation runs ('setting up: loading the
    model (…)' before the first step)."""
    if data.get("setup"):
        return f"setting up: {data.get('what')}"
    step = data.get("step")
    at = f" at step {step:,}" if isinstance(step, int) else ""
    done, total = data.get("done"), data.get("total")
    count = f" {done}/{total}" if isinstance(done, int) and isinstance(total, int) else ""
    return f"evaluating{at}: {data.get('what') or 'validation'}{count}"


class MonitorPage(QWidget):
    title = "Monitor"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client
        self._jobs: dict[str, dict[str, Any]] = {}
        self._job_id: str | None = None
        self._auto = True  # pick the run to show until the user (or another page) picks one
        self._events: Subscription | None = None
        self._info: dict[str, Any] = {}
        self._last_train: dict[str, Any] = {}
        self._evaluating: dict[str, Any] = {}  # the last evaluating event, until the eval (or a step) comes
        self.run_facts: dict[str, str] = {}

        outer = QVBoxLayout(self)
        outer.setContentsMargins(28, 24, 28, 16)
        outer.setSpacing(10)
        header = QHBoxLayout()
        titles = QVBoxLayout()
        titles.addWidget(label("Monitor", "h1"))
        titles.addWidget(label("A fine-tune as it trains. Closing Ember never stops a run; "
                               "coming back shows its whole history.", "muted", wrap=True))
        header.addLayout(titles, 1)
        self.run_combo = QComboBox()
        self.run_combo.setMinimumWidth(220)
        self.run_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.run_combo.setMinimumContentsLength(24)
        self.run_combo.setToolTip("The run to watch: running fine-tunes first, then the newest")
        self.run_combo.activated.connect(self._on_combo)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Finish the current step, save a checkpoint and stop; "
                                    "Resume continues from there")
        self.stop_button.clicked.connect(lambda: self._act("jobs.stop"))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setProperty("role", "danger")
        self.cancel_button.setToolTip("Kill the run at once, without a checkpoint")
        self.cancel_button.clicked.connect(lambda: self.cancel_run(ask=True))
        self.resume_button = QPushButton("Resume")
        self.resume_button.setProperty("role", "primary")
        self.resume_button.setToolTip("Continue a stopped or failed run from its last checkpoint")
        self.resume_button.clicked.connect(lambda: self._act("jobs.resume"))
        self.try_button = QPushButton("Try in Playground")
        self.try_button.setToolTip("Chat with this finished language model, or classify text with this classifier")
        self.try_button.clicked.connect(lambda: self.nav.try_in_playground(job_id=self._job_id))
        self.try_button.hide()  # shown for a finished run of a text model
        header.addWidget(self.run_combo, 0, Qt.AlignmentFlag.AlignBottom)
        for button in (self.stop_button, self.cancel_button, self.resume_button):
            header.addWidget(button, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addLayout(header)

        self.banner = EventBanner()
        outer.addWidget(self.banner)

        status = QHBoxLayout()
        self.state_label = label("", "h2")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(8)
        self.step_label = label("", "muted")
        self.eta_label = label("", "muted")
        status.addWidget(self.state_label)
        status.addWidget(self.progress, 1)
        status.addWidget(self.step_label)
        status.addSpacing(12)
        status.addWidget(self.eta_label)
        status.addWidget(self.try_button)  # beside "ran …": the header has no room left in a narrow window
        self.facts_label = label("", "muted", wrap=True)
        self.facts_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # What the speed options became (run_info "speed") and the latest utilisation figures.
        self.speed_label = label("", "muted", wrap=True)
        self.perf_label = label("", "muted", wrap=True)
        self.perf_label.setToolTip(term_tooltip("MFU", "TFLOP/s: the model's training arithmetic per second, "
                                                "all processes together."))
        for line in (self.speed_label, self.perf_label):
            line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            line.hide()  # shown once the run reports something for it

        self.charts = RunCharts()
        self.loss_chart = self.charts.loss_chart
        self.samples = AnswerSamples()  # causal LM runs: the latest evaluation's generated answers
        self.log_pane = LogPane()
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.charts)
        splitter.addWidget(self.samples)
        splitter.addWidget(self.log_pane)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        splitter.setStretchFactor(2, 1)
        splitter.setSizes([460, 200, 150])
        splitter.setChildrenCollapsible(False)
        content = QWidget()
        column = QVBoxLayout(content)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(8)
        column.addLayout(status)
        column.addWidget(self.facts_label)
        column.addWidget(self.perf_label)
        column.addWidget(self.speed_label)
        column.addWidget(splitter, 1)

        self.empty = empty_state(
            "No run to watch yet", "Pick a run on Runs or start one: its loss, learning rate, "
            "throughput and memory appear here while it trains.", "Start a fine-tune",
            self.nav.action("new_finetune"), icon_name="monitor")
        self.body = QStackedWidget()
        self.body.addWidget(self.empty)
        # A run's facts and the charts can ask for more than a small window's height: scroll then.
        scroll = QScrollArea()
        scroll.setObjectName("pageScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        content.setObjectName("pageBody")
        scroll.setWidget(content)
        self.body.addWidget(scroll)
        self.content = scroll
        outer.addWidget(self.body, 1)

        self._poll = QTimer(self, interval=POLL_MS)
        self._poll.timeout.connect(self._on_poll)
        self._poll.start()
        self._status_timer = QTimer(self, singleShot=True, interval=STATUS_MS)
        self._status_timer.timeout.connect(self._show_progress)

        # Job records from the window's one JobsState; this run's metrics and log come on its own topics.
        self.jobs = engine.jobs
        self.jobs.jobs_reset.connect(self.reload)
        self.jobs.job_changed.connect(self._on_job_event)
        self.jobs.job_removed.connect(self._on_job_removed)
        self.jobs.load_failed.connect(self.banner.show_rpc_error)
        self._client.disconnected.connect(self._update_controls)
        if self.jobs.loaded:
            self.reload()
        self._update_controls()

    # -- which run -------------------------------------------------------------------

    @property
    def job_id(self) -> str | None:
        return self._job_id

    def job(self) -> dict[str, Any]:
        return self._jobs.get(self._job_id or "", {})

    def show_run(self, job_id: str) -> None:
        """Watch ``job_id``."""
        self._auto = False
        self._switch(job_id)

    def navigate(self, job_id: str) -> None:
        """Opened from another page (Navigator.show("monitor", job_id=...))."""
        self.show_run(job_id)

    def reload(self) -> None:
        """The job list was read again (connect, reconnect): refill the choice, re-read this run."""
        if self._job_id:
            self._fetch_record(self._job_id)
        for job in self.jobs.by_kind(KIND):
            self._jobs[job["id"]] = {**self._jobs.get(job["id"], {}), **job}
        self._fill_combo()
        if self._auto and self._job_id is None:
            default = self._default_run()
            if default:
                self._switch(default)

    def _default_run(self) -> str | None:
        ordered = self._ordered()
        return ordered[0]["id"] if ordered else None

    def _ordered(self) -> list[dict[str, Any]]:
        jobs = [j for j in self._jobs.values() if j.get("kind") == KIND or j["id"] == self._job_id]
        newest = sorted(jobs, key=lambda j: fmt.to_epoch(j.get("created_at")) or 0, reverse=True)
        return sorted(newest, key=lambda j: j.get("state") not in ACTIVE_STATES)

    def _fill_combo(self) -> None:
        self.run_combo.blockSignals(True)
        self.run_combo.clear()
        for job in self._ordered():
            name = job.get("name") or (job.get("summary") or {}).get("model") or ""
            text = f"{job['id']}  {name}  ({job.get('state', '?')})".replace("    ", "  ")
            self.run_combo.addItem(text, job["id"])
        index = self.run_combo.findData(self._job_id) if self._job_id else -1
        self.run_combo.setCurrentIndex(index)
        self.run_combo.blockSignals(False)

    def _on_combo(self, index: int) -> None:
        job_id = self.run_combo.itemData(index)
        if job_id:
            self.show_run(job_id)

    def _on_job_removed(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._fill_combo()

    def _on_job_event(self, data: dict[str, Any]) -> None:
        job_id = data["id"]
        if data.get("kind") != KIND and job_id != self._job_id:
            return
        before = self._jobs.get(job_id, {}).get("state")
        self._jobs[job_id] = {**self._jobs.get(job_id, {}), **data}
        self._fill_combo()
        if job_id == self._job_id:
            self._on_state(before)
        elif self._auto and data.get("state") == "running" and \
                self.job().get("state") not in ACTIVE_STATES:
            self._switch(job_id)  # nothing chosen by hand: follow the run that just started
        elif self._job_id is None:
            self._switch(job_id)

    # -- switching -------------------------------------------------------------------

    def _switch(self, job_id: str) -> None:
        if job_id == self._job_id and self._events is not None:
            return
        if self._events is not None:
            self._client.unsubscribe(self._events)
        self._job_id = job_id
        self._info, self._last_train, self.run_facts, self._evaluating = {}, {}, {}, {}
        self.charts.clear()
        self.samples.clear()
        self.log_pane.clear()
        self.banner.dismiss()
        self.facts_label.clear()
        show_text(self.speed_label, "")
        show_text(self.perf_label, "")
        self._events = self._client.subscribe([f"run/{job_id}/*"], self._on_run_event, since=0)
        self._fetch_record(job_id)
        self._fill_combo()
        self.body.setCurrentWidget(self.content)
        self._fetch_log()
        self._show_progress()
        self._update_controls()

    def _fetch_record(self, job_id: str) -> None:
        def done(record: dict[str, Any]) -> None:
            before = self._jobs.get(job_id, {}).get("state")
            self._jobs[job_id] = {**self._jobs.get(job_id, {}),
                                  **{k: v for k, v in record.items() if k != "result"}}
            self._fill_combo()
            if job_id == self._job_id:
                self._on_state(before)

        self._client.request("jobs.get", {"id": job_id}, done, self.banner.show_rpc_error)

    # -- events ----------------------------------------------------------------------

    def _on_run_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        prefix = f"run/{self._job_id}/"
        if not topic.startswith(prefix):
            return  # from the run shown before, still on its way
        kind = topic[len(prefix):]
        self.charts.add_event(kind, data)
        self.samples.add_event(kind, data)
        if kind == "evaluating":  # minutes can pass before the eval event: say what is being done
            self._evaluating = data
            self._show_progress()
        elif kind == "setup" and not self._last_train:  # before the first step: what the set-up does
            self._evaluating = {"what": str(data.get("stage") or "setting up"), "setup": True}
            self._show_progress()
        elif kind in ("train", "eval"):
            self._evaluating = {}
        if kind == "train":
            self._last_train = data
            if not self._status_timer.isActive():
                self._status_timer.start()
        elif kind == "run_info":
            self._info = data
            self._show_facts()
            self._show_progress()
        elif kind in ("error", "warning", "diverged"):
            self.banner.show_event(kind, data.get("message") or "", data.get("hint") or "")
        note = event_note(kind, data)
        if note:
            self.log_pane.add_note(float(data.get("t") or 0.0), note)

    def _on_state(self, before: str | None) -> None:
        job = self.job()
        state = job.get("state")
        if before in RESUMABLE and state in ACTIVE_STATES:
            self.banner.dismiss()  # resumed: the old failure is history
        if state == "failed" and not self.banner.isVisible() and job.get("error"):
            error = job["error"]
            self.banner.show_event("error", error.get("message") or "", error.get("hint") or "")
        if before in ACTIVE_STATES and state not in ACTIVE_STATES:
            self._fetch_log()  # the last lines, once
        self._show_progress()
        self._update_controls()

    # -- status, facts, log ------------------------------------------------------------

    def _show_progress(self) -> None:
        job = self.job()
        state = job.get("state") or ""
        self.state_label.setText(state or "—")
        colour = STATE_COLOURS.get(state)
        self.state_label.setStyleSheet(f"color: {colour};" if colour else "")
        train = self._last_train
        total = self._info.get("total_steps")
        step = train.get("step")
        progress = train.get("progress")
        if state == "succeeded":
            progress = 1.0
        self.progress.setValue(int(1000 * min(1.0, progress or 0.0)))
        if step is not None:
            self.step_label.setText(f"step {step:,} / {total:,}" if total else f"step {step:,}")
        else:
            self.step_label.setText(f"{total:,} steps" if total else "")
        if state in LIVE_STATES and self._evaluating:
            self.eta_label.setText(evaluating_text(self._evaluating))
        elif state in LIVE_STATES:
            # No ETA before it can be estimated, nor once the estimate has run out.
            left = fmt.train_eta(train)
            finishing = progress is not None and progress >= 1
            self.eta_label.setText(f"ETA {fmt.duration(left)}" if left is not None
                                   else "finishing" if finishing else "")
        elif state == "queued":
            self.eta_label.setText("waiting to start")
        elif job.get("started_at"):
            self.eta_label.setText(f"ran {fmt.job_duration(job)}")
        else:
            self.eta_label.clear()
        show_text(self.perf_label, perf_summary(train, self._info))

    def _show_facts(self) -> None:
        info = self._info
        facts = {
            "task": str(info.get("task", "")),
            "model": str(info.get("model", "")),
            "method": str(info.get("method", "")),
            "strategy": str(info.get("strategy", "")),
            "world size": str(info.get("world_size", "")),
            "device": str(info.get("device", "")),
        }
        trainable, total = info.get("trainable_params"), info.get("total_params")
        if isinstance(trainable, int):
            share = f" ({100 * trainable / total:.2f}%)" if isinstance(total, int) and total else ""
            facts["trainable params"] = f"{trainable:,} of {total:,}{share}" if total else f"{trainable:,}"
        self.run_facts = {k: v for k, v in facts.items() if v}
        world = info.get("world_size")
        procs = f"{world} process{'es' if world != 1 else ''} on {info.get('device', '?')}"
        layout = layout_summary(info)
        if layout:
            procs += f" as {layout}"
            self.run_facts["layout"] = layout
        parts = [facts["task"], facts["model"], facts["method"], facts["strategy"], procs]
        if "trainable params" in self.run_facts:
            parts.append(f"{self.run_facts['trainable params']} parameters train")
        self.facts_label.setText("  ·  ".join(p for p in parts if p))
        speed = info.get("speed") if isinstance(info.get("speed"), dict) else {}
        show_text(self.speed_label, speed_summary(speed, str(info.get("task") or "")))
        notes = [str(n) for n in speed.get("notes") or [] if n]
        self.speed_label.setToolTip("\n".join(notes))

    def _on_poll(self) -> None:
        if not self.isVisible() or not self._job_id:
            return
        if self.job().get("state") in ACTIVE_STATES:
            self._fetch_log()
            self._show_progress()

    def _fetch_log(self) -> None:
        job_id = self._job_id
        if not job_id or not self._client.is_connected:
            return

        def done(reply: dict[str, Any]) -> None:
            if job_id == self._job_id:
                self.log_pane.set_lines(reply.get("lines", []))

        self._client.request("jobs.logs", {"id": job_id, "tail": LOG_TAIL}, done, lambda _e: None)

    # -- actions ---------------------------------------------------------------------

    def cancel_run(self, ask: bool = True) -> None:
        if ask:
            answer = QMessageBox.question(
                self, "Cancel this run?",
                "Cancel kills the run at once: the steps since its last checkpoint are lost. "
                "Stop instead finishes the step and saves a checkpoint to resume from.",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No)
            if answer != QMessageBox.StandardButton.Yes:
                return
        self._act("jobs.cancel")

    def _act(self, method: str) -> None:
        job_id = self._job_id
        if not job_id:
            return

        def done(record: dict[str, Any]) -> None:
            before = self._jobs.get(job_id, {}).get("state")
            self._jobs[job_id] = {**self._jobs.get(job_id, {}), **record}
            if job_id == self._job_id:
                self._on_state(before)

        self._client.request(method, {"id": job_id}, done, self.banner.show_rpc_error)

    def _update_controls(self) -> None:
        state = self.job().get("state")
        connected = self._client.is_connected
        self.stop_button.setEnabled(connected and state == "running")
        self.cancel_button.setEnabled(connected and state in ACTIVE_STATES)
        self.resume_button.setEnabled(connected and state in RESUMABLE)
        job = self.job()
        self.try_button.setVisible(playground_can_open(job, (job.get("summary") or {}).get("task")
                                                       or self._info.get("task")))
        self.run_combo.setEnabled(connected or self.run_combo.count() > 0)
        if self._job_id is None:
            self.body.setCurrentWidget(self.empty)
