"""Compress: a five-step wizard that turns one finished fine-tune into several variants.

Source run → techniques → their settings → review (the YAML of every job) → run
(one row per job with its state, progress and Cancel). Each ticked technique is
one engine job (docs/compression.md); every spec is validated with the engine's
pydantic model as the form changes, and what Start sends is exactly the YAML
shown. Finished variants are compared on Compare › Variants.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

from app.connection.engine_process import EngineProcess
from app.pages.compress.step_review import ReviewStep
from app.pages.compress.step_run import JobRow, RunStep
from app.pages.compress.step_settings import SettingsStep
from app.pages.compress.step_source import SourceStep
from app.pages.compress.step_techniques import TechniquesStep
from app.pages.compress.techniques import (
    INT8_FORM,
    build_jobs,
    default_settings,
    field_errors,
    preset,
    source_facts,
)
from app.state.navigation import Navigator
from app.text.field_text import plain_message
from app.widgets.wizard_page import WizardPage
from app.widgets.wizard_parts import Step, error_text
from engine.api.job_terms import FINAL_STATES, FINETUNE

LIST_LIMIT = 1000
SOURCE, TECHNIQUES, SETTINGS, REVIEW, RUN = range(5)


class CompressPage(WizardPage):
    title = "Compress"
    intro = ("Make a trained model smaller and faster: merge LoRA adapters, quantize to int8 or fp16, prune, "
             "or distil into a smaller student. Every variant is measured next to its source run, so you see "
             "what it costs.")
    started = Signal(list)  # the ids of the jobs just started
    steps: list[Step]

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client
        self._wanted_source: str | None = None  # set_source before the list arrived
        self._source_id: str | None = None
        self._starting = 0  # jobs.start requests in flight
        self.batch_source: str | None = None  # the source run of the jobs on the Run step
        self.errors: dict[str, list[str]] = {}

        self.source_step, self.techniques_step = SourceStep(), TechniquesStep()
        self.source_step.new_finetune_requested.connect(self.nav.action("new_finetune"))
        self.techniques_step.preset_requested.connect(self.apply_preset)
        self.techniques_step.deploy_changed.connect(self.set_deploy)
        self.settings_step, self.review_step, self.run_step = SettingsStep(), ReviewStep(), RunStep()
        self.steps = [self.source_step, self.techniques_step, self.settings_step, self.review_step, self.run_step]
        self.build_frame(("Start", "Start one job per ticked technique, as shown on Review", self.start),
                         widest="Start 12 jobs")
        # What tests and the end-to-end test drive (source_list and review_view come from build_frame).
        self.technique_checks = self.techniques_step.technique_checks
        self.job_rows: list[JobRow] = self.run_step.job_rows

        self.run_step.compare_requested.connect(self.compare_variants)
        self.follow_engine(engine.jobs)

    # -- navigation -------------------------------------------------------------------------

    def step_blockers(self, index: int) -> list[str]:
        """What keeps the user on step ``index`` (Next stays disabled while there is any)."""
        if index == SETTINGS:
            titles = self.settings_step.titles
            return [(plain_message(titles.get(path, path), m) or f"{titles.get(path, path)}: {m}") if path else m
                    for path, msgs in self.errors.items() for m in msgs]
        if index in (SOURCE, TECHNIQUES):
            return self.steps[index].blocking()
        return []

    def can_go_to(self, index: int) -> bool:
        if index == RUN:
            return bool(self.job_rows)
        return all(not self.step_blockers(i) for i in range(min(index, REVIEW)))

    def go_to(self, index: int) -> None:
        index = max(0, min(index, len(self.steps) - 1))
        if index > self.current_step() and not self.can_go_to(index):
            return
        self.show_step(index)

    # -- the jobs ---------------------------------------------------------------------------

    def navigate(self, source: str) -> None:
        """Opened from another page on the finished fine-tune ``source``."""
        self.set_source(source)

    def set_source(self, job_id: str) -> None:
        """Compress ``run_id``: select it (once the list has it) and open Techniques."""
        self._wanted_source = job_id
        if self.source_step.select(job_id):
            self._wanted_source = None
            self.go_to(TECHNIQUES)
        elif self._client.is_connected:
            self._client.request("jobs.get", {"id": job_id}, self._on_wanted_record,
                                 lambda err: self._set_status(f"Run {job_id}: {error_text(err)}", "error"))

    def source(self) -> dict[str, Any] | None:
        return self.source_step.source()

    def specs(self) -> list[tuple[str, dict[str, Any], str]]:
        """(kind, spec, name) of every job Start sends, in order: what Review shows."""
        return build_jobs(self.source(), self.techniques_step.checked(), self.settings_step.values(),
                          chain=self.techniques_step.chain())

    def apply_preset(self, name: str) -> None:
        """Tick a chain preset's techniques, chained, with its settings."""
        keys, settings = preset(name, self.settings_step.values())
        self.techniques_step.set_checked(keys)
        self.techniques_step.chain_check.setChecked(True)
        self.settings_step.load(settings)
        self._on_changed()

    def set_deploy(self, deploy: str) -> None:
        """Where the variants will run: static int8 and QAT take that place's int8 form."""
        if self.techniques_step.deploy() != deploy:
            self.techniques_step.set_deploy(deploy)  # emits deploy_changed, which comes back here
            return
        settings = self.settings_step.values()
        settings["int8_target"] = INT8_FORM.get(deploy, settings["int8_target"])
        self.settings_step.load(settings)
        self._on_changed()

    def _on_changed(self) -> None:
        record = self.source()
        source_id = record.get("id") if record else None
        if source_id != self._source_id:
            self._source_id = source_id
            self.techniques_step.set_source(record)
            if record is not None:
                self.settings_step.follow_source(default_settings(record))
        task = source_facts(record).get("task") if record else None
        self.settings_step.set_techniques(self.techniques_step.checked(), task)
        self.refresh()

    def refresh(self) -> None:
        keys = self.techniques_step.checked()
        settings = self.settings_step.values()
        self.errors = field_errors(self.source(), keys, settings, chain=self.techniques_step.chain())
        self.settings_step.show_errors(self.errors)
        self.review_step.set_jobs(self.specs())
        self._update_buttons()

    def blockers(self) -> list[str]:
        return [p for i in (SOURCE, TECHNIQUES, SETTINGS) for p in self.step_blockers(i)]

    def _update_buttons(self) -> None:
        index = self.current_step()
        problems = self.blockers()
        connected = self._client.is_connected
        count = len(self.specs())
        self.back_button.setEnabled(index > 0)
        self.next_button.setVisible(index < REVIEW)
        self.next_button.setEnabled(index < REVIEW and self.can_go_to(index + 1))
        self.run_button.setText(f"Start {count} job{'s' if count != 1 else ''}" if count else "Start")
        self.run_button.setEnabled(connected and not problems and not self._starting and index != RUN)
        self.run_button.setVisible(index != RUN)
        self.review_step.set_blockers(problems)
        for i, (step, button) in enumerate(zip(self.steps, self.step_buttons, strict=True)):
            button.setEnabled(i <= index or self.can_go_to(i))
            flagged = bool(self.step_blockers(i)) and i == SETTINGS
            button.setText(f"{i + 1}  {step.title}" + ("  ⚠" if flagged else ""))
        if self._starting:
            return
        self.show_progress(running=index == RUN, connected=connected, problems=problems,
                           here=self.step_blockers(index) if index < REVIEW else problems,
                           here_role="error" if index == SETTINGS else "muted",
                           ready=f"Ready: Start sends {count} job{'s' if count != 1 else ''} to the engine.")

    # -- starting and following -------------------------------------------------------------

    def start(self) -> None:
        """Send one jobs.start per job shown on Review, then follow them on the Run step."""
        if not self.run_button.isEnabled():
            return
        jobs = self.specs()
        self.batch_source = self._source_id
        for kind, spec, name in jobs:
            row = self.run_step.add_row(kind, name)
            row.cancel_requested.connect(self.cancel_job)
            self._starting += 1
            self._client.request("jobs.start", {"kind": kind, "spec": spec, "name": name},
                                 lambda record, row=row: self._started(row, record),
                                 lambda err, row=row: self._refused(row, err))
        self.run_step.update_summary()
        self.go_to(RUN)

    def _started(self, row: JobRow, record: dict[str, Any]) -> None:
        self._starting -= 1
        row.set_record(record)
        if row.job_id and row.state not in FINAL_STATES:
            row.subscription = self._client.subscribe(
                [f"run/{row.job_id}/*"], lambda topic, _seq, data, row=row: self._on_run_event(row, topic, data),
                since=0)
        self.run_step.update_summary()
        self._update_buttons()
        if not self._starting:
            self.started.emit([r.job_id for r in self.job_rows if r.job_id])

    def _refused(self, row: JobRow, err: Any) -> None:
        self._starting -= 1
        row.refused(f"Not started: {error_text(err)}")
        self.run_step.update_summary()
        self._update_buttons()

    def cancel_job(self, job_id: str) -> None:
        row = self.run_step.row_for(job_id)
        self._client.request("jobs.cancel", {"id": job_id},
                             lambda record: row and self._on_record(record),
                             lambda err: row and row.set_detail(f"Cancel failed: {error_text(err)}", "error"))

    def _on_run_event(self, row: JobRow, topic: str, data: dict[str, Any]) -> None:
        kind = topic.rsplit("/", 1)[-1]
        # A compression job says {stage, fraction, message} on run/<id>/progress; a fine-tune
        # (distillation) carries ``progress`` on its train events.
        fraction = data.get("fraction") if kind == "progress" else data.get("progress")
        if isinstance(fraction, (int, float)) and row.state not in FINAL_STATES:
            row.set_progress(fraction)
        if kind == "progress" and data.get("message") and row.state not in FINAL_STATES:
            row.set_detail(str(data["message"]))
        elif kind == "status" and data.get("state") and row.state == "running":
            row.set_detail(str(data["state"]).replace("_", " "))
        elif kind == "error" and data.get("message"):
            row.set_detail(str(data["message"]), "error")

    def _on_record(self, record: dict[str, Any]) -> None:
        row = self.run_step.row_for(str(record.get("id")))
        if row is None:
            return
        row.set_record(record)
        if row.state in FINAL_STATES and row.subscription is not None:
            self._client.unsubscribe(row.subscription)
            row.subscription = None
        self.run_step.update_summary()

    def compare_variants(self) -> None:
        """Open Compare › Variants for the source run of the jobs started here."""
        parent_id = self.batch_source or self._source_id
        if parent_id:
            self.nav.show("compare", variants_of=parent_id, deploy=self.techniques_step.deploy())

    # -- engine -----------------------------------------------------------------------------

    def reload(self, _hello: Any = None) -> None:
        for row in self.job_rows:  # events missed while disconnected
            if row.job_id:
                self._client.request("jobs.get", {"id": row.job_id}, self._on_record, lambda _e: None)
        self._update_buttons()

    def _on_list(self) -> None:
        self.source_step.set_runs(self.jobs.by_kind(FINETUNE, ("succeeded",))[:LIST_LIMIT])
        if self._wanted_source:
            self.set_source(self._wanted_source)
        self._on_changed()

    def _on_wanted_record(self, record: dict[str, Any]) -> None:
        job_id = record.get("id")
        if job_id != self._wanted_source:
            return
        if self.is_source(record):
            self.source_step.upsert(record)
            self.set_source(job_id)
            return
        self._wanted_source = None
        what = "a fine-tune" if record.get("kind") == FINETUNE else f"a {record.get('kind')} job"
        self._set_status(f"Run {record.get('name') or job_id} is {what} in state {record.get('state')}: "
                         "only a finished (succeeded) fine-tune can be compressed.", "error")

    def is_source(self, record: dict[str, Any]) -> bool:
        return record.get("kind") == FINETUNE and record.get("state") == "succeeded"
