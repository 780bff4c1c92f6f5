"""The Training step's "Speed" card: attention kernel, torch.compile, AdamW kernel, data workers,
sequence packing and length grouping (spec ``speed.*`` and ``data.num_workers/packing/group_by_length``).

Every choice starts at "auto", which the engine turns into what is fastest and safe on the run's
device (docs/speed.md), so most users never touch this card. Packing applies to causal LM only and
length grouping to text tasks only; for other tasks the box is disabled and writes False, so the
form cannot produce a spec the engine would refuse.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QSpinBox, QVBoxLayout, QWidget

from app.text.glossary import term_tooltip
from app.widgets.common import label, tip_combo_items

ATTENTION = (("auto", "auto (fastest the model allows)"),
             ("sdpa", "SDPA (PyTorch)"),
             ("flash_attention_2", "FlashAttention-2 (CUDA)"),
             ("eager", "eager (plain, slowest)"))
COMPILE = (("auto", "auto (on for a CUDA GPU)"), ("on", "on"), ("off", "off"))
OPTIMIZER_IMPL = (("auto", "auto (fused on a GPU)"), ("fused", "fused"),
                  ("foreach", "foreach"), ("for_loop", "for-loop (slowest)"))
AUTO_WORKERS = -1  # the spin box's lowest value, shown as "auto": spec data.num_workers None
PACKING_TASKS = ("causal_lm",)
LENGTH_TASKS = ("text_classification", "causal_lm")


def _combo(items: tuple[tuple[str, str], ...]) -> QComboBox:
    box = QComboBox()
    # The card shares a column with the fit estimate: long item texts must not widen it.
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(12)
    for key, text in items:
        box.addItem(text, key)
    return box


def _select(box: QComboBox, key: Any) -> None:
    index = box.findData(key)
    box.setCurrentIndex(index if index >= 0 else 0)


class SpeedBox(QWidget):
    """A compact form of the throughput options; ``changed`` on any edit by the user."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._task = ""
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(6)
        column.addWidget(label("Speed", "h2"))
        column.addWidget(label("auto picks the fastest safe choice for the run's device.", "muted", wrap=True))
        form = QFormLayout()
        self.attention_combo = _combo(ATTENTION)
        self.attention_combo.setToolTip(term_tooltip("scaled dot-product attention",
                                                     "Image models have no attention: this is ignored there."))
        tip_combo_items(self.attention_combo)
        form.addRow("Attention", self.attention_combo)
        self.compile_combo = _combo(COMPILE)
        self.compile_combo.setToolTip(term_tooltip("torch.compile"))
        form.addRow("torch.compile", self.compile_combo)
        self.optimizer_combo = _combo(OPTIMIZER_IMPL)
        self.optimizer_combo.setToolTip(term_tooltip("fused AdamW", "foreach: a few kernels per step (the CPU's "
                                                     "choice); for-loop: one per weight tensor. Fused needs AdamW."))
        tip_combo_items(self.optimizer_combo)
        form.addRow("AdamW kernel", self.optimizer_combo)
        self.workers_spin = QSpinBox()
        self.workers_spin.setRange(AUTO_WORKERS, 64)
        self.workers_spin.setSpecialValueText("auto")  # shown at the minimum
        self.workers_spin.setValue(AUTO_WORKERS)
        self.workers_spin.setToolTip(term_tooltip("data workers", "Per training process. auto: 4 (fewer on "
                                                  "small machines) on a CUDA GPU, none on CPU."))
        form.addRow("Data workers", self.workers_spin)
        self.packing_check = QCheckBox("Pack examples into full sequences")
        self.packing_check.setToolTip(term_tooltip("sequence packing", "Causal LM only. The loss is the same "
                                                   "as without packing; the steps do more real tokens."))
        form.addRow(self.packing_check)
        self.group_check = QCheckBox("Batch by similar length")
        self.group_check.setToolTip(term_tooltip("length grouping", "Text tasks only. Batches are still "
                                                 "shuffled, so training sees the same mix."))
        form.addRow(self.group_check)
        column.addLayout(form)
        self.cpu_note = label("", "muted", wrap=True)
        self.cpu_note.hide()
        column.addWidget(self.cpu_note)

        for combo in (self.attention_combo, self.compile_combo, self.optimizer_combo):
            combo.currentIndexChanged.connect(self.changed)
        self.workers_spin.valueChanged.connect(self.changed)
        self.packing_check.toggled.connect(self.changed)
        self.group_check.toggled.connect(self.changed)

    def set_on_cpu(self, cpu: bool) -> None:
        """A run on this machine's CPU: FlashAttention-2 (a CUDA kernel) is greyed with the reason, and the
        card says what auto does there."""
        item = self.attention_combo.model().item(self.attention_combo.findData("flash_attention_2"))
        item.setEnabled(not cpu)
        item.setToolTip("Needs a CUDA GPU: this run is on the CPU." if cpu else "")
        self.cpu_note.setText("On the CPU, auto keeps torch.compile off (its compile time rarely pays back in a "
                              "CPU run) and uses the foreach AdamW kernel; fused kernels and FlashAttention-2 are "
                              "for CUDA GPUs." if cpu else "")
        self.cpu_note.setVisible(cpu)

    def set_task(self, task: str) -> None:
        """Enable packing and length grouping where they apply; elsewhere they are off.

        Unticked quietly (no ``changed``): this runs while the page reads the form.
        """
        self._task = task
        for check, tasks in ((self.packing_check, PACKING_TASKS), (self.group_check, LENGTH_TASKS)):
            applies = task in tasks
            check.setEnabled(applies)
            if not applies and check.isChecked():
                check.blockSignals(True)
                check.setChecked(False)
                check.blockSignals(False)

    def load(self, spec: dict[str, Any]) -> None:
        speed = spec.get("speed") or {}
        data = spec.get("data") or {}
        _select(self.attention_combo, speed.get("attention", "auto"))
        _select(self.compile_combo, speed.get("compile", "auto"))
        _select(self.optimizer_combo, speed.get("optimizer_impl", "auto"))
        workers = data.get("num_workers")
        self.workers_spin.setValue(AUTO_WORKERS if workers is None else int(workers))
        self.packing_check.setChecked(bool(data.get("packing")))
        self.group_check.setChecked(bool(data.get("group_by_length")))
        self.set_task(str(spec.get("task") or ""))

    def write(self, spec: dict[str, Any]) -> None:
        self.set_task(str(spec.get("task") or ""))
        # update, not replace: speed.peak_tflops has no widget and a loaded spec's value stays.
        spec.setdefault("speed", {}).update(attention=self.attention_combo.currentData(),
                                            compile=self.compile_combo.currentData(),
                                            optimizer_impl=self.optimizer_combo.currentData())
        workers = self.workers_spin.value()
        spec.setdefault("data", {}).update(
            num_workers=None if workers == AUTO_WORKERS else workers,
            packing=self.packing_check.isChecked() and self.packing_check.isEnabled(),
            group_by_length=self.group_check.isChecked() and self.group_check.isEnabled())

    def summary(self) -> str:
        """The card's choices in a few words ("speed: all auto", or what differs from auto)."""
        chosen = [f"{name} {combo.currentData()}" for name, combo in
                  (("attention", self.attention_combo), ("torch.compile", self.compile_combo),
                   ("AdamW", self.optimizer_combo)) if combo.currentData() != "auto"]
        if self.workers_spin.value() != AUTO_WORKERS:
            chosen.append(f"{self.workers_spin.value()} data workers")
        chosen += [name for name, check in (("packing", self.packing_check), ("length grouping", self.group_check))
                   if check.isChecked() and check.isEnabled()]
        return "speed: " + (", ".join(chosen) if chosen else "all auto")
