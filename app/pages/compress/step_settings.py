"""Step 3: the settings of the ticked techniques only, and how every variant is measured.

The spin boxes allow a little more than the engine accepts (a ratio of 1, zero
steps): what is valid is decided by the engine's own pydantic models, and their
messages are shown under the field they are about.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QWidget,
)

from app.pages.compress.techniques import CALIBRATION_METHODS, FLOAT_OP_TYPES, default_settings
from app.text.field_text import plain_message
from app.widgets.common import card, label
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, step_header, with_message

# Which cards the ticked techniques need.
CARD_USERS = {
    "calibration": ("static_int8", "qat"),
    "quantization": ("dynamic_int8", "static_int8", "fp16"),
    "prune": ("prune",),
    "qat": ("qat",),
    "distill": ("distill",),
}


def _spin(low: int, high: int, tip: str = "") -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setToolTip(tip)
    spin.setMinimumWidth(110)
    return spin


def _dspin(low: float, high: float, step: float, decimals: int, tip: str = "") -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setDecimals(decimals)
    spin.setToolTip(tip)
    spin.setMinimumWidth(110)
    return spin


def _float_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


class SettingsStep(Step):
    title = "Settings"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.fields: dict[str, QWidget] = {}  # settings field -> its widget (tests drive these)
        self.cards: dict[str, QFrame] = {}
        self.forms: dict[str, QFormLayout] = {}
        self.titles: dict[str, str] = {}  # settings field -> "Card: Field", for messages
        outer = step_column(self, step_header("Settings",
                                              "Only the settings of the techniques you ticked. The defaults are "
                                              "a good start; the engine checks every value as you type."))

        form = self._card("calibration", "Calibration",
                          "Static int8 and QAT measure activation ranges on training examples "
                          "(the held-out ones score the variant).")
        self._add(form, "calibration.samples", "Samples",
                  _spin(0, 100_000, "validation examples the activation ranges come from"))
        method = QComboBox()
        for name in CALIBRATION_METHODS:
            method.addItem(name, name)
        method.setToolTip("minmax: the full range (fast); entropy and percentile clip outliers, "
                          "often more accurate for activations with long tails")
        self._add(form, "calibration.method", "Method", method)
        target = QComboBox()
        target.addItem("TensorRT / Jetson (symmetric int8)", "tensorrt")
        target.addItem("ONNX Runtime on x86 CPUs (u8 activations)", "cpu")
        target.setToolTip("The int8 form of static int8 and QAT: TensorRT takes symmetric int8 activations; "
                          "ONNX Runtime's fast CPU kernels want unsigned activations")
        self._add(form, "int8_target", "Int8 form", target)

        form = self._card("quantization", "Quantization",
                          "Ops you keep in float are left out of int8 or fp16: slower and bigger, "
                          "but they lose nothing.")
        per_channel = QCheckBox("One scale per output channel")
        per_channel.setToolTip("Per-channel int8 scales: more accurate than one scale per tensor")
        self._add(form, "per_channel", "Per-channel", per_channel)
        ops = QListWidget()
        for op in FLOAT_OP_TYPES:
            item = QListWidgetItem(op)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Unchecked)
            ops.addItem(item)
        ops.setFixedHeight(4 * (ops.sizeHintForRow(0) + 2) + 10)
        ops.setFlow(QListWidget.Flow.TopToBottom)
        ops.setWrapping(True)
        ops.setMinimumWidth(420)
        self._add(form, "exclude_op_types", "Keep in float", ops)

        form = self._card("prune", "Structured pruning",
                          "Whole heads, FFN units or channels are removed, so the model really is "
                          "smaller and faster; the recovery fine-tune wins back accuracy.")
        target = QComboBox()
        target.addItem("parameters", "params")
        target.addItem("MACs (compute)", "macs")
        self._add(form, "prune.target", "Target", target)
        self._add(form, "prune.ratio", "Ratio to remove",
                  _dspin(0.0, 1.0, 0.05, 2, "share of the target removed; must be between 0 and 1"))
        self._add(form, "prune.iterative_steps", "Iterative steps",
                  _spin(0, 100, "prune in this many rounds, recovering between them"))
        self._add(form, "prune.recovery_steps", "Recovery steps",
                  _spin(0, 1_000_000, "fine-tuning steps after pruning; 0 = none"))
        vocabulary = QCheckBox("also the vocabulary")
        vocabulary.setToolTip("Text models: keep only the embedding rows of the tokens the training data uses "
                              "(often half of a small encoder's parameters); other tokens read as unknown. "
                              "Counts toward the ratio.")
        self._add(form, "prune.vocabulary", "Embeddings", vocabulary)

        form = self._card("qat", "Quantization-aware training",
                          "A short fine-tune with simulated int8, from the source run's weights.")
        self._add(form, "qat.steps", "Steps", _spin(0, 1_000_000, "fine-tuning steps with fake quantization"))
        self._add(form, "qat.lr", "Learning rate", QLineEdit())

        form = self._card("distill", "Distillation",
                          "A new fine-tune with the source run's spec, trained in full as a student "
                          "of the source run (the teacher).")
        self._add(form, "distill.student_layers", "Student layers",
                  _spin(0, 64, "transformer blocks the student keeps, initialised from the teacher's"))
        self._add(form, "distill.temperature", "Temperature",
                  _dspin(0.0, 100.0, 0.5, 2, "softens both distributions in the KL term"))
        self._add(form, "distill.alpha", "Alpha",
                  _dspin(0.0, 1.0, 0.05, 2, "weight of the teacher's soft targets; 1 - alpha weighs the labels"))
        self._add(form, "distill.max_steps", "Steps", _spin(0, 1_000_000, "optimizer steps of the student"))
        self._add(form, "distill.lr", "Learning rate", QLineEdit())

        form = self._card("eval", "Evaluation",
                          "Every compression job scores its variant and the source run side by side "
                          "with these settings: same examples, threads and runtime. (A distillation "
                          "run is a fine-tune; it is scored with the engine's defaults.)")
        self._add(form, "eval.samples", "Samples",
                  _spin(0, 1_000_000, "held-out examples to score; 0 = the whole validation split"))
        self._add(form, "eval.batch_size", "Batch N",
                  _spin(0, 4096, "the second latency figure is measured at this batch size (the first at 1)"))
        self._add(form, "eval.repeats", "Repeats", _spin(0, 100_000, "timed runs per batch size"))
        threads = _spin(0, 1024, "CPU threads for both models")
        threads.setSpecialValueText("all cores")
        self._add(form, "eval.threads", "Threads", threads)

        outer.addWidget(self.general_message)
        outer.addStretch(1)
        for widget in self.fields.values():
            for signal in ("valueChanged", "currentIndexChanged", "toggled", "textEdited", "itemChanged"):
                if hasattr(widget, signal):
                    getattr(widget, signal).connect(self.emit_changed)
        self.load(default_settings())
        self.set_techniques([])

    def _card(self, key: str, title: str, text: str) -> QFormLayout:
        frame, box = card()
        box.addWidget(label(title, "h2"))
        box.addWidget(label(text, "muted", wrap=True))
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        box.addLayout(form)
        self.cards[key] = frame
        self.forms[key] = form
        self._card_title = title  # the fields added next belong to this card
        self.layout().addWidget(frame)
        return form

    def _add(self, form: QFormLayout, key: str, title: str, widget: QWidget) -> None:
        self.fields[key] = widget
        self.titles[key] = f"{self._card_title}: {title}"
        form.addRow(title, with_message(widget, self.message_for(key)))

    # -- which cards ---------------------------------------------------------------------------

    def set_techniques(self, keys: list[str], task: str | None = None) -> None:
        for card_key, users in CARD_USERS.items():
            self.cards[card_key].setVisible(any(k in keys for k in users))
        # Only a text model has a vocabulary to prune.
        self.forms["prune"].setRowVisible(self.fields["prune.vocabulary"].parentWidget(),
                                          task == "text_classification")
        # fp16 has no scales; per-channel only matters to the int8 modes.
        self.forms["quantization"].setRowVisible(self.fields["per_channel"].parentWidget(),
                                                 any(k in keys for k in ("dynamic_int8", "static_int8")))
        self.cards["eval"].setVisible(any(k != "distill" for k in keys) or not keys)

    def visible_fields(self) -> list[str]:
        """The settings fields shown for the ticked techniques."""
        return [k for k, w in self.fields.items() if w.isVisibleTo(self)]

    # -- values --------------------------------------------------------------------------------

    def _load(self, settings: dict[str, Any]) -> None:
        flat = {"calibration.samples": settings["calibration"]["samples"],
                "calibration.method": settings["calibration"]["method"],
                "int8_target": settings["int8_target"],
                "per_channel": settings["per_channel"],
                "exclude_op_types": settings["exclude_op_types"]}
        for group in ("prune", "qat", "distill", "eval"):
            flat.update({f"{group}.{k}": v for k, v in settings[group].items()})
        for key, value in flat.items():
            widget = self.fields[key]
            if isinstance(widget, QComboBox):
                widget.setCurrentIndex(max(0, widget.findData(value)))
            elif isinstance(widget, QCheckBox):
                widget.setChecked(bool(value))
            elif isinstance(widget, QListWidget):
                for i in range(widget.count()):
                    item = widget.item(i)
                    item.setCheckState(Qt.CheckState.Checked if item.text() in value else Qt.CheckState.Unchecked)
            elif isinstance(widget, QLineEdit):
                widget.setText(_float_text(value))
            else:
                widget.setValue(value)

    def follow_source(self, defaults: dict[str, Any]) -> None:
        """A new source run: the student's learning rate and the calibration method follow its defaults
        (``techniques.default_settings`` of that run)."""
        values = self.values()
        self.load({**values, "distill": {**values["distill"], "lr": defaults["distill"]["lr"]},
                   "calibration": {**values["calibration"], "method": defaults["calibration"]["method"]}})

    def _value(self, key: str) -> Any:
        widget = self.fields[key]
        if isinstance(widget, QComboBox):
            return widget.currentData()
        if isinstance(widget, QCheckBox):
            return widget.isChecked()
        if isinstance(widget, QListWidget):
            return [widget.item(i).text() for i in range(widget.count())
                    if widget.item(i).checkState() == Qt.CheckState.Checked]
        if isinstance(widget, QLineEdit):
            return widget.text().strip()  # parsed when the spec is built
        if isinstance(widget, QDoubleSpinBox):
            return round(widget.value(), widget.decimals())
        return widget.value()

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {"calibration": {"samples": self._value("calibration.samples"),
                                               "method": self._value("calibration.method")},
                               "int8_target": self._value("int8_target"),
                               "per_channel": self._value("per_channel"),
                               "exclude_op_types": self._value("exclude_op_types")}
        for group in ("prune", "qat", "distill", "eval"):
            out[group] = {key.split(".", 1)[1]: self._value(key) for key in self.fields
                          if key.startswith(group + ".")}
        return out

    def show_errors(self, errors: dict[str, list[str]]) -> None:
        for key, message in self.field_messages.items():
            # Under the field, by its label: "Repeats must be at least 3." (the key is in the tooltip).
            field = self.titles.get(key, key).rsplit(": ", 1)[-1]
            message.set_messages([plain_message(field, m) or m for m in errors.get(key, [])])
            message.setToolTip(f"In the job file: {key}" if errors.get(key) else "")
        self.general_message.set_messages(errors.get("", []))
