"""Step 3: the training data, previewed and checked as soon as it is chosen."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
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
from app.pages.new_finetune.chat_template_box import ChatTemplateBox
from app.pages.new_finetune.column_field import ColumnField
from app.pages.new_finetune.data_preview import DataPreview, ThumbGrid
from app.pages.new_finetune.hub_data_box import HubDataBox
from app.pages.new_finetune.parts import Busy, DebouncedRequest, IssueList
from app.pages.new_finetune.pii_box import PiiBox
from app.text.glossary import field_tooltip
from app.widgets.common import card, label
from app.widgets.reflow import Reflow
from app.widgets.wizard_parts import (
    Step,
    error_text,
    indented,
    show_builtins,
    show_text,
    step_header,
    with_message,
)
from engine.api.train_spec import BUILTIN_DATA_CHOICES, BUILTIN_PREFERENCE_DATA

BUILTIN_TEXT = {
    "text_classification": "Customer support tickets (800 of them, 5 classes).",
    "image_classification": "scikit-learn's 1,797 handwritten digit scans, 10 classes.",
    "causal_lm": "Short questions answered in a word (capitals, opposites, plurals, ...) and a persona, 203 "
                 "rows: after a fine-tune the model answers in this style. Job files can also name "
                 "tiny-instructions.",
}
# Causal LM with objective dpo, orpo or kto (the Task step's Objective card).
PREFERENCE_TEXT = ("Questions with a chosen answer (correct, polite) and a rejected one (wrong or rude); "
                   "KTO reads each pair as one good and one bad answer.")
PREFERENCE_HELP = ('A JSONL file: one {"prompt", "chosen", "rejected"} per line (KTO: {"prompt", '
                   '"completion", "label": true or false}, or the same pairs).')
INSPECT_MS = 400
FIELDS = ("data.text_column", "data.label_column", "data.columns", "data.val_split", "data.split", "data.val_path",
          "data.max_length", "data.image_size", "data.min_per_class", "data.hub", "data.path")
# causal_lm with a Hub dataset: the field of a row each column fills (data.columns)
CHAT_FIELDS = ("prompt", "response", "messages")


def _spin(lo: int, hi: int, value: int, step: int = 1) -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setValue(value)
    return box


def _dspin(lo: float, hi: float, value: float, step: float, decimals: int = 2) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(lo, hi)
    box.setDecimals(decimals)
    box.setSingleStep(step)
    box.setValue(value)
    return box


# Tasks with several built-in datasets: each one's note (the first of BUILTIN_DATA_CHOICES is the default).
BUILTIN_DATA_NOTES = {
    "short-answers": BUILTIN_TEXT["causal_lm"],
    "tiny-instructions": "Short instruction / response pairs (245 rows), made for the tiny test model.",
}


def builtin_choices(task: str, objective: str) -> tuple[str, ...]:
    """The built-in datasets for the task, or for its preference objective."""
    return (BUILTIN_PREFERENCE_DATA,) if task == "causal_lm" and objective != "sft" else BUILTIN_DATA_CHOICES[task]


class DataStep(Step):
    title = "Data"
    prefixes = ("data",)

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._task = "text_classification"
        self._objective = "sft"  # causal LM: sft, or a preference objective with its own data
        self._spec: dict[str, Any] = {}
        self._inspected_key: Any = None
        self._issues: list[dict[str, Any]] = []

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Which data?", "Use the built-in dataset, your own file or "
                                    "folder, or a dataset from the Hugging Face Hub. Ember reads it now and "
                                    "lists any problem with the file and line, before anything starts."))
        # The form beside its preview on a wide window, the preview under it on a narrow one.
        columns = Reflow(spacing=14, wide=860)
        left = QVBoxLayout()
        left.setSpacing(14)

        frame, box = card()
        self.group = QButtonGroup(self)
        self.builtin_radio = QRadioButton("Built-in")
        self.custom_radio = QRadioButton("My data")
        self.hub_radio = QRadioButton("From the Hugging Face Hub")
        self.group.addButton(self.builtin_radio)
        self.group.addButton(self.custom_radio)
        self.group.addButton(self.hub_radio)
        self.builtin_radio.setChecked(True)
        box.addWidget(self.builtin_radio)
        self.builtin_combo = QComboBox()  # where a task has several built-in datasets
        self.builtin_combo.setAccessibleName("Built-in dataset")
        self.builtin_combo.setToolTip("Job file: data.builtin.")
        box.addWidget(indented(self.builtin_combo))
        self.builtin_note = label("", "muted", wrap=True)
        self.builtin_note.setContentsMargins(24, 0, 0, 0)
        box.addWidget(self.builtin_note)
        box.addWidget(self.custom_radio)
        self.custom_box = QWidget()
        custom = QFormLayout(self.custom_box)
        custom.setContentsMargins(24, 0, 0, 0)
        self._custom_form = custom
        path_row = QWidget()
        row = QHBoxLayout(path_row)
        row.setContentsMargins(0, 0, 0, 0)
        self.path_edit = QLineEdit()
        self.path_edit.setMinimumWidth(180)  # a path must stay readable beside Browse…
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self._browse)
        row.addWidget(self.path_edit, 1)
        row.addWidget(self.browse_button)
        self.path_label = label("File")
        custom.addRow(self.path_label, with_message(path_row, self.message_for("data.path")))
        self.path_help = label("", "muted", wrap=True)
        custom.addRow("", self.path_help)
        box.addWidget(self.custom_box)
        box.addWidget(self.hub_radio)
        self.hub_box = HubDataBox(client, self.message_for)  # a dataset id, Download, its splits
        box.addWidget(self.hub_box)

        # Drop-downs of the file's (or Hub dataset's) columns once it is read; any name can still be typed.
        self.columns_box = QWidget()
        cols = QFormLayout(self.columns_box)
        cols.setContentsMargins(24, 0, 0, 0)
        self._columns_form = cols
        self.text_column_edit = ColumnField("text")
        self.label_column_edit = ColumnField("label")
        self.text_column_label, self.label_column_label = label("Text column"), label("Label column")
        cols.addRow(self.text_column_label,
                    with_message(self.text_column_edit, self.message_for("data.text_column")))
        cols.addRow(self.label_column_label,
                    with_message(self.label_column_edit, self.message_for("data.label_column")))
        # A causal LM's rows from a Hub dataset whose columns are not named prompt/response or messages.
        self.chat_column_edits = {f: ColumnField(f if f != "messages" else "") for f in CHAT_FIELDS}
        self.chat_column_labels = {f: label(f"{f.capitalize()} column") for f in CHAT_FIELDS}
        for f in CHAT_FIELDS:
            edit = self.chat_column_edits[f]
            edit.setToolTip(f"The dataset's column that holds each row's {f}"
                            + (" (a list of role/content turns; it takes the place of prompt and response)"
                               if f == "messages" else "") + f". Job file: data.columns.{f}.")
            shown = with_message(edit, self.message_for("data.columns")) if f == "prompt" else edit
            cols.addRow(self.chat_column_labels[f], shown)
        self.columns_note = label("", "muted", wrap=True)
        self.columns_note.hide()
        cols.addRow("", self.columns_note)
        box.addWidget(self.columns_box)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self._form = form
        self.max_length_spin = _spin(1, 32768, 128, 16)  # under 8 is shown with the reason
        self.max_length_label = label("Tokens per example")
        form.addRow(self.max_length_label,
                    with_message(self.max_length_spin, self.message_for("data.max_length")))
        self.image_size_spin = _spin(1, 1024, 32, 8)  # under 16 is shown with the reason
        self.image_size_label = label("Image size (px)")
        form.addRow(self.image_size_label,
                    with_message(self.image_size_spin, self.message_for("data.image_size")))
        self.val_fraction_spin = _dspin(0.01, 0.9, 0.2, 0.05)
        form.addRow("Held out for validation",
                    with_message(self.val_fraction_spin, self.message_for("data.val_fraction")))
        box.addLayout(form)
        box.addWidget(self.general_message)
        left.addWidget(frame)

        self.pii_box = PiiBox(client)  # my data: scan for personal data, scrub into a copy
        self.pii_box.use_copy.connect(self.path_edit.setText)

        self.template_box = ChatTemplateBox()  # causal LM: the chat template and a rendered row
        left.addWidget(self.template_box)

        self.augment_card, box = card()
        box.addWidget(label("Augmentation", "h2"))
        box.addWidget(label("Random changes to training images, so the model learns the "
                            "class rather than the exact picture.", "muted", wrap=True))
        self.crop_check = QCheckBox("Random resized crop")
        self.crop_scale_spin = _dspin(0.05, 1.0, 0.7, 0.05)
        self.flip_check = QCheckBox("Horizontal flip")
        self.jitter_spin = _dspin(0.0, 1.0, 0.0, 0.1)
        self.normalize_check = QCheckBox("Normalize")
        self.normalize_check.setChecked(True)
        aug = QFormLayout()
        aug.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        aug.addRow(self.crop_check)
        aug.addRow("Smallest crop (of the image)", self.crop_scale_spin)
        aug.addRow(self.flip_check)
        aug.addRow("Colour jitter strength", self.jitter_spin)
        aug.addRow(self.normalize_check)
        box.addLayout(aug)
        self.preview_aug_button = QPushButton("Preview augmentations")
        self.preview_aug_button.clicked.connect(self.preview_augmentations)
        box.addWidget(self.preview_aug_button)
        self.aug_status = label("", "muted", wrap=True)
        self.aug_status.hide()
        box.addWidget(self.aug_status)
        self.aug_samples = ThumbGrid(columns=4)
        box.addWidget(self.aug_samples)
        left.addWidget(self.augment_card)
        left.addStretch(1)
        columns.add(left, 2)

        frame, box = card()
        box.addWidget(label("Preview", "h2"))
        self.status = Busy("Reading the data")
        box.addWidget(self.status)
        self.issues = IssueList()
        box.addWidget(self.issues)
        self.preview = DataPreview()
        box.addWidget(self.preview)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)
        box.addStretch(1)
        columns.add(frame, 3)
        outer.addWidget(columns)
        outer.addWidget(self.pii_box)  # full width: its table has five columns

        # What each field means, and its key in the job file (app/text/glossary.py).
        self.builtin_radio.setToolTip("The dataset that ships with Ember Studio for this task. Job file: data.builtin.")
        self.custom_radio.setToolTip("Your own file or folder. Job file: data.path.")
        self.hub_radio.setToolTip("A dataset on the Hugging Face Hub, downloaded into the Hugging Face cache "
                                  "(CSV, TSV, JSONL, JSON or Parquet files). Job file: data.hub.")
        self.path_edit.setToolTip("The data file (CSV, TSV, JSONL) or image folder, on the machine that trains. "
                                  "Job file: data.path.")
        self.text_column_edit.setToolTip(field_tooltip("text column", "data.text_column"))
        self.label_column_edit.setToolTip(field_tooltip("label column", "data.label_column"))
        self.max_length_spin.setToolTip(field_tooltip("tokens per example", "data.max_length", "8 to 32,768."))
        self.image_size_spin.setToolTip(field_tooltip("image size", "data.image_size", "16 to 1,024."))
        self.val_fraction_spin.setToolTip(field_tooltip("validation share", "data.val_fraction"))
        self.crop_check.setToolTip(field_tooltip("augmentation", "data.augment.random_resized_crop"))
        self.crop_scale_spin.setToolTip(field_tooltip("augmentation", "data.augment.crop_scale_min",
                                                      "The smallest share of the image a crop keeps."))
        self.flip_check.setToolTip(field_tooltip("augmentation", "data.augment.horizontal_flip"))
        self.jitter_spin.setToolTip(field_tooltip("augmentation", "data.augment.color_jitter"))
        self.normalize_check.setToolTip("Scale pixel values to the mean and spread the model expects. "
                                        "Job file: data.augment.normalize.")

        self.inspector = DebouncedRequest(self, client, "data.inspect", INSPECT_MS, self._params,
                                          self._on_inspect, self._on_error, self._fallback)
        self._fallback_check = DebouncedRequest(self, client, "jobs.check", 0, self._check_params,
                                                self._on_check, self._on_error)
        self.group.buttonToggled.connect(lambda _b, on: on and self._on_mode())
        self.builtin_combo.currentTextChanged.connect(lambda _t: (self.set_task(self._task), self.emit_changed()))
        for edit in (self.path_edit, self.text_column_edit, self.label_column_edit, *self.chat_column_edits.values()):
            edit.textChanged.connect(self.emit_changed)
        self.path_edit.textChanged.connect(self.pii_box.set_path)
        self.hub_box.changed.connect(self.emit_changed)
        self.hub_box.downloaded.connect(self._look_again)
        for spin in (self.max_length_spin, self.image_size_spin, self.val_fraction_spin,
                     self.crop_scale_spin, self.jitter_spin):
            spin.valueChanged.connect(self.emit_changed)
        for check in (self.crop_check, self.flip_check, self.normalize_check):
            check.toggled.connect(self.emit_changed)
        self.template_box.changed.connect(self.emit_changed)
        self._on_mode()

    # -- form ---------------------------------------------------------------------------

    def set_task(self, task: str) -> None:
        self._task = task
        images, text = task == "image_classification", task == "text_classification"
        preferences = task == "causal_lm" and self._objective != "sft"
        choices = builtin_choices(task, self._objective)
        show_builtins(self.builtin_radio, self.builtin_combo, choices)
        several = BUILTIN_DATA_NOTES.get(self.builtin_combo.currentText(), "") if len(choices) > 1 else ""
        self.builtin_note.setText(PREFERENCE_TEXT if preferences else several or BUILTIN_TEXT[task])
        self.path_label.setText("Folder" if images else "File")
        self.hub_radio.setVisible(not images and not preferences)  # image folders and preference rows: files
        if self.hub_radio.isChecked() and self.hub_radio.isHidden():
            self.builtin_radio.setChecked(True)
        self._columns_form.setRowVisible(self.text_column_label, text)
        self._columns_form.setRowVisible(self.label_column_label, text)
        self._show_chat_columns()
        self._form.setRowVisible(self.max_length_label, not images)
        self._form.setRowVisible(self.image_size_label, images)
        self.augment_card.setVisible(images)
        self.template_box.setVisible(task == "causal_lm")
        self.path_help.setText({
            "text_classification": "A CSV, TSV or JSONL file with a text column and a label column.",
            "image_classification": "A folder with one subfolder of PNG or JPEG images per class.",
            "causal_lm": "A JSONL file: one {\"prompt\", \"response\"} or {\"messages\"} per line.",
        }[task] if not preferences else PREFERENCE_HELP)

    def set_objective(self, objective: str) -> None:
        """The objective the Task step chose: the built-in data and the file format follow it."""
        if objective != self._objective:
            self._objective = objective
            self.set_task(self._task)

    def builtin_name(self, task: str, objective: str) -> str:
        choices = builtin_choices(task, objective)
        name = self.builtin_combo.currentText()
        return name if name in choices else choices[0]

    def _on_mode(self) -> None:
        self.custom_box.setEnabled(self.custom_radio.isChecked())
        self.hub_box.setEnabled(self.hub_radio.isChecked())
        self.columns_box.setEnabled(not self.builtin_radio.isChecked())
        self.builtin_combo.setEnabled(self.builtin_radio.isChecked())
        self.pii_box.setVisible(self.custom_radio.isChecked())
        self._show_chat_columns()
        self.emit_changed()

    def _show_chat_columns(self) -> None:
        """The causal LM's column mapping: only for a Hub dataset."""
        shown = self._task == "causal_lm" and self.hub_radio.isChecked()
        for f in CHAT_FIELDS:
            self._columns_form.setRowVisible(self.chat_column_labels[f], shown)

    def _look_again(self) -> None:
        """The Hub dataset is downloaded now: read it (the spec did not change)."""
        self._inspected_key = None
        self.spec_changed(self._spec)

    def _browse(self) -> None:
        options = QFileDialog.Option.DontUseNativeDialog
        start = self.path_edit.text()
        if self._task == "image_classification":
            path = QFileDialog.getExistingDirectory(self, "Choose an image folder", start,
                                                    options | QFileDialog.Option.ShowDirsOnly)
        else:
            path, _ = QFileDialog.getOpenFileName(
                self, "Choose a data file", start,
                "Data files (*.csv *.tsv *.jsonl *.json);;All files (*)", options=options)
        if path:
            self.path_edit.setText(path)

    def _load(self, spec: dict[str, Any]) -> None:
        data = spec.get("data") or {}
        self._objective = spec.get("objective") or "sft"
        self.set_task(spec.get("task", self._task))
        custom, hub = bool(data.get("path")), bool(data.get("hub"))
        (self.hub_radio if hub else self.custom_radio if custom else self.builtin_radio).setChecked(True)
        if data.get("builtin") in builtin_choices(self._task, self._objective):
            self.builtin_combo.setCurrentText(data["builtin"])
        self.custom_box.setEnabled(custom)
        self.hub_box.setEnabled(hub)
        self.hub_box.load(data)
        mapping = data.get("columns") or {}
        for f, edit in self.chat_column_edits.items():
            edit.setText(mapping.get(f) or edit.default)
        self.path_edit.setText(data.get("path") or "")
        self.text_column_edit.setText(data.get("text_column") or "text")
        self.label_column_edit.setText(data.get("label_column") or "label")
        self.max_length_spin.setValue(int(data.get("max_length") or 128))
        self.template_box.set_value(data.get("chat_template"))
        self.image_size_spin.setValue(int(data.get("image_size") or 32))
        self.val_fraction_spin.setValue(float(data.get("val_fraction") or 0.2))
        augment = data.get("augment") or {}
        self.crop_check.setChecked(bool(augment.get("random_resized_crop")))
        self.crop_scale_spin.setValue(float(augment.get("crop_scale_min", 0.7)))
        self.flip_check.setChecked(bool(augment.get("horizontal_flip")))
        self.jitter_spin.setValue(float(augment.get("color_jitter", 0.0)))
        self.normalize_check.setChecked(bool(augment.get("normalize", True)))

    def write(self, spec: dict[str, Any]) -> None:
        data = spec.setdefault("data", {})
        task = spec["task"]
        # Only the chosen source's fields: a job file names one dataset.
        data.update(hub=None, revision=None, split="train", val_split=None, columns={})
        if self.builtin_radio.isChecked():
            data.update(builtin=self.builtin_name(task, spec.get("objective") or "sft"), path=None, val_path=None)
        elif self.hub_radio.isChecked():
            data.update(builtin=None, path=None, val_path=None)
            self.hub_box.write(data)
            if task == "causal_lm":
                data["columns"] = {f: e.text().strip() for f, e in self.chat_column_edits.items()
                                   if e.text().strip() and e.text().strip() != f}
        else:
            data.update(builtin=None, path=self.path_edit.text().strip() or None)
        if task == "text_classification":
            data.update(text_column=self.text_column_edit.text().strip(),
                        label_column=self.label_column_edit.text().strip())
        if task == "causal_lm":
            data["chat_template"] = self.template_box.value()
        else:
            data.pop("chat_template", None)
        if task == "image_classification":
            data["image_size"] = self.image_size_spin.value()
            data["augment"] = {
                "random_resized_crop": self.crop_check.isChecked(),
                "crop_scale_min": round(self.crop_scale_spin.value(), 2),
                "horizontal_flip": self.flip_check.isChecked(),
                "color_jitter": round(self.jitter_spin.value(), 2),
                "normalize": self.normalize_check.isChecked(),
            }
        else:
            data["max_length"] = self.max_length_spin.value()
        data["val_fraction"] = round(self.val_fraction_spin.value(), 2)

    def missing_path(self) -> bool:
        return (self.custom_radio.isChecked() and not self.path_edit.text().strip()) or \
            (self.hub_radio.isChecked() and not self.hub_box.repo_id())

    def show_errors(self, errors: dict[str, list[str]]) -> None:
        errors = {k: list(v) for k, v in errors.items()}
        if self.missing_path() and self.hub_radio.isChecked():
            errors.setdefault("data.hub", []).append("Type the dataset's id, owner/name as on its page (or pick "
                                                     "Built-in).")
        elif self.missing_path():
            what = "folder" if self._task == "image_classification" else "file"
            errors.setdefault("data.path", []).append(f"Choose the data {what} (or pick Built-in).")
        # What the engine found in the files goes under the field to change (the path by default).
        default = ("data.path" if self.custom_radio.isChecked() else "data.hub" if self.hub_radio.isChecked()
                   else "data")
        for issue in self._issues:
            field = issue_field(issue, FIELDS, default)
            if field == "data.min_per_class":
                field = default  # no widget for it; the fix is in the file
            errors.setdefault(field, []).append(issue_line(issue))
        super().show_errors(errors)

    def blocking(self) -> list[str]:
        problems = [f"Data: {i.get('message')}" for i in self._issues]
        if self.missing_path():
            problems.append("Data: type the Hub dataset's id" if self.hub_radio.isChecked()
                            else "Data: choose the data file or folder")
        return problems

    def busy(self) -> bool:
        return self.inspector.pending or self._fallback_check.pending

    # -- inspection ---------------------------------------------------------------------

    def spec_changed(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        data = {k: v for k, v in (spec.get("data") or {}).items() if k != "augment"}
        key = (spec.get("task"), repr(data), repr(spec.get("model")))
        if key == self._inspected_key:
            return
        self._inspected_key = key
        self._issues = []
        self.issues.set_issues([])
        self.preview.clear()
        self.template_box.clear()
        show_text(self.note, "")
        if self.missing_path():
            self.inspector.cancel()
            self.status.stop()
            return
        self.status.start("Reading the data")
        self.inspector.trigger()

    def reinspect(self) -> None:
        """Look again at the next spec_changed (after a reconnect), even if nothing changed."""
        self._inspected_key = None

    def _params(self) -> dict[str, Any]:
        return {"spec": launch_spec(self._spec), "n": 12}

    def _on_inspect(self, reply: dict[str, Any]) -> None:
        self.status.stop()
        if self._offer_columns(reply):
            return  # a guessed column: the form changed, and a new inspection is on its way
        self._issues = list(reply.get("issues") or [])
        self.issues.set_issues(self._issues)
        if not self._issues:
            show_text(self.note, self.note.text() or "No problems found in the data.")
        self.preview.show_reply(reply)
        self.hub_box.show_facts(reply.get("hub") if self.hub_radio.isChecked() else None)
        if self._task == "causal_lm":
            self.template_box.show_reply(reply)
        self.changed.emit()

    def _offer_columns(self, reply: dict[str, Any]) -> bool:
        """Fill the column drop-downs from the file; True when a guess replaced a default name."""
        if self._task == "causal_lm" and self.hub_radio.isChecked():
            return self._offer_chat_columns(reply.get("hub") or {})
        columns = list(reply.get("file_columns") or [])
        if not columns or self._task != "text_classification" or self.builtin_radio.isChecked():
            return False
        guess = reply.get("column_guess") or {}
        changed = self.text_column_edit.set_columns(columns, guess.get("text_column"))
        changed = self.label_column_edit.set_columns(columns, guess.get("label_column")) or changed
        guessed = [f"{what} '{field.guessed}'" for what, field in
                   (("text column", self.text_column_edit), ("label column", self.label_column_edit))
                   if field.guessed and field.text() == field.guessed]
        show_text(self.columns_note,
                  f"Chosen from the {'dataset' if self.hub_radio.isChecked() else 'file'}'s columns: "
                  f"{' and '.join(guessed)} (the longest text; the fewest "
                  "different values). Pick another if that is wrong." if guessed else "")
        return changed

    def _offer_chat_columns(self, facts: dict[str, Any]) -> bool:
        """A causal LM's Hub dataset: its columns in the mapping drop-downs, the likely ones chosen."""
        names = [str(c) for c in facts.get("columns") or []]
        if not names:
            return False
        guess = facts.get("column_guess") or {}
        changed = False
        for f, edit in self.chat_column_edits.items():
            changed = edit.set_columns([{"name": n} for n in names], guess.get(f)) or changed
        guessed = [f"{f} '{e.guessed}'" for f, e in self.chat_column_edits.items() if e.guessed and e.text() == e.guessed]
        show_text(self.columns_note, f"Chosen from the dataset's columns: {', '.join(guessed)}. Pick others if "
                                     "that is wrong." if guessed else "")
        return changed

    def _on_error(self, err: Any) -> None:
        self.status.stop()
        self._issues = [{"message": f"Could not read the data: {error_text(err)}", "hint": ""}]
        self.issues.set_issues(self._issues)
        self.changed.emit()

    def _fallback(self, _err: Any) -> None:
        show_text(self.note, "This engine cannot preview data (data.inspect); only problems are shown.")
        self._fallback_check.trigger()

    def _check_params(self) -> dict[str, Any]:
        return {"kind": KIND, "spec": launch_spec(self._spec)}

    def _on_check(self, reply: dict[str, Any]) -> None:
        issues = [i for i in reply.get("issues") or [] if route_issue(i, self._spec) == "data"]
        self._on_inspect({"issues": issues})

    def preview_augmentations(self) -> None:
        self.preview_aug_button.setEnabled(False)
        show_text(self.aug_status, "Making augmented samples…")
        self._client.request("data.preview", {"spec": launch_spec(self._spec), "n": 8},
                             self._on_aug_preview, self._on_aug_error)

    def _on_aug_preview(self, reply: dict[str, Any]) -> None:
        self.preview_aug_button.setEnabled(True)
        issues = reply.get("issues") or []
        samples = reply.get("samples") or []
        self.aug_samples.set_samples(samples)
        show_text(self.aug_status, "; ".join(i.get("message", "") for i in issues) if issues else
                                f"{len(samples)} training images as the model will see them.")

    def _on_aug_error(self, err: Any) -> None:
        self.preview_aug_button.setEnabled(True)
        show_text(self.aug_status, f"Could not preview: {error_text(err)}")
