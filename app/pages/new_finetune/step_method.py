"""Step 4: how much of the model to train: all of it, LoRA adapters, a prompt, or QLoRA."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QDoubleSpinBox,
    QFormLayout,
    QListWidget,
    QListWidgetItem,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.text.glossary import field_tooltip, option_tooltip
from app.widgets.common import card, label
from app.widgets.wizard_parts import Step, step_header, with_message

METHODS = (
    ("full", "Full fine-tuning", "Train every weight. Best results, most memory; saves a whole model."),
    ("lora", "LoRA", "Train small low-rank adapters beside the attention and MLP weights. "
                     "A fraction of the memory; usually nearly as good."),
    ("prompt_tuning", "Prompt tuning", "Train a few virtual tokens put before every input; the "
                                       "model itself stays frozen. Text models only."),
    ("qlora", "QLoRA", "LoRA on a 4-bit copy of the model: the least memory, for large models."),
)


class MethodStep(Step):
    title = "Method"
    prefixes = ("method",)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._task = "text_classification"
        self._has_cuda = False
        self._targets_wanted: list[str] | None = None

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("How much of the model to train?",
                                    "LoRA is a good start: quick, light on memory, and the saved "
                                    "adapter is small."))
        frame, box = card()
        self.group = QButtonGroup(self)
        self.method_radios: dict[str, QRadioButton] = {}
        self.method_notes: dict[str, Any] = {}
        for key, title, text in METHODS:
            radio = QRadioButton(title)
            radio.setToolTip(option_tooltip(key))
            self.group.addButton(radio)
            self.method_radios[key] = radio
            box.addWidget(radio)
            note = label(text, "muted", wrap=True)
            note.setContentsMargins(24, 0, 0, 0)
            self.method_notes[key] = note
            box.addWidget(note)
        self.qlora_reason = label("", "error", wrap=True)
        self.qlora_reason.setContentsMargins(24, 0, 0, 0)
        box.addWidget(self.qlora_reason)
        self.code_reason = label("A model from your own Python file trains in full: LoRA and prompt tuning "
                                 "pick their targets per known architecture.", "muted", wrap=True)
        self.code_reason.setVisible(False)
        box.addWidget(self.code_reason)
        self._code_model = False
        box.addWidget(self.message_for("method.kind"))
        self.method_radios["lora"].setChecked(True)
        outer.addWidget(frame)

        self.lora_card, box = card()
        box.addWidget(label("LoRA settings", "h2"))
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.rank_spin = QSpinBox()
        self.rank_spin.setRange(0, 1024)  # 0 is shown with the reason, not turned back
        self.rank_spin.setValue(8)
        form.addRow("Rank (r)", with_message(self.rank_spin, self.message_for("method.lora_r")))
        self.alpha_spin = QDoubleSpinBox()
        self.alpha_spin.setRange(0.5, 4096)
        self.alpha_spin.setDecimals(1)
        self.alpha_spin.setValue(16)
        form.addRow("Alpha", with_message(self.alpha_spin, self.message_for("method.lora_alpha")))
        self.dropout_spin = QDoubleSpinBox()
        self.dropout_spin.setRange(0, 0.9)
        self.dropout_spin.setSingleStep(0.05)
        self.dropout_spin.setValue(0.05)
        form.addRow("Dropout", with_message(self.dropout_spin, self.message_for("method.lora_dropout")))
        self.targets_list = QListWidget()
        self.targets_list.setMinimumWidth(260)
        self.targets_note = label("", "muted", wrap=True)
        targets = QWidget()
        column = QVBoxLayout(targets)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.targets_list)
        column.addWidget(self.message_for("method.target_modules"))
        form.addRow("Target modules", targets)
        # Its own row: inside the list's box a wrapped note would be drawn over the list's border.
        form.addRow("", self.targets_note)
        box.addLayout(form)
        outer.addWidget(self.lora_card)

        self.prompt_card, box = card()
        box.addWidget(label("Prompt tuning settings", "h2"))
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.tokens_spin = QSpinBox()
        self.tokens_spin.setRange(0, 1024)
        self.tokens_spin.setValue(20)
        form.addRow("Virtual tokens",
                    with_message(self.tokens_spin, self.message_for("method.num_virtual_tokens")))
        box.addLayout(form)
        outer.addWidget(self.prompt_card)
        outer.addWidget(self.general_message)
        outer.addStretch(1)

        self.rank_spin.setToolTip(field_tooltip("LoRA rank", "method.lora_r", "1 to 1,024."))
        self.alpha_spin.setToolTip(field_tooltip("LoRA alpha", "method.lora_alpha"))
        self.dropout_spin.setToolTip(field_tooltip("LoRA dropout", "method.lora_dropout"))
        self.targets_list.setToolTip(field_tooltip("target modules", "method.target_modules"))
        self.tokens_spin.setToolTip(field_tooltip("virtual tokens", "method.num_virtual_tokens", "1 to 1,024."))
        self.group.buttonToggled.connect(lambda _b, on: on and self._on_kind())
        for spin in (self.rank_spin, self.alpha_spin, self.dropout_spin, self.tokens_spin):
            spin.valueChanged.connect(self.emit_changed)
        self.targets_list.itemChanged.connect(self.emit_changed)
        self.set_targets([])
        self.set_machine(None, "checking this machine for a CUDA GPU")

    def kind(self) -> str:
        return next(k for k, r in self.method_radios.items() if r.isChecked())

    def set_task(self, task: str) -> None:
        self._task = task
        text = task != "image_classification"
        self.method_radios["prompt_tuning"].setVisible(text)
        self.method_notes["prompt_tuning"].setVisible(text)
        if not text and self.kind() == "prompt_tuning":
            self.method_radios["lora"].setChecked(True)

    def set_machine(self, info: dict[str, Any] | None, why_unknown: str = "") -> None:
        """QLoRA needs a CUDA GPU; say so in words rather than hiding the option."""
        gpus = (info or {}).get("gpus") or []
        self._has_cuda = bool(gpus)
        radio = self.method_radios["qlora"]
        radio.setEnabled(self._has_cuda and not self._code_model)
        if self._has_cuda:
            self.qlora_reason.setText("")
        elif info is None:
            self.qlora_reason.setText(f"QLoRA needs a CUDA GPU ({why_unknown}).")
        else:
            self.qlora_reason.setText("QLoRA needs a CUDA GPU; this machine has none.")
        self.qlora_reason.setVisible(bool(self.qlora_reason.text()))
        if not self._has_cuda and radio.isChecked():
            self.method_radios["lora"].setChecked(True)

    def set_code_model(self, on: bool) -> None:
        """A user's own model file supports full fine-tuning only (the engine refuses the rest)."""
        if on == self._code_model:
            return
        self._code_model = on
        for key, radio in self.method_radios.items():
            if key != "full":
                radio.setEnabled(not on and (key != "qlora" or self._has_cuda))
        if on:
            self.method_radios["full"].setChecked(True)
        self.code_reason.setVisible(on)

    def set_targets(self, names: list[str], automatic: list[str] | None = None) -> None:
        """LoRA target choices from the model's facts; none checked means automatic."""
        wanted = set(self._targets_wanted or [])
        self.targets_list.blockSignals(True)
        self.targets_list.clear()
        for name in list(dict.fromkeys([*names, *sorted(wanted - set(names))])):
            item = QListWidgetItem(name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if name in wanted else Qt.CheckState.Unchecked)
            self.targets_list.addItem(item)
        self.targets_list.blockSignals(False)
        self.targets_list.setVisible(self.targets_list.count() > 0)
        rows = max(self.targets_list.count(), 1)
        self.targets_list.setFixedHeight(min(rows, 6) * (self.targets_list.sizeHintForRow(0) + 2) + 8)
        picks = f" ({', '.join(automatic)})" if automatic else ""
        self.targets_note.setText(
            f"Leave all unchecked for the automatic choice{picks}." if names
            else "Automatic: the attention's query and value projections of this architecture. The "
                 "choices appear once the model has been checked.")

    def _on_facts(self, facts: dict[str, Any]) -> None:
        automatic = list(facts.get("lora_targets") or [])
        self.set_targets(list(facts.get("lora_candidates") or automatic), automatic)

    def _on_kind(self) -> None:
        kind = self.kind()
        self.lora_card.setVisible(kind in ("lora", "qlora"))
        self.prompt_card.setVisible(kind == "prompt_tuning")
        self.emit_changed()

    def _checked_targets(self) -> list[str] | None:
        names = [self.targets_list.item(i).text() for i in range(self.targets_list.count())
                 if self.targets_list.item(i).checkState() == Qt.CheckState.Checked]
        return names or None

    def _load(self, spec: dict[str, Any]) -> None:
        method = spec.get("method") or {}
        self.set_task(spec.get("task", self._task))
        kind = method.get("kind", "lora")
        radio = self.method_radios.get(kind, self.method_radios["lora"])
        radio.setChecked(True)  # a disabled QLoRA radio still shows what the spec asked for
        self.rank_spin.setValue(int(method.get("lora_r", 8)))
        self.alpha_spin.setValue(float(method.get("lora_alpha", 16)))
        self.dropout_spin.setValue(float(method.get("lora_dropout", 0.05)))
        self.tokens_spin.setValue(int(method.get("num_virtual_tokens", 20)))
        self._targets_wanted = method.get("target_modules")
        current = [self.targets_list.item(i).text() for i in range(self.targets_list.count())]
        self.set_targets(current)  # keeps the model's choices, checks what the spec names
        self._on_kind()

    def write(self, spec: dict[str, Any]) -> None:
        method = spec.setdefault("method", {})
        self._targets_wanted = self._checked_targets()
        method.update(kind=self.kind(), lora_r=self.rank_spin.value(),
                      lora_alpha=round(self.alpha_spin.value(), 3),
                      lora_dropout=round(self.dropout_spin.value(), 3),
                      num_virtual_tokens=self.tokens_spin.value(),
                      target_modules=self._targets_wanted)
