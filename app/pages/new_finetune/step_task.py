"""Step 1: what the model should learn to do, or a saved template to start from."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from app.pages.new_finetune.objective_box import ObjectiveBox
from app.widgets.common import card, label
from app.widgets.wizard_parts import Step, error_text, show_text, step_header
from engine.api.job_terms import FINETUNE

TASKS = (
    ("text_classification", "Text classification",
     "Sort short texts (tickets, reviews, emails) into your labels."),
    ("image_classification", "Image classification",
     "Tell images apart by class, from a folder with one subfolder per class."),
    ("causal_lm", "Causal language model",
     "Teach a language model to answer prompts the way your examples do."),
)


class TaskStep(Step):
    title = "Task"
    prefixes = ("task", "objective", "preference")
    template_chosen = Signal(dict)  # {name, kind, spec, saved_at}

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("What should the model learn?",
                                    "Pick a task. Each one starts with a built-in model and dataset, "
                                    "so you can click Next through every step and get a working run."))
        row = QHBoxLayout()
        row.setSpacing(12)
        self.task_group = QButtonGroup(self)
        self.task_radios: dict[str, QRadioButton] = {}
        for key, title, text in TASKS:
            frame, box = card()
            radio = QRadioButton(title)
            font = radio.font()
            font.setBold(True)
            radio.setFont(font)
            self.task_group.addButton(radio)
            self.task_radios[key] = radio
            radio.setToolTip(f"{text} Job file: task: {key}.")
            box.addWidget(radio)
            box.addWidget(label(text, "muted", wrap=True))
            box.addStretch(1)
            # The whole card selects the task, not just the small circle.
            frame.mousePressEvent = lambda _e, r=radio: r.setChecked(True)
            row.addWidget(frame, 1)
        outer.addLayout(row)
        outer.addWidget(self.message_for("task"))
        self.task_radios["text_classification"].setChecked(True)
        self.task_group.buttonToggled.connect(lambda _b, on: on and self._on_task())
        # Causal LM only: learn the example answers (SFT) or from preferences (DPO, ORPO, KTO).
        self.objective_box = ObjectiveBox(self.message_for)
        self.objective_box.changed.connect(self.emit_changed)
        outer.addWidget(self.objective_box)
        self.objective_box.setVisible(False)

        frame, box = card()
        box.addWidget(label("Start from a template", "h2"))
        box.addWidget(label("Templates are specs saved from the Review step. Choosing one fills "
                            "in every step and takes you to Review.", "muted", wrap=True))
        self.templates = QListWidget()
        self.templates.setMaximumHeight(150)
        self.templates.itemClicked.connect(self._choose)
        self.templates.setToolTip("Job files saved from Review (under templates/ in the data folder); "
                                  "click one to fill in every step.")
        box.addWidget(self.templates)
        self.templates_note = label("", "muted", wrap=True)
        self.templates_note.hide()
        box.addWidget(self.templates_note)
        outer.addWidget(frame)
        outer.addStretch(1)

    def task(self) -> str:
        return next(k for k, r in self.task_radios.items() if r.isChecked())

    def objective(self) -> str:
        return self.objective_box.objective() if self.task() == "causal_lm" else "sft"

    def _on_task(self) -> None:
        self.objective_box.setVisible(self.task() == "causal_lm")
        self.emit_changed()

    def _load(self, spec: dict[str, Any]) -> None:
        self.task_radios.get(spec.get("task"), self.task_radios["text_classification"]).setChecked(True)
        self.objective_box.load(spec)
        self.objective_box.setVisible(self.task() == "causal_lm")

    def write(self, spec: dict[str, Any]) -> None:
        spec["task"] = self.task()
        self.objective_box.write(spec, spec["task"])

    # -- templates ----------------------------------------------------------------------

    def reload_templates(self) -> None:
        self._client.request("templates.list", {}, self._show_templates, self._templates_failed)

    def _show_templates(self, reply: dict[str, Any]) -> None:
        self.templates.clear()
        items = [t for t in reply.get("templates") or [] if t.get("kind", FINETUNE) == FINETUNE]
        for template in items:
            task = (template.get("spec") or {}).get("task", "")
            item = QListWidgetItem(f"{template.get('name')}    {task}")
            item.setData(Qt.ItemDataRole.UserRole, template)
            self.templates.addItem(item)
        self.templates.setVisible(bool(items))
        show_text(self.templates_note, "" if items else "No templates yet. Save one from the Review step.")

    def _templates_failed(self, err: Any) -> None:
        self.templates.clear()
        self.templates.hide()
        show_text(self.templates_note, f"Templates are not available: {error_text(err)}")

    def _choose(self, item: QListWidgetItem) -> None:
        template = item.data(Qt.ItemDataRole.UserRole)
        if template:
            self.template_chosen.emit(template)
