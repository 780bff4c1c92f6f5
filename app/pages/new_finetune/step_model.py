"""Step 2: the built-in model for the task, or the user's own, checked as soon as it is chosen."""

from __future__ import annotations

import copy
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from app.models.spec_tools import (
    KIND,
    issue_field,
    issue_line,
    launch_spec,
    route_issue,
)
from app.pages.new_finetune.parts import (
    PREPARE_POLL_MS,
    Busy,
    DebouncedRequest,
    IssueList,
    asked_again,
    preparing_text,
)
from app.shell.help import doc_label
from app.widgets.common import FactsView, card, label
from app.widgets.hub_picker import HubPicker
from app.widgets.wizard_parts import (
    Step,
    error_text,
    indented,
    show_builtins,
    show_text,
    step_header,
    with_message,
)
from engine.api.train_spec import BUILTIN_MODEL_CHOICES, BUILTIN_MODELS

BUILTIN_TEXT = {
    "text_classification": "all-MiniLM-L6-v2: a small English sentence encoder (22 M parameters).",
    "image_classification": "A small CNN for 32×32 images, trained from scratch (random start).",
    "causal_lm": "A tiny Llama-style model (random start): quick to train, for trying the workflow.",
}
# Tasks with several built-ins: each one's note, by name (the first is the wizard's default).
BUILTIN_NOTES = {
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct: a real pretrained chat model (135 M parameters) that ships "
                             "with Ember Studio. It answers questions out of the box; a LoRA fine-tune on the "
                             "CPU takes a few minutes.",
    "tiny-llama": BUILTIN_TEXT["causal_lm"],
}
IMAGE_ARCHS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "small_cnn")
INSPECT_MS = 400
NOT_DOWNLOADED = "is not downloaded yet"  # models.inspect's issue for a Hub model the fine-tune will download


def _millions(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "—"
    return f"{n / 1e6:.1f} M" if n >= 1e5 else f"{int(n):,}"


class ModelStep(Step):
    title = "Model"
    prefixes = ("model",)
    facts_changed = Signal(dict)  # models.inspect facts ({} when unknown)
    code_mode_changed = Signal(bool)  # "Model from my Python file" chosen or left

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._task = "text_classification"
        self._spec: dict[str, Any] = {}
        self._inspected_key: Any = None
        self.preparing: dict[str, Any] | None = None  # models.inspect's answer while a built-in model is prepared
        self._retries = 0  # checks asked again by themselves after running out of time
        self._issues: list[dict[str, Any]] = []
        self.facts: dict[str, Any] = {}

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Which model?", "Start from the built-in model, point at your own, "
                                    "or name one on the Hugging Face Hub. Ember checks it right away."))
        frame, box = card()
        self.group = QButtonGroup(self)
        self.builtin_radio = QRadioButton("Built-in")
        self.custom_radio = QRadioButton("My model")
        self.group.addButton(self.builtin_radio)
        self.group.addButton(self.custom_radio)
        self.builtin_radio.setChecked(True)
        box.addWidget(self.builtin_radio)
        # Where a task has more than one built-in (causal LM: SmolLM2, the tiny test model), pick one.
        self.builtin_combo = QComboBox()
        self.builtin_combo.setAccessibleName("Built-in model")
        self.builtin_combo.setToolTip("Job file: model.builtin.")
        box.addWidget(indented(self.builtin_combo))
        self.builtin_note = label("", "muted", wrap=True)
        self.builtin_note.setContentsMargins(24, 0, 0, 0)
        box.addWidget(self.builtin_note)
        box.addWidget(self.custom_radio)
        # A model on the Hugging Face Hub: used from the cache, downloaded when missing (docs/hub.md).
        self.hub_radio = QRadioButton("From the Hugging Face Hub")
        self.hub_radio.setToolTip("A model id such as Qwen/Qwen2.5-0.5B-Instruct: used from the Hugging Face "
                                  "cache, downloaded first when missing. Job file: model.hub.")
        self.group.addButton(self.hub_radio)
        self.hub_picker = HubPicker(client)
        self.hub_picker.setContentsMargins(24, 0, 0, 0)
        self.hub_picker.setEnabled(False)
        self.hub_message = self.message_for("model.hub")
        # A model from the user's own Python file: the GUI only passes the path on; the engine asks for
        # confirmation at launch (code_confirm.py) and only the training process imports it.
        self.code_radio = QRadioButton("Model from my Python file…")
        self.group.addButton(self.code_radio)
        box.addWidget(self.code_radio)
        self.code_box = QWidget()
        code_form = QFormLayout(self.code_box)
        code_form.setContentsMargins(24, 0, 0, 0)
        code_row = QWidget()
        crow = QHBoxLayout(code_row)
        crow.setContentsMargins(0, 0, 0, 0)
        self.code_edit = QLineEdit()
        self.code_edit.setPlaceholderText("/path/to/my_model.py")
        self.code_browse = QPushButton("Browse…")
        self.code_browse.clicked.connect(self._browse_code)
        crow.addWidget(self.code_edit, 1)
        crow.addWidget(self.code_browse)
        code_form.addRow(label("Python file"), with_message(code_row, self.message_for("model.code")))
        self.entry_edit = QLineEdit("build_model")
        code_form.addRow(label("Function or class"), with_message(self.entry_edit, self.message_for("model.code_entry")))
        code_form.addRow("", doc_label("It is called with num_labels (and spec) and returns a torch.nn.Module; "
                                       "trains with method Full. You confirm the file's contents at launch; "
                                       "see docs/custom-models.md.", "muted"))
        self.builtin_radio.setToolTip("The model that ships with Ember Studio for this task: no download. "
                                      "Job file: model.builtin.")
        self.custom_radio.setToolTip("A model folder of your own (Hugging Face save_pretrained format). "
                                     "Job file: model.path.")
        self.code_radio.setToolTip("A torch.nn.Module built by a function or class in your own Python file. "
                                   "Job file: model.code.")
        self.code_edit.setToolTip("The .py file that defines the model. Job file: model.code.")
        self.entry_edit.setToolTip("The function or class in that file that builds the model. "
                                   "Job file: model.code_entry.")
        self.code_box.setEnabled(False)
        box.addWidget(self.code_box)
        box.addWidget(self.hub_radio)
        box.addWidget(with_message(self.hub_picker, self.hub_message))

        self.custom_box = QWidget()
        form = QFormLayout(self.custom_box)
        form.setContentsMargins(24, 0, 0, 0)
        self._form = form
        path_row = QWidget()
        row = QHBoxLayout(path_row)
        row.setContentsMargins(0, 0, 0, 0)
        self.path_edit = QLineEdit()
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self._browse)
        row.addWidget(self.path_edit, 1)
        row.addWidget(self.browse_button)
        self.path_edit.setToolTip("A folder with config.json, the weights and the tokenizer files. "
                                  "Job file: model.path.")
        self.path_label = label("Model folder")
        form.addRow(self.path_label, with_message(path_row, self.message_for("model.path")))
        self.arch_combo = QComboBox()
        self.arch_combo.addItems(IMAGE_ARCHS)
        self.arch_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.arch_combo.setToolTip("The network to train on your images, built from scratch or from "
                                   "torchvision. Job file: model.arch.")
        self.arch_label = label("Architecture")
        form.addRow(self.arch_label, with_message(self.arch_combo, self.message_for("model.arch")))
        self.path_help = label("", "muted", wrap=True)
        form.addRow("", self.path_help)
        box.insertWidget(box.indexOf(self.custom_radio) + 1, self.custom_box)  # under its own radio button
        box.addWidget(self.general_message)
        outer.addWidget(frame)

        frame, box = card()
        box.addWidget(label("What Ember found", "h2"))
        self.status = Busy("Checking the model")
        box.addWidget(self.status)
        self.issues = IssueList()
        box.addWidget(self.issues)
        self.facts_view = FactsView()
        box.addWidget(self.facts_view)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)
        outer.addWidget(frame)
        outer.addStretch(1)

        self.inspector = DebouncedRequest(self, client, "models.inspect", INSPECT_MS, self._params,
                                          self._on_inspect, self._on_error, self._fallback)
        self._fallback_check = DebouncedRequest(self, client, "jobs.check", 0, self._check_params,
                                                self._on_check, self._on_error)
        self.group.buttonToggled.connect(lambda _b, on: on and self._on_mode())
        self.path_edit.textChanged.connect(self.emit_changed)
        self.code_edit.textChanged.connect(self.emit_changed)
        self.entry_edit.textChanged.connect(self.emit_changed)
        self.arch_combo.currentTextChanged.connect(self.emit_changed)
        self.builtin_combo.currentTextChanged.connect(lambda _t: (self._builtin_note(), self.emit_changed()))
        self.hub_picker.changed.connect(self.emit_changed)
        self.hub_picker.downloaded.connect(lambda _result: (self.reinspect(), self.emit_changed()))
        self._on_mode()

    # -- form ---------------------------------------------------------------------------

    def set_task(self, task: str) -> None:
        self._task = task
        show_builtins(self.builtin_radio, self.builtin_combo, BUILTIN_MODEL_CHOICES[task])
        self._builtin_note()
        images = task == "image_classification"
        self.hub_radio.setVisible(not images)  # the Hub's models here are text models
        self.hub_picker.setVisible(not images)
        if images and self.hub_radio.isChecked():
            self.builtin_radio.setChecked(True)
        self._form.setRowVisible(self.arch_label, images)
        self.path_label.setText("Weights file (optional)" if images else "Model folder")
        self.path_help.setText(
            "A .pt or .safetensors state dict for the architecture; leave empty to start from "
            "random weights." if images else
            "A Hugging Face model folder saved with save_pretrained(): config.json, weights and "
            "tokenizer files.")

    def _builtin_note(self) -> None:
        name = self.builtin_combo.currentText()
        several = len(BUILTIN_MODEL_CHOICES[self._task]) > 1
        self.builtin_note.setText(BUILTIN_NOTES.get(name, "") if several else BUILTIN_TEXT[self._task])

    def builtin_name(self, task: str) -> str:
        """The built-in the user picked: the combo's choice, else the task's default (its first)."""
        choices = BUILTIN_MODEL_CHOICES[task]
        name = self.builtin_combo.currentText()
        return name if name in choices else choices[0]

    def _on_mode(self) -> None:
        self.custom_box.setEnabled(self.custom_radio.isChecked())
        self.code_box.setEnabled(self.code_radio.isChecked())
        self.hub_picker.setEnabled(self.hub_radio.isChecked())
        self.builtin_combo.setEnabled(self.builtin_radio.isChecked())
        self.code_mode_changed.emit(self.code_radio.isChecked())
        self.emit_changed()

    def _browse_code(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose your model's Python file", self.code_edit.text(),
                                              "Python (*.py)", options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self.code_edit.setText(path)

    def _browse(self) -> None:
        options = QFileDialog.Option.DontUseNativeDialog
        start = self.path_edit.text()
        if self._task == "image_classification":
            path, _ = QFileDialog.getOpenFileName(self, "Choose a weights file", start,
                                                  "Weights (*.pt *.pth *.bin *.safetensors);;All files (*)",
                                                  options=options)
        else:
            path = QFileDialog.getExistingDirectory(self, "Choose a model folder", start,
                                                    options | QFileDialog.Option.ShowDirsOnly)
        if path:
            self.path_edit.setText(path)

    def _load(self, spec: dict[str, Any]) -> None:
        model = spec.get("model") or {}
        self.set_task(spec.get("task", self._task))
        custom = bool(model.get("path")) or (bool(model.get("arch")) and not model.get("builtin"))
        code = bool(model.get("code"))
        hub = bool(model.get("hub"))
        (self.code_radio if code else self.hub_radio if hub else self.custom_radio if custom
         else self.builtin_radio).setChecked(True)
        self.hub_picker.set_model(model.get("hub"), model.get("revision"))
        self.hub_picker.setEnabled(hub)
        if model.get("builtin") in BUILTIN_MODEL_CHOICES.get(spec.get("task", self._task), ()):
            self.builtin_combo.setCurrentText(model["builtin"])
        self.code_edit.setText(model.get("code") or "")
        self.entry_edit.setText(model.get("code_entry") or "build_model")
        self.code_box.setEnabled(code)
        self.path_edit.setText(model.get("path") or "")
        if model.get("arch") in IMAGE_ARCHS:
            self.arch_combo.setCurrentText(model["arch"])
        self.custom_box.setEnabled(custom)

    def write(self, spec: dict[str, Any]) -> None:
        task = spec["task"]
        if self.code_radio.isChecked():
            # Text models keep the built-in tokenizer (MiniLM's); the file builds the network itself.
            spec["model"] = {"builtin": BUILTIN_MODELS[task] if task == "text_classification" else None,
                             "path": None, "arch": None, "code": self.code_edit.text().strip() or None,
                             "code_entry": self.entry_edit.text().strip() or "build_model"}
        elif self.builtin_radio.isChecked():
            spec["model"] = {"builtin": self.builtin_name(task), "path": None, "arch": None}
        elif self.hub_radio.isChecked() and task != "image_classification":
            spec["model"] = {"builtin": None, "path": None, "arch": None,
                             "hub": self.hub_picker.repo_id() or None, "revision": self.hub_picker.revision()}
        elif task == "image_classification":
            spec["model"] = {"builtin": None, "path": self.path_edit.text().strip() or None,
                             "arch": self.arch_combo.currentText()}
        else:
            spec["model"] = {"builtin": None, "path": self.path_edit.text().strip() or None, "arch": None}

    def missing_hub(self) -> bool:
        return self.hub_radio.isChecked() and not self.hub_picker.valid_id()

    def missing_code(self) -> bool:
        return self.code_radio.isChecked() and not self.code_edit.text().strip()

    def missing_path(self) -> bool:
        # An empty path means the built-in model to the engine: never launch that by surprise.
        return (self.custom_radio.isChecked() and self._task != "image_classification"
                and not self.path_edit.text().strip())

    def show_errors(self, errors: dict[str, list[str]]) -> None:
        errors = {k: list(v) for k, v in errors.items()}
        if self.missing_path():
            errors.setdefault("model.path", []).append("Choose the model folder (or pick Built-in).")
        if self.missing_code():
            errors.setdefault("model.code", []).append("Choose your model's Python file (or pick Built-in).")
        if self.missing_hub():
            errors.setdefault("model.hub", []).append("Type the model's id, owner/name (or pick one found).")
        default = ("model.path" if self.custom_radio.isChecked() else
                   "model.hub" if self.hub_radio.isChecked() else "model")
        for issue in self._issues:
            field = "model.hub" if self.hub_radio.isChecked() else issue_field(issue, ("model.arch", "model.path"),
                                                                                 default)
            errors.setdefault(field, []).append(issue_line(issue))
        super().show_errors(errors)

    def blocking(self) -> list[str]:
        problems = [f"Model: {i.get('message')}" for i in self._issues]
        if self.missing_path():
            problems.append("Model: choose the model folder")
        if self.missing_code():
            problems.append("Model: choose your model's Python file")
        if self.missing_hub():
            problems.append("Model: type the Hugging Face model's id")
        return problems

    def busy(self) -> bool:
        return self.inspector.pending or self._fallback_check.pending

    # -- inspection ---------------------------------------------------------------------

    def spec_changed(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        key = (spec.get("task"), repr(spec.get("model")))
        if key == self._inspected_key:
            return
        self._inspected_key = key
        self._retries = 0
        self.preparing = None
        self.facts_view.set_facts([])
        self.issues.set_issues([])
        self._issues = []
        show_text(self.note, "")
        if self.missing_path() or self.missing_code() or self.missing_hub():
            self.inspector.cancel()
            self.status.stop()
            return
        if self.code_radio.isChecked():  # nothing looks inside the file before the user confirms it
            self.inspector.cancel()
            self.status.stop()
            self.facts_changed.emit({})
            show_text(self.note, "Ember does not read or run your file before launch: at launch it shows the "
                                 "file and its SHA-256, and runs it in the training process only after you "
                                 "confirm.")
            self.changed.emit()
            return
        self.status.start("Checking the model")
        self.inspector.trigger()

    def reinspect(self) -> None:
        """Look again at the next spec_changed (after a reconnect), even if nothing changed."""
        self._inspected_key = None

    def _params(self) -> dict[str, Any]:
        return {"spec": launch_spec(self._spec)}

    def _on_inspect(self, reply: dict[str, Any]) -> None:
        self.preparing = reply.get("preparing")
        if self.preparing:  # a built-in model written once first: say so, and look again until it is ready
            self.status.start(preparing_text(self.preparing))
            self._issues = []
            self.issues.set_issues([])
            show_text(self.note, self.preparing.get("message", ""))
            self.facts_changed.emit({})
            self.inspector.again_in(PREPARE_POLL_MS)
            self.changed.emit()
            return
        self.status.stop()
        self._issues = list(reply.get("issues") or [])
        if self.hub_radio.isChecked() and any(NOT_DOWNLOADED in str(i.get("message")) for i in self._issues):
            # Not a problem: the fine-tune downloads it first. The facts come once it is cached.
            self._issues = [i for i in self._issues if NOT_DOWNLOADED not in str(i.get("message"))]
            show_text(self.note, "Not downloaded yet: the fine-tune downloads it as it starts (with progress), "
                                 "or press Download now. Its size and layers show once it is here.")
        self.issues.set_issues(self._issues)
        if not self._issues:
            show_text(self.note, self.note.text() or "No problems found with the model.")
        facts = reply.get("facts") or {}
        self.facts = facts
        if facts:
            self.facts_view.set_facts([
                ("Model", str(facts.get("name") or "—")),
                ("Architecture", str(facts.get("arch") or "—")),
                ("Parameters", _millions(facts.get("params_total"))),
                ("Layers", str(facts.get("num_layers") or "—")),
                ("Hidden size", str(facts.get("hidden_size") or "—")),
                ("Attention heads", str(facts.get("num_heads") or "—")),
            ])
        self.facts_changed.emit(copy.deepcopy(facts))
        self.changed.emit()  # Launch may now be allowed (or not)

    def _on_error(self, err: Any) -> None:
        if asked_again(err, self._retries, self.status, self.inspector):  # out of time on a busy machine
            self._retries += 1
            return
        self.status.stop()
        self._issues = [{"message": f"Could not check the model: {error_text(err)}", "hint": ""}]
        self.issues.set_issues(self._issues)
        self.changed.emit()

    def _fallback(self, _err: Any) -> None:
        # An engine without models.inspect: the launch check finds the same problems, no facts.
        show_text(self.note, "This engine does not report model facts (models.inspect); "
                          "only problems are shown.")
        self._fallback_check.trigger()

    def _check_params(self) -> dict[str, Any]:
        return {"kind": KIND, "spec": launch_spec(self._spec)}

    def _on_check(self, reply: dict[str, Any]) -> None:
        issues = [i for i in reply.get("issues") or [] if route_issue(i, self._spec) == "model"]
        self._on_inspect({"ok": not issues, "issues": issues, "facts": None})
