"""Step 6: the exact job file and command, a last check of the inputs, and templates."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.models.spec_tools import (
    KIND,
    default_run_name,
    file_stem,
    headless_commands,
    job_yaml,
    launch_spec,
)
from app.pages.new_finetune.parts import (
    PREPARE_POLL_MS,
    Busy,
    DebouncedRequest,
    IssueList,
    asked_again,
    preparing_text,
)
from app.pages.new_finetune.sweep_box import SweepBox
from app.state.style import set_role
from app.text.glossary import field_tooltip
from app.widgets.common import card, label
from app.widgets.wizard_parts import Step, error_text, show_text, step_header, with_message
from engine.api.job_terms import SWEEP

CHECK_MS = 300


def _code_view(lines: int) -> QPlainTextEdit:
    view = QPlainTextEdit()
    view.setObjectName("log")  # the stylesheet's monospace look
    view.setReadOnly(True)
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    view.setFixedHeight(lines * view.fontMetrics().lineSpacing() + 16)
    return view


class ReviewStep(Step):
    title = "Review"
    template_saved = Signal(str)

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self.addresses: dict[str, str] = {}  # host name -> address, for the by-hand torchrun lines
        self._client = client
        self._spec: dict[str, Any] = {}
        self._stamp = time.strftime("%m%d-%H%M")
        self._name_touched = False
        self._checked_key = ""
        self._retries = 0  # checks asked again by themselves after running out of time
        self._check_key = ""
        self.check_issues: list[dict[str, Any]] = []

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Review and launch",
                                    "This is exactly what Launch sends to the engine. The same "
                                    "file runs from a terminal with the command below."))
        frame, box = card()
        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setToolTip(field_tooltip("run name", "name"))
        self.name_edit.textEdited.connect(self._on_name_edited)
        form.addRow("Run name", with_message(self.name_edit, self.message_for("name")))
        box.addLayout(form)
        self.check_status = Busy("Checking the spec, the data and the model")
        box.addWidget(self.check_status)
        self.check_ok = label("", "muted", wrap=True)
        self.check_ok.hide()
        box.addWidget(self.check_ok)
        self.check_list = IssueList()
        box.addWidget(self.check_list)
        self.blockers = label("", "error", wrap=True)
        box.addWidget(self.blockers)
        box.addWidget(self.general_message)
        self.fit_note = label("", "muted", wrap=True)
        self.fit_note.hide()
        box.addWidget(self.fit_note)
        outer.addWidget(frame)

        frame, box = card()
        self.sweep_box = SweepBox()
        self.sweep_box.changed.connect(self._on_sweep_changed)
        box.addWidget(self.sweep_box)
        outer.addWidget(frame)

        frame, box = card()
        head = QHBoxLayout()
        head.addWidget(label("Job file (YAML)", "h2"), 1)
        self.copy_yaml_button = QPushButton("Copy")
        self.copy_yaml_button.clicked.connect(lambda: self._copy(self.yaml_view.toPlainText()))
        self.save_yaml_button = QPushButton("Save YAML…")
        self.save_yaml_button.clicked.connect(self._save_yaml_dialog)
        self.save_template_button = QPushButton("Save as template…")
        self.save_template_button.clicked.connect(self._save_template_dialog)
        for button in (self.copy_yaml_button, self.save_yaml_button, self.save_template_button):
            head.addWidget(button)
        box.addLayout(head)
        self.yaml_view = _code_view(14)
        box.addWidget(self.yaml_view)
        self.saved_note = label("", "muted", wrap=True)
        self.saved_note.hide()
        box.addWidget(self.saved_note)
        head = QHBoxLayout()
        head.addWidget(label("Run it without the window", "h2"), 1)
        self.copy_command_button = QPushButton("Copy")
        self.copy_command_button.clicked.connect(lambda: self._copy(self.command_view.toPlainText()))
        head.addWidget(self.copy_command_button)
        box.addLayout(head)
        self.command_view = _code_view(3)
        box.addWidget(self.command_view)
        outer.addWidget(frame)
        outer.addStretch(1)

        self.checker = DebouncedRequest(self, client, "jobs.check", CHECK_MS,
                                        lambda: {"kind": KIND, "spec": launch_spec(self._spec)},
                                        self._on_check, self._on_check_error)

    # -- document -----------------------------------------------------------------------

    def run_name(self) -> str:
        return self.name_edit.text().strip() or self._suggested_name()

    def _suggested_name(self) -> str:
        method = (self._spec.get("method") or {}).get("kind", "lora")
        objective = self._spec.get("objective") or "sft"
        if objective != "sft":  # "lm-dpo-lora-…": the objective is what sets such a run apart
            method = f"{objective}-{method}"
        return default_run_name(self._spec.get("task", "text_classification"), method, self._stamp)

    def set_name(self, name: str | None) -> None:
        self._name_touched = bool(name)
        self._stamp = time.strftime("%m%d-%H%M")
        self.name_edit.setText(name or self._suggested_name())

    def _on_name_edited(self, _text: str) -> None:
        self._name_touched = True
        self.emit_changed()

    def update_document(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        if not self._name_touched:
            self.name_edit.setText(self._suggested_name())
        name = self.run_name()
        text = self.job_text(name, spec)
        self.yaml_view.setPlainText(text)
        lines = min(max(text.count("\n") + 1, 6), 26)
        self.yaml_view.setFixedHeight(lines * self.yaml_view.fontMetrics().lineSpacing() + 16)
        command = headless_commands(name, spec, self.addresses)
        self.command_view.setPlainText(command)
        # A multi-node run shows a torchrun line per node: let the box grow with them.
        self.command_view.setFixedHeight(min(max(command.count("\n") + 1, 3), 12)
                                         * self.command_view.fontMetrics().lineSpacing() + 16)
        key = repr(launch_spec(spec))
        if key != self._checked_key:  # an old check says nothing about this spec
            self._checked_key = ""
            self.check_issues = []
            self.check_list.set_issues([])
            show_text(self.check_ok, "")

    def job_text(self, name: str, spec: dict[str, Any]) -> str:
        """The job file Launch sends: the fine-tune, or the sweep around it."""
        if not self.sweep_box.enabled():
            return job_yaml(name, spec)
        try:
            doc = self.sweep_box.document(launch_spec(spec))
        except ValueError as exc:
            return f"# Not a valid sweep yet: {exc}\n"
        return yaml.safe_dump({"kind": SWEEP, "name": name, "spec": doc}, sort_keys=False)

    def launch_params(self, launched: dict[str, Any]) -> dict[str, Any]:
        """jobs.start's params for Launch; ``launched``: the spec as launch_spec made it (validated once)."""
        if self.sweep_box.enabled():
            return {"kind": SWEEP, "spec": self.sweep_box.document(launched), "name": self.run_name()}
        return {"kind": KIND, "spec": launched, "name": self.run_name()}

    def _on_sweep_changed(self) -> None:
        if self._spec:
            show_text(self.sweep_box.note, self.sweep_box.describe(launch_spec(self._spec))
                      if self.sweep_box.enabled() else "")
            self.update_document(self._spec)
        self.emit_changed()

    def _passed_text(self) -> str:
        # "fine" beside a list of problems would contradict it: then the check vouches only for itself
        return ("The engine's check found no other problem." if self.blockers.text() else
                "Checked: the spec, the data and the model are fine.")

    def set_blockers(self, problems: list[str], fit: dict[str, Any]) -> None:
        self.blockers.setText("Fix before launch:\n" + "\n".join(f"• {p}" for p in problems[:12])
                              if problems else "")
        self.blockers.setVisible(bool(problems))
        if self._spec and self.passed(launch_spec(self._spec)) and self.check_ok.text():
            show_text(self.check_ok, self._passed_text())
        verdict = fit.get("verdict")
        set_role(self.fit_note, "error" if verdict == "will_not_fit" else "muted")
        self.fit_note.style().polish(self.fit_note)
        show_text(self.fit_note,
            f"Memory estimate: {str(verdict).replace('_', ' ')}. {fit.get('reason', '')}".strip()
            if verdict else "")

    def _copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        show_text(self.saved_note, "Copied to the clipboard.")

    # -- check --------------------------------------------------------------------------

    def check_now(self) -> None:
        """Ask the engine to look at the inputs of the spec shown (Review is open)."""
        key = repr(launch_spec(self._spec))
        if key == self._checked_key or (self.checker.pending and key == self._check_key):
            return
        if key != self._check_key:
            self._retries = 0
        self._check_key = key
        self.check_status.start()
        show_text(self.check_ok, "")
        self.checker.trigger()

    def show_check(self, issues: list[dict[str, Any]], spec: dict[str, Any]) -> None:
        self.check_status.stop()
        self._checked_key = repr(launch_spec(spec))
        self.check_issues = list(issues)
        self.check_list.set_issues(self.check_issues)
        show_text(self.check_ok, "" if issues else self._passed_text())
        self.changed.emit()

    def _on_check(self, reply: dict[str, Any]) -> None:
        preparing = reply.get("preparing")
        if preparing:  # the model is written once first; Launch may go ahead (the job waits for it)
            self.check_status.start(preparing_text(preparing))
            show_text(self.check_ok, preparing.get("message", ""))
            self.checker.again_in(PREPARE_POLL_MS)
            self.changed.emit()
            return
        self._retries = 0
        self.show_check(reply.get("issues") or [], self._spec)

    def _on_check_error(self, err: Any) -> None:
        if asked_again(err, self._retries, self.check_status, self.checker):  # out of time on a busy machine
            self._retries += 1
            return
        self.check_status.stop()
        show_text(self.check_ok, f"Could not check the inputs: {error_text(err)}")

    def passed(self, launched: dict[str, Any]) -> bool:
        """Whether this very spec (as launch_spec made it) was checked and found fine (Launch need not ask
        again)."""
        return self._checked_key == repr(launched) and not self.check_issues

    def checking(self) -> bool:
        return self.checker.pending

    def blocking(self) -> list[str]:
        return [f"Check: {i.get('message')}" for i in self.check_issues]

    def sweep_problem(self) -> str:
        """What keeps the sweep from launching, in the user's own field paths ("" when none)."""
        return self.sweep_box.problem(launch_spec(self._spec)) if self._spec else ""

    # -- files and templates --------------------------------------------------------------

    def write_yaml(self, path: str) -> None:
        Path(path).write_text(self.yaml_view.toPlainText(), encoding="utf-8")
        show_text(self.saved_note, f"Saved {path}. Run it with: ember run {path}")

    def _save_yaml_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the job file", f"{file_stem(self.run_name())}.yaml",
                                              "YAML (*.yaml *.yml)",
                                              options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            try:
                self.write_yaml(path)
            except OSError as exc:
                show_text(self.saved_note, f"Could not save {path}: {exc}")

    def save_template(self, name: str) -> None:
        params = {"name": name, "kind": KIND, "spec": launch_spec(self._spec)}
        show_text(self.saved_note, f"Saving template {name}…")
        self._client.request("templates.save", params,
                             lambda reply: self._template_saved(reply.get("name", name)),
                             lambda err: show_text(self.saved_note, f"Could not save the template: {error_text(err)}"))

    def _template_saved(self, name: str) -> None:
        show_text(self.saved_note, f"Saved as template {name}; it is listed on the Task step.")
        self.template_saved.emit(name)

    def _save_template_dialog(self) -> None:
        name, ok = QInputDialog.getText(self, "Save as template", "Template name:",
                                        QLineEdit.EchoMode.Normal, file_stem(self.run_name()))
        if ok and name.strip():
            self.save_template(name.strip())
