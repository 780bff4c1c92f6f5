"""New fine-tune: a six-step wizard that builds one train.finetune spec and launches it.

Every step writes its part of one spec dict; after each change the whole spec
is validated with TrainSpec (errors go next to the field they name), the model
and data are inspected by the engine, the memory estimate is refreshed and the
review's YAML is rewritten. What Launch sends is exactly the YAML shown.
"""

from __future__ import annotations

import copy
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_process import EngineProcess
from app.models.field_labels import on_screen
from app.models.spec_tools import (
    KIND,
    deep_merge,
    defaults_for,
    launch_spec,
    route_issue,
    suggested_lr,
    validate,
)
from app.pages.new_finetune.parts import problem_line
from app.pages.new_finetune.step_data import DataStep
from app.pages.new_finetune.step_method import MethodStep
from app.pages.new_finetune.step_model import ModelStep
from app.pages.new_finetune.step_review import ReviewStep
from app.pages.new_finetune.step_task import TaskStep
from app.pages.new_finetune.step_training import TrainingStep
from app.state.navigation import Navigator
from app.state.style import set_role
from app.widgets.common import label
from app.widgets.wizard_frame import build_wizard_frame, show_status
from app.widgets.wizard_parts import Step, error_text
from engine.api.job_terms import SWEEP


class NewFinetunePage(QWidget):
    title = "New fine-tune"
    launched = Signal(str)  # job id

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client
        self._task = "text_classification"
        self._base = defaults_for(self._task)  # fields no step edits survive (load_spec)
        # The learning rate the wizard chose; it follows the task and method until the user
        # sets one (then it is theirs), and never changes a loaded spec's.
        self._auto_lr: float | None = self._base["optim"]["lr"]
        self._launching = False
        self.errors: dict[str, list[str]] = {}
        self.last_job_id: str | None = None
        self.machine: dict[str, Any] | None = None  # machine.info, once the engine answers

        outer = QVBoxLayout(self)
        outer.setContentsMargins(28, 24, 28, 16)
        outer.setSpacing(12)
        outer.addWidget(label("New fine-tune", "h1"))
        outer.addWidget(label("Fine-tune a model on your data in six steps. Every step starts "
                              "with a sensible default, so Next, Next, Launch gives a working run "
                              "on the built-in model and data.", "muted", wrap=True))

        self.task_step = TaskStep(self._client)
        self.model_step = ModelStep(self._client)
        self.data_step = DataStep(self._client)
        self.method_step = MethodStep()
        self.training_step = TrainingStep(self._client)
        self.review_step = ReviewStep(self._client)
        self.steps: list[Step] = [self.task_step, self.model_step, self.data_step,
                                  self.method_step, self.training_step, self.review_step]

        frame = build_wizard_frame(outer, self.steps, self.go_to, self.current_step,
                                   ('Launch', 'Check the inputs once more, then start the run', self.launch))
        self.step_buttons, self.stack = frame.step_buttons, frame.stack
        self.status_label, self.back_button, self.next_button = frame.status_label, frame.back_button, frame.next_button
        self.launch_button = frame.primary_button

        for step in self.steps:
            step.changed.connect(self._on_changed)
        self.task_step.template_chosen.connect(lambda t: self.load_spec(t.get("spec") or {}, ""))
        self.model_step.facts_changed.connect(self.method_step._on_facts)
        # New facts (a built-in model prepared, a model downloaded): the memory estimate is asked again.
        self.model_step.facts_changed.connect(lambda _facts: self.training_step.reestimate())
        self.model_step.code_mode_changed.connect(self.method_step.set_code_model)
        self.training_step.patch_requested.connect(self.apply_patch)
        self.training_step.hosts_page_requested.connect(self.nav.action("hosts"))
        self.review_step.template_saved.connect(lambda _n: self.task_step.reload_templates())
        self._client.connected.connect(self._on_connected)
        self._client.disconnected.connect(self._update_buttons)

        self._load_all(self._base)
        self.review_step.set_name(None)
        self.go_to(0)
        if self._client.is_connected:
            self._on_connected()
        else:
            self.refresh()

    # -- navigation ---------------------------------------------------------------------

    def current_step(self) -> int:
        return self.stack.currentIndex()

    def go_to(self, index: int) -> None:
        index = max(0, min(index, len(self.steps) - 1))
        self.stack.setCurrentIndex(index)
        for i, button in enumerate(self.step_buttons):
            set_role(button, "primary" if i == index else "")
            button.style().unpolish(button)
            button.style().polish(button)
        self.back_button.setEnabled(index > 0)
        self.next_button.setVisible(index < len(self.steps) - 1)
        if self.steps[index] is self.review_step and self._client.is_connected:
            self.review_step.check_now()
        self._update_buttons()

    def navigate(self, spec: dict[str, Any] | None = None, name: str = "", start_over: str | None = None,
                 own_data: bool = False, preset: dict[str, Any] | None = None) -> None:
        """Opened from another page: filled in with ``spec``, started over on a task (with a ``preset`` laid
        over its defaults, still on step 1), or on "My data"."""
        if start_over:
            self.start_over(start_over, preset)
        if own_data:
            self.open_own_data()
        if spec is not None:
            self.load_spec(spec, name)

    def start_over(self, task: str = "text_classification", preset: dict[str, Any] | None = None) -> None:
        """Every step back to ``task``'s defaults (built-in model and data, LoRA), on step 1.

        What a fresh wizard shows, learning rate rule included (load_spec would keep a
        loaded spec's rate fixed); Welcome's built-in start uses it.
        """
        self._base = deep_merge(defaults_for(task), preset or {})
        self._auto_lr = None if (preset or {}).get("optim", {}).get("lr") else self._base["optim"]["lr"]
        self._load_all(self._base)
        self.review_step.set_name(None)
        self.refresh()
        self.go_to(0)

    def open_own_data(self) -> None:
        """The Data step with "My data" chosen and its file field focused, the rest kept."""
        self.go_to(self.steps.index(self.data_step))
        self.data_step.custom_radio.setChecked(True)
        self.data_step.path_edit.setFocus()

    # -- the spec -----------------------------------------------------------------------

    def current_spec(self) -> dict[str, Any]:
        spec = copy.deepcopy(self._base)
        for step in self.steps:
            step.write(spec)
        return spec

    def spec_for_launch(self) -> dict[str, Any]:
        """What Launch sends (and the YAML shows): the task plus every non-default field."""
        return launch_spec(self.current_spec())

    def load_spec(self, spec: dict[str, Any], name: str = "") -> None:
        """Fill every step from ``spec`` (Duplicate run, a template) and open Review."""
        task = spec.get("task") or "text_classification"
        self._base = deep_merge(defaults_for(task), spec)
        self._auto_lr = None
        self._load_all(self._base)
        self.review_step.set_name(name or None)
        self.refresh()
        self.go_to(len(self.steps) - 1)

    def apply_patch(self, patch: dict[str, Any]) -> None:
        """Merge a suggestion's partial spec into the form, keeping everything else."""
        spec = deep_merge(self.current_spec(), patch)
        self._base = spec
        self._load_all(spec)
        self.refresh()

    def _load_all(self, spec: dict[str, Any]) -> None:
        self._task = spec.get("task", self._task)
        for step in self.steps:
            step.load(spec)
        for step in (self.model_step, self.data_step, self.method_step):
            step.set_task(self._task)

    def _on_changed(self) -> None:
        task = self.task_step.task()
        if task != self._task:
            # Another task: its own built-in model and data, and the method it supports.
            self._task = task
            fresh = defaults_for(task)
            self._base.update(task=task, model=fresh["model"], data=fresh["data"])
            self.model_step.load(fresh)
            self.data_step.load(fresh)
            self.method_step.set_task(task)
        self.data_step.set_objective(self.task_step.objective())  # its built-in data follows the objective
        spec = self.current_spec()
        wanted = suggested_lr(spec["task"], spec["method"]["kind"])
        if self._auto_lr is not None and spec["optim"]["lr"] == self._auto_lr and wanted != self._auto_lr:
            self._auto_lr = wanted
            self.apply_patch({"optim": {"lr": wanted}})
            return
        self.refresh()

    def refresh(self) -> None:
        spec = self.current_spec()
        _normal, self.errors = validate(spec)
        unclaimed = dict(self.errors)
        for step in self.steps[:-1]:
            mine = {path: msgs for path, msgs in self.errors.items() if step.owns(path)}
            step.show_errors(mine)
            for path in mine:
                unclaimed.pop(path, None)
        self.review_step.show_errors(unclaimed)
        self.review_step.addresses = self.training_step.nodes_editor.addresses()
        self.review_step.update_document(spec)
        if self._client.is_connected:
            for step in (self.model_step, self.data_step, self.training_step):
                step.spec_changed(spec)
            if self.current_step() == len(self.steps) - 1:
                self.review_step.check_now()
        self._update_buttons()

    # -- launch -------------------------------------------------------------------------

    def blockers(self) -> list[str]:
        problems = [problem_line(path, m) for path, msgs in self.errors.items() for m in msgs]
        for step in (self.model_step, self.data_step, self.review_step):
            problems += [on_screen(p) for p in step.blocking()]
        sweep = self.review_step.sweep_problem()  # names the paths as the user typed them: not relabelled
        return problems + ([sweep] if sweep else [])

    def busy(self) -> bool:
        return self.model_step.busy() or self.data_step.busy() or self.review_step.checking()

    def _update_buttons(self) -> None:
        connected = self._client.is_connected
        problems = self.blockers()
        busy = self.busy()
        self.launch_button.setEnabled(connected and not problems and not busy and not self._launching)
        self.review_step.set_blockers(problems, self.training_step.fit.estimate)
        for i, step in enumerate(self.steps):
            # A mark on the steps that need attention, so problems are easy to find.
            flagged = bool(step.blocking()) or any(step.owns(p) for p in self.errors)
            self.step_buttons[i].setText(f"{i + 1}  {step.title}" + ("  ⚠" if flagged else ""))
        if self._launching:
            return
        if not connected:
            text, role = "Waiting for the engine: Launch is possible once it is connected.", "muted"
        elif problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            text, role = f"Fix before launch: {problems[0]}{more}", "error"
        elif busy:
            text, role = "Checking the model and data…", "muted"
        elif self.model_step.preparing:
            # A launched run takes the model's folder once written (the preparation holds its lock until then).
            text, role = ("Ready to launch: the built-in model is being prepared once; a run launched now "
                          "starts training when it is ready."), "muted"
        else:
            text, role = "Ready to launch.", "muted"
        self._set_status(text, role)

    def _set_status(self, text: str, role: str = "muted") -> None:
        show_status(self.status_label, text, role)

    def launch(self) -> None:
        if not self.launch_button.isEnabled():
            return
        spec = self.current_spec()
        launched = launch_spec(spec)  # validated once here: what the check and jobs.start receive
        self._launching = True
        self._update_buttons()
        if self.review_step.passed(launched):  # Review checked this very spec: the engine checks it again at start
            self._checked({"issues": []}, spec, launched)
            return
        self._set_status("Checking the inputs before launch…")
        self._client.request("jobs.check", {"kind": KIND, "spec": launched},
                             lambda reply: self._checked(reply, spec, launched), self._launch_failed)

    def _checked(self, reply: dict[str, Any], spec: dict[str, Any], launched: dict[str, Any]) -> None:
        # model.code awaiting confirmation is not a problem to fix: jobs.start asks the user (code_confirm.py).
        issues = [i for i in reply.get("issues") or [] if not i.get("confirmation")]
        if issues:
            self._launching = False
            self.review_step.show_check(issues, spec)
            self.go_to(len(self.steps) - 1)
            where = {route_issue(i, spec) for i in issues}
            self._set_status(f"Not launched: {len(issues)} problem(s) with the "
                             f"{' and '.join(sorted(where))}; see Review.", "error")
            return
        self._set_status("Starting the run…")
        from app.pages.new_finetune.code_confirm import start_job

        try:
            params = self.review_step.launch_params(launched)
        except ValueError as exc:
            self._launch_failed(exc)
            return
        start_job(self, self._client, params, self._started, self._launch_failed)

    def _started(self, job: dict[str, Any]) -> None:
        self._launching = False
        self.last_job_id = job.get("id")
        self._update_buttons()
        self._set_status(f"Started run {job.get('id')} ({job.get('state', 'queued')}).")
        self.launched.emit(str(job.get("id")))
        if job.get("id") and job.get("kind") == SWEEP:
            self.nav.show("compare", sweep=job["id"])  # a sweep's view is its trials, setting against metric
        elif job.get("id"):
            self.nav.show("monitor", job_id=job["id"])

    def _launch_failed(self, err: Any) -> None:
        self._launching = False
        self._update_buttons()
        self._set_status(f"Not launched: {error_text(err)}", "error")

    # -- engine ---------------------------------------------------------------------------

    def _on_connected(self, _hello: Any = None) -> None:
        self._client.request("machine.info", {}, self._on_machine, self._on_machine_error)
        self.task_step.reload_templates()
        self.model_step.reinspect()
        self.data_step.reinspect()
        self.training_step.reestimate()
        self.refresh()

    def _on_machine(self, info: dict[str, Any]) -> None:
        self.machine = info
        self.training_step.set_machine(info)
        self.method_step.set_machine(info)
        self.refresh()

    def _on_machine_error(self, err: Any) -> None:
        self.training_step.set_machine(None)
        self.method_step.set_machine(None, f"could not ask the engine about GPUs: {error_text(err)}")
