"""The Task step's "Objective" card, for a causal language model: learn from example answers (SFT)
or from preferences (DPO, ORPO, KTO), with beta, the DPO loss type and the KTO weights.

Spec fields ``objective`` and ``preference.*`` (engine/api/train_spec.py). Other tasks hide the
card and write ``objective: sft``, so the form cannot produce a spec the engine would refuse.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFormLayout, QVBoxLayout, QWidget

from app.widgets.common import card, label
from app.widgets.wizard_parts import FieldMessage, with_message
from engine.api.train_spec import PreferenceSpec

OBJECTIVES = (
    ("sft", "SFT: learn the example answers",
     "Supervised fine-tuning: the model learns to give the responses in your data."),
    ("dpo", "DPO: prefer the chosen answer",
     "Direct preference optimisation on pairs of a chosen and a rejected answer, against the "
     "model as it was before training (computed once, not kept in memory)."),
    ("orpo", "ORPO: learn and prefer at once",
     "Odds-ratio preference optimisation: learns the chosen answers and prefers them over the "
     "rejected ones, without a reference model."),
    ("kto", "KTO: answers marked good or bad",
     "Kahneman-Tversky optimisation on single answers labelled desirable or not (pairs work too: "
     "chosen counts as good, rejected as bad)."),
)
LOSS_TYPES = (("sigmoid", "sigmoid (the DPO paper)"), ("ipo", "IPO (squared, per token)"), ("hinge", "hinge"))
DEFAULTS = PreferenceSpec()


def _spin(value: float, lo: float, hi: float, step: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setDecimals(3)
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setValue(value)
    return box


class ObjectiveBox(QWidget):
    """``changed`` on any edit; ``load`` / ``write`` read and fill the spec dict."""

    changed = Signal()

    def __init__(self, message_for: Any, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        frame, box = card()
        outer.addWidget(frame)
        box.addWidget(label("Objective", "h2"))
        self.explain = label("", "muted", wrap=True)
        box.addWidget(self.explain)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.objective_combo = QComboBox()
        for key, text, _ in OBJECTIVES:
            self.objective_combo.addItem(text, key)
        self.beta_spin = _spin(DEFAULTS.beta, 0.001, 100.0, 0.05)
        self.loss_combo = QComboBox()
        for key, text in LOSS_TYPES:
            self.loss_combo.addItem(text, key)
        self.desirable_spin = _spin(DEFAULTS.desirable_weight, 0.01, 100.0, 0.1)
        self.undesirable_spin = _spin(DEFAULTS.undesirable_weight, 0.01, 100.0, 0.1)
        message: FieldMessage = message_for("objective")
        form.addRow("Objective", with_message(self.objective_combo, message))
        self.rows = {
            "beta": (label("Beta"), with_message(self.beta_spin, message_for("preference.beta"))),
            "loss": (label("Loss type"), with_message(self.loss_combo, message_for("preference.loss_type"))),
            "desirable": (label("Desirable weight"),
                          with_message(self.desirable_spin, message_for("preference.desirable_weight"))),
            "undesirable": (label("Undesirable weight"),
                            with_message(self.undesirable_spin, message_for("preference.undesirable_weight"))),
        }
        for name, field in self.rows.values():
            form.addRow(name, field)
        self._form = form
        box.addLayout(form)

        self.objective_combo.setToolTip("How the model learns from your data. Job file: objective.")
        self.beta_spin.setToolTip("DPO and KTO: how far the model may move from where it started (smaller "
                                  "lets it move further); ORPO: the weight of the preference term. "
                                  "Job file: preference.beta.")
        self.loss_combo.setToolTip("DPO's loss on the reward margin. Job file: preference.loss_type.")
        self.desirable_spin.setToolTip("KTO: weight of the answers marked good. "
                                       "Job file: preference.desirable_weight.")
        self.undesirable_spin.setToolTip("KTO: weight of the answers marked bad. "
                                         "Job file: preference.undesirable_weight.")
        self.objective_combo.currentIndexChanged.connect(self._on_objective)
        self.loss_combo.currentIndexChanged.connect(lambda _i: self.changed.emit())
        for spin in (self.beta_spin, self.desirable_spin, self.undesirable_spin):
            spin.valueChanged.connect(lambda _v: self.changed.emit())
        self._show_rows()

    def objective(self) -> str:
        return self.objective_combo.currentData()

    def _on_objective(self, _index: int) -> None:
        self._show_rows()
        self.changed.emit()

    def _show_rows(self) -> None:
        objective = self.objective()
        self.explain.setText(next(text for key, _, text in OBJECTIVES if key == objective))
        visible = {"beta": objective != "sft", "loss": objective == "dpo",
                   "desirable": objective == "kto", "undesirable": objective == "kto"}
        for key, (name, _field) in self.rows.items():
            self._form.setRowVisible(name, visible[key])

    def row_visible(self, key: str) -> bool:
        """Whether the form shows the row of ``key`` (beta, loss, desirable, undesirable) now."""
        return self._form.isRowVisible(self.rows[key][0])

    def load(self, spec: dict[str, Any]) -> None:
        p = spec.get("preference") or {}
        index = self.objective_combo.findData(spec.get("objective") or "sft")
        self.objective_combo.setCurrentIndex(max(index, 0))
        self.beta_spin.setValue(float(p.get("beta", DEFAULTS.beta)))
        self.loss_combo.setCurrentIndex(max(self.loss_combo.findData(p.get("loss_type", DEFAULTS.loss_type)), 0))
        self.desirable_spin.setValue(float(p.get("desirable_weight", DEFAULTS.desirable_weight)))
        self.undesirable_spin.setValue(float(p.get("undesirable_weight", DEFAULTS.undesirable_weight)))
        self._show_rows()

    def write(self, spec: dict[str, Any], task: str) -> None:
        objective = self.objective() if task == "causal_lm" else "sft"
        spec["objective"] = objective
        if objective == "sft":
            return  # the preference options keep what the spec had; they apply to no other objective
        p = spec.setdefault("preference", {})
        p["beta"] = round(self.beta_spin.value(), 3)
        if objective == "dpo":
            p["loss_type"] = self.loss_combo.currentData()
        if objective == "kto":
            p["desirable_weight"] = round(self.desirable_spin.value(), 3)
            p["undesirable_weight"] = round(self.undesirable_spin.value(), 3)
