"""Export: a five-step wizard that turns a finished run or variant into deployable files.

Source → formats and options → target (a Jetson bundle or a TensorRT engine only)
→ review (the job file, the same one ``ember run`` takes) → run (progress, one row
per format with its parity check, TensorRT compatibility findings, the device's
figures and output). One ``export.model`` job (docs/export.md); its spec is
validated with the engine's own model as the form changes, every message is shown
on the step that has the field, and Next and Start stay disabled while any remain.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QWidget

from app.connection.engine_process import EngineProcess
from app.pages.export.plan import (
    FORMATS,
    KIND,
    REVIEW,
    RUN,
    SOURCE,
    SOURCE_KINDS,
    TARGET,
    TARGET_FORMATS,
    build_spec,
    job_name,
    job_yaml,
    step_of,
    validate,
)
from app.pages.export.step_formats import FormatsStep
from app.pages.export.step_review import ReviewStep
from app.pages.export.step_run import RunStep
from app.pages.export.step_source import SourceStep
from app.pages.export.step_target import TargetStep
from app.state.navigation import Navigator
from app.text.field_text import plain_message
from app.widgets.wizard_page import WizardPage
from app.widgets.wizard_parts import Step, error_text
from engine.api.job_terms import FINAL_STATES

LIST_LIMIT = 1000


def exportable(record: dict[str, Any]) -> bool:
    return record.get("kind") in SOURCE_KINDS and record.get("state") == "succeeded"


class ExportPage(WizardPage):
    title = "Export"
    intro = ("Turn a fine-tune or a variant into files that run elsewhere: ONNX, an ONNX Runtime package, "
             "TorchScript, torch.export, TensorRT, a Triton repository or a Jetson bundle; a language model as a "
             "merged checkpoint, GGUF or ONNX for generation. Each is checked against the model before it is "
             "called done.")
    steps: list[Step]

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client
        self._wanted_source: str | None = None  # set_variant before the list had it
        self._source_id: str | None = None
        self._starting = False
        self._subscription: Any = None
        self.errors: dict[str, list[str]] = {}
        self.full_spec: dict[str, Any] | None = None  # the validated spec Start sends

        self.source_step, self.formats_step, self.target_step = SourceStep(), FormatsStep(), TargetStep()
        self.source_step.new_finetune_requested.connect(self.nav.action("new_finetune"))
        self.review_step, self.run_step = ReviewStep(), RunStep()
        self.steps = [self.source_step, self.formats_step, self.target_step, self.review_step, self.run_step]
        self.build_frame(("Start", "Start the export job shown on Review", self.start))
        # What tests drive (source_list and review_view come from build_frame).
        self.format_checks = self.formats_step.format_checks
        self.results_table = self.run_step.results_table
        self.variant_facts = self.source_step.facts

        self.run_step.stop_requested.connect(self.stop_job)
        self.run_step.another_requested.connect(self.export_another)
        self._client.subscribe(["hosts"], lambda *_a: self._load_hosts())
        self.follow_engine(engine.jobs)

    # -- the spec ---------------------------------------------------------------------------

    def source(self) -> dict[str, Any] | None:
        return self.source_step.source()

    def options(self) -> dict[str, Any]:
        return {**self.target_step.values(), **self.formats_step.values()}

    def spec(self) -> dict[str, Any]:
        """The spec as the form has it (before the engine's defaults)."""
        return build_spec(self.source(), self.options())

    def name(self) -> str:
        return job_name(self.source())

    def needs_target(self) -> bool:
        return any(f in self.formats_step.checked() for f in TARGET_FORMATS)

    def _on_changed(self) -> None:
        record = self.source()
        source_id = record.get("id") if record else None
        if source_id != self._source_id:
            self._source_id = source_id
            self.formats_step.set_source(record, self.source_step.task(record))
            self.source_step.show_source(record)
        elif record is not None:
            self.source_step.show_source(record)
        self.target_step.set_formats(self.formats_step.checked())
        self.refresh()

    def refresh(self) -> None:
        spec = self.spec()
        self.full_spec, self.errors = validate(spec)
        chosen = self.source() is not None
        if not chosen:
            self.errors.pop("source_run", None)  # "choose a run to export" says it better
        for index, step in enumerate(self.steps[:REVIEW]):
            step.show_errors({f: m for f, m in self.errors.items() if step_of(f) == index})
        self.review_step.set_job(self.name(), job_yaml(self.full_spec or spec, self.name()),
                                 spec["formats"] if chosen else [])
        self._update_buttons()

    # -- navigation -------------------------------------------------------------------------

    def step_blockers(self, index: int) -> list[str]:
        """What keeps the user on step ``index`` (Next stays disabled while there is any)."""
        if index >= REVIEW or (index == TARGET and not self.needs_target()):
            return []
        step = self.steps[index]
        titles = getattr(step, "titles", {})
        found = list(step.blocking())
        for field, messages in self.errors.items():
            if step_of(field) == index:
                title = titles.get(field.split(".", 1)[0], field)
                found.extend(plain_message(title, m) or f"{title}: {m}" for m in messages)
        return found

    def blockers(self) -> list[str]:
        names = {SOURCE: "Source", FORMATS: "Formats", TARGET: "Target"}
        found = [f"{names[i]} · {p}" for i in (SOURCE, FORMATS, TARGET) for p in self.step_blockers(i)]
        found += [f"{f or 'spec'}: {m}" for f, ms in self.errors.items() if step_of(f) == REVIEW for m in ms]
        return found

    def can_go_to(self, index: int) -> bool:
        if index == RUN:
            return bool(self.run_step.job_id) or self.run_step.state != ""
        if index == TARGET and not self.needs_target():
            return False
        return all(not self.step_blockers(i) for i in range(min(index, REVIEW)))

    def go_to(self, index: int) -> None:
        index = max(0, min(index, len(self.steps) - 1))
        if index == TARGET and not self.needs_target():  # skipped: nothing to set there
            index = REVIEW if self.current_step() < TARGET else FORMATS
        if index > self.current_step() and not self.can_go_to(index):
            return
        self.show_step(index)

    def _update_buttons(self) -> None:
        index = self.current_step()
        problems = self.blockers()
        connected = self._client.is_connected
        self.back_button.setEnabled(0 < index < RUN)
        self.back_button.setVisible(index != RUN)  # the Run step has its own buttons
        self.next_button.setVisible(index < REVIEW)
        following = REVIEW if index == FORMATS and not self.needs_target() else index + 1
        self.next_button.setEnabled(index < REVIEW and self.can_go_to(following))
        self.run_button.setEnabled(connected and not problems and not self._starting and index != RUN)
        self.run_button.setVisible(index != RUN)
        self.review_step.set_blockers(problems)
        for i, (step, button) in enumerate(zip(self.steps, self.step_buttons, strict=True)):
            skipped = i == TARGET and not self.needs_target()
            button.setEnabled(not skipped and (i <= index or self.can_go_to(i)))
            button.setToolTip("Only a Jetson bundle or a TensorRT engine has a target" if skipped
                              else f"Go to step {i + 1}: {step.title}")
            flagged = i < REVIEW and any(step_of(f) == i for f in self.errors) and not skipped
            button.setText(f"{i + 1}  {step.title}" + ("  ⚠" if flagged else ""))
        if self._starting:
            return
        self.show_progress(running=index == RUN, connected=connected, problems=problems,
                           here=self.step_blockers(index) if index < REVIEW else problems,
                           here_role="error" if self.errors else "muted",
                           ready=f"Ready: Start sends {self.name()} to the engine.")

    # -- choosing the model -----------------------------------------------------------------

    def navigate(self, job_id: str, record: dict[str, Any] | None = None) -> None:
        """Opened from another page with the run (a variant or a parent) to export."""
        self.set_variant(job_id, record)

    def set_variant(self, job_id: str, record: dict[str, Any] | None = None) -> None:
        """Export ``run_id`` (chosen on Compare › Variants or Runs): select it and open Formats."""
        self._wanted_source = job_id
        if record and record.get("id") == job_id and exportable(record):
            self.source_step.upsert(record)
        if self.source_step.select(job_id):
            self._wanted_source = None
            if self.current_step() != RUN or self.run_step.state in FINAL_STATES:
                self.go_to(FORMATS)
        if self._client.is_connected:
            # The list's record has no result: jobs.get brings the model's path and the variant's accuracy.
            self._client.request("jobs.get", {"id": job_id}, self._on_wanted_record,
                                 lambda err: self._set_status(f"Run {job_id}: {error_text(err)}", "error"))

    def _on_wanted_record(self, record: dict[str, Any]) -> None:
        job_id = record.get("id")
        if exportable(record):
            self.source_step.upsert(record)
            if job_id == self._wanted_source:
                self.set_variant(job_id)
            return
        if job_id != self._wanted_source:
            return
        self._wanted_source = None
        self._set_status(f"Run {record.get('name') or job_id} is a {record.get('kind')} job in state "
                         f"{record.get('state')}: only a finished (succeeded) fine-tune or compression "
                         "variant can be exported.", "error")

    # -- the job ----------------------------------------------------------------------------

    def start(self) -> None:
        """Send the job shown on Review, then follow it on the Run step."""
        if not self.run_button.isEnabled() or self.full_spec is None:
            return
        spec, name = dict(self.full_spec), self.name()
        self._starting = True
        if self._subscription is not None:
            self._client.unsubscribe(self._subscription)
            self._subscription = None
        self.run_step.begin(name, spec)
        self.go_to(RUN)
        self._client.request("jobs.start", {"kind": KIND, "spec": spec, "name": name},
                             self._started, self._refused)

    def _started(self, record: dict[str, Any]) -> None:
        self._starting = False
        self.run_step.set_record(record)
        job_id = self.run_step.job_id
        if job_id:
            # since=0: the whole history first (a fast job may be half done already), then live.
            self._subscription = self._client.subscribe(
                [f"run/{job_id}/*"], lambda topic, _seq, data: self._on_run_event(topic, data), since=0)
        self._update_buttons()

    def _refused(self, err: Any) -> None:
        self._starting = False
        self.run_step.refused(f"Not started: {error_text(err)}")
        self._update_buttons()

    def stop_job(self, job_id: str) -> None:
        self._client.request("jobs.stop", {"id": job_id}, self._on_record,
                             lambda err: self.run_step.refused(f"Stop failed: {error_text(err)}"))

    def export_another(self) -> None:
        """Back to Source with the same choices, the finished job left in the runs list."""
        if self._subscription is not None:
            self._client.unsubscribe(self._subscription)
            self._subscription = None
        self.run_step.reset()
        self.go_to(SOURCE if self.source() is None else FORMATS)

    def _on_run_event(self, topic: str, data: dict[str, Any]) -> None:
        kind = topic.rsplit("/", 1)[-1]
        self.run_step.on_event(kind, data)
        if kind == "status" and data.get("state") in FINAL_STATES and self.run_step.job_id:
            # The record (error, hint) and result.json, as the engine has them now.
            self._client.request("jobs.get", {"id": self.run_step.job_id}, self._on_record, lambda _e: None)

    def _on_record(self, record: dict[str, Any]) -> None:
        if record.get("id") != self.run_step.job_id:
            return
        self.run_step.set_record(record)
        if self.run_step.state in FINAL_STATES and "result" not in record:
            self._client.request("jobs.get", {"id": record["id"]}, self._on_final_record, lambda _e: None)
        self._update_buttons()

    def _on_final_record(self, record: dict[str, Any]) -> None:
        if record.get("id") == self.run_step.job_id:
            self.run_step.set_record(record)

    # -- engine -----------------------------------------------------------------------------

    def reload(self, _hello: Any = None) -> None:
        self._load_hosts()
        if self.run_step.job_id:  # what happened while disconnected
            self._client.request("jobs.get", {"id": self.run_step.job_id}, self._on_record, lambda _e: None)
        self._update_buttons()

    def _load_hosts(self) -> None:
        if self._client.is_connected:
            self._client.request("hosts.list", {}, lambda reply: self.target_step.set_hosts(reply.get("hosts") or []),
                                 lambda _err: self.target_step.set_hosts([]))

    def _on_list(self) -> None:
        self.source_step.set_runs([j for j in self.jobs.by_state("succeeded") if exportable(j)][:LIST_LIMIT])
        if self._wanted_source and self.source_step.select(self._wanted_source):
            self._wanted_source = None
            if self.current_step() == SOURCE:
                self.go_to(FORMATS)
        self._on_changed()

    def is_source(self, record: dict[str, Any]) -> bool:
        return exportable(record)
