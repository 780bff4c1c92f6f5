"""Step 5: the jobs that were started, one row each: state, progress, Cancel.

A row's state comes from the ``jobs`` topic (each event is the whole record) and
``jobs.get`` after a reconnect; its progress from the job's own ``run/<id>/*``
events: ``run/<id>/progress`` {stage, fraction, message} of a compression job,
or the ``progress`` of a distillation fine-tune's train events.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.widgets.common import card, label
from app.widgets.jobs_table import STATE_COLOURS
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, show_text, step_header
from engine.api.job_terms import ACTIVE_STATES, FINAL_STATES


class JobRow(QWidget):
    """One started (or refused) job."""

    cancel_requested = Signal(str)

    def __init__(self, kind: str, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.kind, self.name = kind, name
        self.job_id: str | None = None
        self.state = "starting"
        self.record: dict[str, Any] = {}
        self.subscription: Any = None
        self._reported = False  # the job has said how far it is
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 4, 0, 4)
        text = QVBoxLayout()
        text.setSpacing(1)
        self.name_label = label(name)
        self.name_label.setStyleSheet("font-weight: 600;")
        text.addWidget(self.name_label)
        self.kind_label = label(kind, "muted")
        text.addWidget(self.kind_label)
        self.detail_label = label("", "muted", wrap=True)
        self.detail_label.hide()
        text.addWidget(self.detail_label)
        row.addLayout(text, 3)
        self.state_label = label("starting…")
        self.state_label.setMinimumWidth(90)
        row.addWidget(self.state_label)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedWidth(200)
        row.addWidget(self.progress)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setProperty("role", "danger")
        self.cancel_button.setToolTip("Kill this job at once; a queued job never starts")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(lambda: self.job_id and self.cancel_requested.emit(self.job_id))
        row.addWidget(self.cancel_button)

    def set_record(self, record: dict[str, Any]) -> None:
        self.record = record
        self.job_id = record.get("id") or self.job_id
        self.kind_label.setText(f"{record.get('kind', self.kind)} · {self.job_id}")
        self.set_state(str(record.get("state") or "queued"))
        error = record.get("error") or {}
        if self.state == "failed" and error:
            hint = f" ({error.get('hint')})" if error.get("hint") else ""
            self.set_detail(f"{error.get('message', '')}{hint}", "error")

    def set_state(self, state: str) -> None:
        self.state = state
        self.state_label.setText(state)
        colour = STATE_COLOURS.get(state)
        self.state_label.setStyleSheet(f"color: {colour}; font-weight: 600;" if colour else "")
        self.cancel_button.setEnabled(state in ACTIVE_STATES)
        if state == "succeeded":
            self.set_progress(1.0)
        elif state == "running" and not self._reported:
            self.progress.setRange(0, 0)  # busy until the job reports a fraction
        elif state in FINAL_STATES and self.progress.maximum() == 0:
            self.progress.setRange(0, 1000)

    def set_progress(self, fraction: float) -> None:
        self._reported = True
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * max(0.0, min(1.0, float(fraction)))))

    def set_detail(self, text: str, role: str = "muted") -> None:
        self.detail_label.setProperty("role", role)
        self.detail_label.style().unpolish(self.detail_label)
        self.detail_label.style().polish(self.detail_label)
        show_text(self.detail_label, text)

    def refused(self, message: str) -> None:
        self.set_state("not started")
        self.progress.setRange(0, 1000)
        self.set_detail(message, "error")


class RunStep(Step):
    title = "Run"
    compare_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.job_rows: list[JobRow] = []
        outer = step_column(self, step_header("Run",
                                              "The jobs run in the engine: closing this window does not stop them. "
                                              "Each finished variant appears in Compare › Variants, measured next "
                                              "to the source run."))
        frame, box = card()
        self.empty = label("Nothing started yet: press Start on the Review step.", "muted", wrap=True)
        box.addWidget(self.empty)
        self.rows_box = QVBoxLayout()
        self.rows_box.setSpacing(2)
        box.addLayout(self.rows_box)
        foot = QHBoxLayout()
        self.summary = label("", "muted", wrap=True)
        foot.addWidget(self.summary, 1)
        self.compare_button = QPushButton("Compare variants")
        self.compare_button.setProperty("role", "primary")
        self.compare_button.setToolTip("Open Compare › Variants for the source run")
        self.compare_button.clicked.connect(self.compare_requested.emit)
        foot.addWidget(self.compare_button)
        box.addLayout(foot)
        outer.addWidget(frame)
        outer.addStretch(1)

    def add_row(self, kind: str, name: str) -> JobRow:
        row = JobRow(kind, name)
        self.job_rows.append(row)
        self.rows_box.addWidget(row)
        self.empty.hide()
        return row

    def row_for(self, job_id: str) -> JobRow | None:
        return next((r for r in self.job_rows if r.job_id == job_id), None)

    def update_summary(self) -> None:
        states = [r.state for r in self.job_rows]
        if not states:
            self.summary.setText("")
            return
        counts = {s: states.count(s) for s in dict.fromkeys(states)}
        self.summary.setText(", ".join(f"{n} {s}" for s, n in counts.items()))
