"""The status bar's activity indicator: every running job, its progress, ETA and Stop / Cancel.

"2 jobs running · 43% · ETA 1 min 20 s"; a click opens a popup with a row per
job. It covers every kind of job, since each reports progress its own way:

- a fine-tune: ``run/<id>/train`` events carry ``progress`` and ``eta_s``
  (seconds left when the event was written at ``t``), as the Monitor shows;
- compress and export jobs: ``run/<id>/progress`` ``{stage, fraction, message}``;
  the ETA is extrapolated from the time run so far;
- a machine probe that samples: ``run/<id>/sample`` ``{step}`` of ``spec.samples``,
  one every ``spec.interval_s``.

Which jobs are active comes from the window's JobsState (app/state/job_list.py). Stop and Cancel send ``jobs.stop`` / ``jobs.cancel`` without
an error callback, so a refusal reaches the notification centre.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QPoint, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.models.jobs import display_name
from app.state.style import set_role
from app.text import format as fmt
from app.widgets.jobs_table import state_dot
from engine.api.job_terms import ACTIVE_STATES, LIVE_STATES, kind_noun

MIN_FRACTION_FOR_ETA = 0.05  # before this, an extrapolated ETA is mostly noise
MIN_SECONDS_FOR_ETA = 5.0  # nor after only a moment: the first stage is often not the typical pace
TOPICS = ["run/*/train", "run/*/progress", "run/*/sample"]


@dataclass
class ActiveJob:
    id: str
    kind: str
    name: str
    state: str
    started_at: float | None = None
    spec: dict[str, Any] | None = None
    fraction: float | None = None
    eta_s: float | None = None  # seconds left, estimated at eta_at
    eta_at: float = 0.0
    message: str = ""

    def eta(self, now: float | None = None) -> float | None:
        return fmt.eta_left(self.eta_s, self.eta_at, now) if self.state in LIVE_STATES else None


class ActivityTracker(QObject):
    """The active jobs of the engine and the progress each last reported."""

    changed = Signal()

    def __init__(self, engine, parent: QObject | None = None):
        super().__init__(parent)
        self._client = engine.client
        self._jobs: dict[str, ActiveJob] = {}
        self._client.subscribe(TOPICS, self._on_event)  # live progress; the records come from JobsState
        self.jobs_state = engine.jobs
        self.jobs_state.jobs_reset.connect(self.reload)
        self.jobs_state.job_changed.connect(self._on_job)
        self.jobs_state.job_removed.connect(self._on_job_removed)
        if self.jobs_state.loaded:
            self.reload()

    def jobs(self) -> list[ActiveJob]:
        """Running jobs first, then queued; oldest first in each."""
        return sorted(self._jobs.values(), key=lambda j: (j.state not in LIVE_STATES, j.started_at or 0, j.id))

    def job(self, job_id: str) -> ActiveJob | None:
        return self._jobs.get(job_id)

    def running(self) -> list[ActiveJob]:
        return [j for j in self.jobs() if j.state in LIVE_STATES]

    def queued(self) -> list[ActiveJob]:
        return [j for j in self.jobs() if j.state == "queued"]

    def reload(self) -> None:
        """The job list was read again: keep the active jobs, drop those that ended meanwhile."""
        active = self.jobs_state.active()
        for job_id in set(self._jobs) - {job["id"] for job in active}:
            del self._jobs[job_id]
        for job in active:
            self._upsert(job)
        self.changed.emit()

    def _on_job(self, job: dict[str, Any]) -> None:
        self._upsert(job)
        self.changed.emit()

    def _on_job_removed(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self.changed.emit()

    def _upsert(self, job: dict[str, Any]) -> None:
        job_id = job.get("id")
        if not job_id:
            return
        state = str(job.get("state") or "")
        if job.get("deleted") or state not in ACTIVE_STATES:
            self._jobs.pop(job_id, None)
            return
        found = self._jobs.get(job_id)
        if found is None:
            found = self._jobs[job_id] = ActiveJob(job_id, str(job.get("kind") or ""), display_name(job), state)
        found.state = state
        found.name = display_name(job) or found.name
        found.started_at = fmt.to_epoch(job.get("started_at")) or found.started_at
        if isinstance(job.get("spec"), dict):
            found.spec = job["spec"]

    def _on_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        parts = topic.split("/")
        job = self._jobs.get(parts[1]) if len(parts) == 3 else None
        if job is None:
            return
        kind = parts[2]
        at = float(data.get("t") or time.time())
        if kind == "train":
            if data.get("progress") is not None:
                job.fraction = float(data["progress"])
            # No estimate from the first steps: their pace includes the warm-up.
            step = data.get("step")
            warm = isinstance(step, (int, float)) and step >= fmt.MIN_ETA_STEPS
            job.eta_s, job.eta_at = (data.get("eta_s") if warm else None), at
            if data.get("step") is not None:
                job.message = f"step {data['step']:,}"
        elif kind == "progress":
            job.fraction = float(data.get("fraction") or 0.0)
            job.message = str(data.get("message") or data.get("stage") or "")
            job.eta_s, job.eta_at = extrapolated_eta(job.fraction, job.started_at, at), at
        elif kind == "sample":
            samples = int((job.spec or {}).get("samples") or 0)
            step = int(data.get("step") or 0)
            if samples:
                job.fraction = min(1.0, (step + 1) / samples)
                job.eta_s = (samples - step - 1) * float((job.spec or {}).get("interval_s") or 0)
                job.eta_at = at
                job.message = f"sample {step + 1:,} of {samples:,}"
        else:
            return
        self.changed.emit()

    # -- actions ---------------------------------------------------------------------

    def stop(self, job_id: str) -> None:
        self._client.request("jobs.stop", {"id": job_id}, self._upsert)

    def cancel(self, job_id: str) -> None:
        self._client.request("jobs.cancel", {"id": job_id}, self._upsert)


def extrapolated_eta(fraction: float | None, started_at: float | None, now: float) -> float | None:
    """Time left if the rest goes as fast as what is done: for jobs that report a fraction only."""
    if fraction is None or started_at is None or fraction < MIN_FRACTION_FOR_ETA or fraction >= 1:
        return None
    elapsed = max(0.0, now - started_at)
    if elapsed < MIN_SECONDS_FOR_ETA:
        return None
    return elapsed * (1 - fraction) / fraction


def summary_text(tracker: ActivityTracker, now: float | None = None) -> str:
    """'2 jobs running · 43% · ETA 1 min 20 s · 1 queued'."""
    running, queued = tracker.running(), tracker.queued()
    parts = []
    if running:
        parts.append(f"{len(running)} job{'s' if len(running) != 1 else ''} running")
        fractions = [j.fraction for j in running if j.fraction is not None]
        if fractions:
            parts.append(f"{100 * sum(fractions) / len(fractions):.0f}%")
        etas = [e for e in (j.eta(now) for j in running) if e is not None]
        if etas:
            parts.append(f"ETA {fmt.duration(max(etas))}")
    if queued:
        parts.append(f"{len(queued)} queued")
    return " · ".join(parts) or "No jobs running"


class JobRow(QFrame):
    """One active job in the popup: name, what it is doing, progress, ETA, Stop and Cancel."""

    def __init__(self, job: ActiveJob, tracker: ActivityTracker, parent: QWidget | None = None):
        super().__init__(parent)
        self.job_id = job.id
        self._tracker = tracker
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 6, 0, 6)
        grid.setHorizontalSpacing(8)
        self.dot = QLabel()
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.detail = QLabel()
        set_role(self.detail, "muted")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(8)
        self.eta_label = QLabel()
        set_role(self.eta_label, "muted")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Finish the current step, save what can be saved, and stop")
        self.stop_button.clicked.connect(lambda: tracker.stop(self.job_id))
        self.cancel_button = QPushButton("Cancel")
        set_role(self.cancel_button, "danger")
        self.cancel_button.setToolTip("Kill the job at once; work since its last checkpoint is lost")
        self.cancel_button.clicked.connect(self._cancel)
        grid.addWidget(self.dot, 0, 0)
        grid.addWidget(self.title, 0, 1)
        grid.addWidget(self.eta_label, 0, 2, Qt.AlignmentFlag.AlignRight)
        grid.addWidget(self.progress, 1, 1, 1, 2)
        grid.addWidget(self.detail, 2, 1, 1, 2)
        buttons = QHBoxLayout()
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.cancel_button)
        grid.addLayout(buttons, 0, 3, 3, 1)
        grid.setColumnStretch(1, 1)
        self.update_from(job)

    def update_from(self, job: ActiveJob, now: float | None = None) -> None:
        self.dot.setPixmap(state_dot(job.state).pixmap(10, 10))
        self.title.setText(f"{kind_noun(job.kind)}: {job.name}" if job.name != job.kind else kind_noun(job.kind))
        self.detail.setText(" · ".join(p for p in (job.state, job.message) if p))
        self.progress.setValue(int(1000 * min(1.0, job.fraction or 0.0)))
        left = job.eta(now)
        percent = f"{100 * job.fraction:.0f}%" if job.fraction is not None else ""
        eta = f"ETA {fmt.duration(left)}" if left is not None else \
            "finishing" if job.state in LIVE_STATES and (job.fraction or 0) >= 1 else ""
        self.eta_label.setText(" · ".join(p for p in (percent, eta) if p) or
                               ("waiting to start" if job.state == "queued" else ""))
        self.stop_button.setEnabled(job.state == "running")
        self.cancel_button.setEnabled(job.state in ACTIVE_STATES)
        self.stop_button.setAccessibleName(f"Stop {job.name}")
        self.cancel_button.setAccessibleName(f"Cancel {job.name}")
        self.progress.setAccessibleName(f"Progress of {job.name}: {percent or 'not known yet'}")

    def _cancel(self) -> None:
        answer = QMessageBox.question(
            self.window(), "Cancel this job?",
            "Cancel kills the job at once: the work since its last checkpoint is lost. "
            "Stop instead finishes the step and saves what it can.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        if answer == QMessageBox.StandardButton.Yes:
            self._tracker.cancel(self.job_id)


class ActivityPopup(QFrame):
    """The list of active jobs, opened from the indicator."""

    def __init__(self, tracker: ActivityTracker, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("activityPopup")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(460)
        self.setAccessibleName("Running jobs")
        self._tracker = tracker
        self.rows: dict[str, JobRow] = {}
        column = QVBoxLayout(self)
        column.setContentsMargins(14, 12, 14, 12)
        heading = QLabel("Running jobs")
        set_role(heading, "h2")
        column.addWidget(heading)
        self.empty = QLabel("No jobs are running. Start a fine-tune, a compression or an export and "
                            "follow it here.")
        self.empty.setWordWrap(True)
        set_role(self.empty, "muted")
        column.addWidget(self.empty)
        self._rows_layout = QVBoxLayout()
        column.addLayout(self._rows_layout)
        tracker.changed.connect(self.refresh)
        self.refresh()

    def refresh(self, now: float | None = None) -> None:
        jobs = self._tracker.jobs()
        for job_id in set(self.rows) - {j.id for j in jobs}:
            self.rows.pop(job_id).deleteLater()
        for index, job in enumerate(jobs):
            row = self.rows.get(job.id)
            if row is None:
                row = self.rows[job.id] = JobRow(job, self._tracker, self)
            self._rows_layout.insertWidget(index, row)
            row.update_from(job, now)
        self.empty.setVisible(not jobs)
        if self.isVisible():
            self.adjustSize()


class ActivityIndicator(QToolButton):
    """Status-bar button: a summary of the active jobs; click for the popup."""

    def __init__(self, engine, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("activityIndicator")
        self.setAutoRaise(True)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.setToolTip("Jobs running now, with progress and time left; click to stop or cancel one")
        self.tracker = ActivityTracker(engine, self)
        self.popup = ActivityPopup(self.tracker, self)
        self._tick = QTimer(self, interval=1000)  # the ETA counts down between events
        self._tick.timeout.connect(self.refresh)
        self.tracker.changed.connect(self.refresh)
        self.clicked.connect(self.show_popup)
        self.refresh()

    def refresh(self) -> None:
        text = summary_text(self.tracker)
        self.setText(text)
        self.setAccessibleName(f"Activity: {text}")
        if not self.tracker.running():
            self._tick.stop()
        elif not self._tick.isActive():
            self._tick.start()
        if self.popup.isVisible():
            self.popup.refresh()

    def show_popup(self) -> None:
        self.popup.refresh()
        self.popup.show()  # shown first: the size is only final once the rows are laid out and polished
        self.popup.adjustSize()
        size = self.popup.size()
        corner = self.mapToGlobal(QPoint(self.width(), 0))
        right = self.window().mapToGlobal(QPoint(self.window().width(), 0)).x()  # never past the window's edge
        self.popup.move(max(0, min(corner.x(), right) - size.width()), max(0, corner.y() - size.height() - 4))
