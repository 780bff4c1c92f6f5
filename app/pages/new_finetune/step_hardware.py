"""Step 5: where it runs, how it is split across processes, the training loop, and whether it fits."""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.pages.new_finetune.parts import (
    DebouncedRequest,
    Step,
    error_text,
    step_header,
    with_message,
)
from app.pages.new_finetune.spec_tools import launch_spec
from app.widgets.common import card, label
from app.widgets.fit_bars import FitBars

STRATEGIES = (("single", "Single process"), ("ddp", "DDP (a full copy per process)"),
              ("fsdp", "FSDP2 (weights sharded across processes)"),
              ("deepspeed", "DeepSpeed ZeRO"))
DEVICES = (("auto", "Automatic (GPU when there is one)"), ("cpu", "CPU"), ("cuda", "CUDA GPU"))
PRECISIONS = (("fp32", "fp32 (full precision)"), ("bf16", "bf16 (half the activation memory)"),
              ("fp16", "fp16 (CUDA only)"))
SCHEDULES = ("linear", "cosine", "constant", "one_cycle")
ESTIMATE_MS = 300


def _combo(items: tuple[tuple[str, str], ...]) -> QComboBox:
    box = QComboBox()
    for key, text in items:
        box.addItem(text, key)
    return box


def _spin(lo: int, hi: int, value: int) -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setValue(value)
    return box


def _select(box: QComboBox, key: Any) -> None:
    index = box.findData(key)
    if index >= 0:
        box.setCurrentIndex(index)


class HardwareStep(Step):
    title = "Hardware"
    prefixes = ("distributed", "optim", "batch_size", "grad_accum", "max_steps", "epochs",
                "precision", "activation_checkpointing", "device", "eval_every", "checkpoint_every")
    patch_requested = Signal(dict)  # a suggestion's spec_patch, to merge into the form

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._spec: dict[str, Any] = {}
        self._machine: dict[str, Any] | None = None
        self._estimated_key = ""

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("Where and how it runs",
                                    "One process on this machine is the default. The estimate on "
                                    "the right updates as you change anything."))
        columns = QHBoxLayout()
        columns.setSpacing(14)
        frame, box = card()
        form = QFormLayout()
        self.where_combo = QComboBox()
        self.where_combo.addItem("This machine", "local")
        form.addRow("Run on", self.where_combo)
        form.addRow("", label("Remote GPU hosts are added on the Hosts page.", "muted", wrap=True))
        self.device_combo = _combo(DEVICES)
        form.addRow("Device", with_message(self.device_combo, self.message_for("device")))
        self.nproc_spin = _spin(1, os.cpu_count() or 1, 1)
        self.nproc_label = label("Processes")
        form.addRow(self.nproc_label, with_message(self.nproc_spin, self.message_for("distributed.nproc")))
        self.strategy_combo = _combo(STRATEGIES)
        form.addRow("Strategy", with_message(self.strategy_combo, self.message_for("distributed.strategy")))
        self.deepspeed_box = QWidget()
        ds = QFormLayout(self.deepspeed_box)
        ds.setContentsMargins(0, 0, 0, 0)
        self.zero_combo = _combo((("1", "Stage 1: optimizer state"), ("2", "Stage 2: + gradients"),
                                  ("3", "Stage 3: + weights")))
        ds.addRow("ZeRO stage", self.zero_combo)
        self.offload_optimizer_check = QCheckBox("Offload optimizer state to CPU memory")
        self.offload_params_check = QCheckBox("Offload weights to CPU memory (stage 3)")
        ds.addRow(self.offload_optimizer_check)
        ds.addRow(self.offload_params_check)
        form.addRow(self.deepspeed_box)
        self.precision_combo = _combo(PRECISIONS)
        form.addRow("Precision", with_message(self.precision_combo, self.message_for("precision")))
        self.batch_spin = _spin(1, 65536, 16)
        form.addRow("Batch size (per process)", with_message(self.batch_spin, self.message_for("batch_size")))
        self.accum_spin = _spin(1, 4096, 1)
        form.addRow("Gradient accumulation", with_message(self.accum_spin, self.message_for("grad_accum")))
        self.checkpointing_check = QCheckBox("Activation checkpointing (less memory, ~30% slower)")
        form.addRow(with_message(self.checkpointing_check, self.message_for("activation_checkpointing")))
        length = QWidget()
        row = QHBoxLayout(length)
        row.setContentsMargins(0, 0, 0, 0)
        self.length_combo = _combo((("steps", "Steps"), ("epochs", "Epochs")))
        self.max_steps_spin = _spin(1, 10_000_000, 100)
        self.epochs_spin = QDoubleSpinBox()
        self.epochs_spin.setRange(0.1, 10_000)
        self.epochs_spin.setValue(3)
        row.addWidget(self.length_combo)
        row.addWidget(self.max_steps_spin, 1)
        row.addWidget(self.epochs_spin, 1)
        form.addRow("Train for", with_message(length, self.message_for("max_steps")))
        self.lr_edit = QLineEdit("0.0005")
        form.addRow("Learning rate", with_message(self.lr_edit, self.message_for("optim")))
        self.schedule_combo = QComboBox()
        self.schedule_combo.addItems(SCHEDULES)
        form.addRow("Schedule", self.schedule_combo)
        self.eval_every_spin = _spin(1, 10_000_000, 50)
        form.addRow("Evaluate every (steps)", with_message(self.eval_every_spin, self.message_for("eval_every")))
        self.checkpoint_every_spin = _spin(1, 10_000_000, 50)
        form.addRow("Checkpoint every (steps)",
                    with_message(self.checkpoint_every_spin, self.message_for("checkpoint_every")))
        box.addLayout(form)
        box.addWidget(self.general_message)
        box.addStretch(1)
        columns.addWidget(frame, 1)

        frame, box = card()
        box.addWidget(label("Will it fit?", "h2"))
        box.addWidget(label("Estimated memory per device: weights, gradients, optimizer state "
                            "and activations against what the device has.", "muted", wrap=True))
        self.fit = FitBars()
        self.fit.apply_patch.connect(self.patch_requested)
        box.addWidget(self.fit)
        box.addStretch(1)
        columns.addWidget(frame, 1)
        outer.addLayout(columns)
        outer.addStretch(1)

        self.estimator = DebouncedRequest(self, client, "estimate.fit", ESTIMATE_MS,
                                          lambda: {"spec": launch_spec(self._spec)},
                                          self.fit.set_estimate, self._estimate_failed, self._no_estimator)
        for combo in (self.where_combo, self.device_combo, self.strategy_combo, self.zero_combo,
                      self.precision_combo, self.schedule_combo, self.length_combo):
            combo.currentIndexChanged.connect(self._on_form)
        for spin in (self.nproc_spin, self.batch_spin, self.accum_spin, self.max_steps_spin,
                     self.epochs_spin, self.eval_every_spin, self.checkpoint_every_spin):
            spin.valueChanged.connect(self._on_form)
        for check in (self.offload_optimizer_check, self.offload_params_check, self.checkpointing_check):
            check.toggled.connect(self._on_form)
        self.lr_edit.textChanged.connect(self._on_form)
        self._update_visibility()

    # -- form ---------------------------------------------------------------------------

    def set_machine(self, info: dict[str, Any] | None) -> None:
        self._machine = info
        self._update_visibility()

    def max_processes(self) -> int:
        info = self._machine or {}
        gpus = len(info.get("gpus") or [])
        cores = int((info.get("cpu") or {}).get("cores") or os.cpu_count() or 1)
        device = self.device_combo.currentData()
        if device == "cuda" or (device == "auto" and gpus):
            return max(gpus, 1)
        return max(cores, 1)

    def _on_form(self, *_args: Any) -> None:
        if self._loading:
            return
        # More than one process needs a strategy: pick DDP rather than show an error.
        if self.nproc_spin.value() > 1 and self.strategy_combo.currentData() == "single":
            _select(self.strategy_combo, "ddp")
        self._update_visibility()
        self.emit_changed()

    def _update_visibility(self) -> None:
        limit = self.max_processes()
        self.nproc_spin.setMaximum(max(limit, self.nproc_spin.value() if self._loading else 1))
        on_gpu = self.device_combo.currentData() == "cuda" or (
            self.device_combo.currentData() == "auto" and (self._machine or {}).get("gpus"))
        self.nproc_label.setText("GPUs (one process each)" if on_gpu else "Processes")
        self.nproc_spin.setToolTip(f"Up to {limit} on this machine")
        self.deepspeed_box.setVisible(self.strategy_combo.currentData() == "deepspeed")
        self.offload_params_check.setEnabled(self.zero_combo.currentData() == "3")
        steps = self.length_combo.currentData() == "steps"
        self.max_steps_spin.setVisible(steps)
        self.epochs_spin.setVisible(not steps)

    def _load(self, spec: dict[str, Any]) -> None:
        dist = spec.get("distributed") or {}
        optim = spec.get("optim") or {}
        _select(self.device_combo, spec.get("device", "auto"))
        self.nproc_spin.setMaximum(max(self.max_processes(), int(dist.get("nproc", 1))))
        self.nproc_spin.setValue(int(dist.get("nproc", 1)))
        _select(self.strategy_combo, dist.get("strategy", "single"))
        _select(self.zero_combo, str(dist.get("zero_stage", 2)))
        self.offload_optimizer_check.setChecked(bool(dist.get("offload_optimizer")))
        self.offload_params_check.setChecked(bool(dist.get("offload_params")))
        _select(self.precision_combo, spec.get("precision", "fp32"))
        self.batch_spin.setValue(int(spec.get("batch_size", 16)))
        self.accum_spin.setValue(int(spec.get("grad_accum", 1)))
        self.checkpointing_check.setChecked(bool(spec.get("activation_checkpointing")))
        by_epochs = spec.get("max_steps") is None and spec.get("epochs") is not None
        _select(self.length_combo, "epochs" if by_epochs else "steps")
        if spec.get("max_steps") is not None:
            self.max_steps_spin.setValue(int(spec["max_steps"]))
        if spec.get("epochs") is not None:
            self.epochs_spin.setValue(float(spec["epochs"]))
        self.lr_edit.setText(f"{float(optim.get('lr', 5e-4)):g}")
        self.schedule_combo.setCurrentText(optim.get("schedule", "linear"))
        self.eval_every_spin.setValue(int(spec.get("eval_every", 50)))
        self.checkpoint_every_spin.setValue(int(spec.get("checkpoint_every", 50)))
        self._update_visibility()

    def write(self, spec: dict[str, Any]) -> None:
        dist = spec.setdefault("distributed", {})
        dist.update(strategy=self.strategy_combo.currentData(), nproc=self.nproc_spin.value(),
                    zero_stage=int(self.zero_combo.currentData()),
                    offload_optimizer=self.offload_optimizer_check.isChecked(),
                    offload_params=self.offload_params_check.isChecked()
                    and self.offload_params_check.isEnabled())
        lr_text = self.lr_edit.text().strip()
        try:
            lr: Any = float(lr_text)
        except ValueError:
            lr = lr_text  # pydantic names the field and the problem next to it
        spec.setdefault("optim", {}).update(lr=lr, schedule=self.schedule_combo.currentText())
        steps = self.length_combo.currentData() == "steps"
        spec.update(device=self.device_combo.currentData(), precision=self.precision_combo.currentData(),
                    batch_size=self.batch_spin.value(), grad_accum=self.accum_spin.value(),
                    activation_checkpointing=self.checkpointing_check.isChecked(),
                    max_steps=self.max_steps_spin.value() if steps else None,
                    epochs=None if steps else round(self.epochs_spin.value(), 2),
                    eval_every=self.eval_every_spin.value(),
                    checkpoint_every=self.checkpoint_every_spin.value())

    def busy(self) -> bool:
        return False  # the estimate is advice: Launch never waits for it

    # -- estimate -----------------------------------------------------------------------

    def spec_changed(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        # Only while shown: the engine answers one request at a time, and an estimate for a
        # new model or dataset takes a while; the data and model checks come first.
        key = repr(launch_spec(spec))
        if not self.isVisible():
            if key != self._estimated_key:
                self.fit.estimate = {}  # about another spec now; Review must not quote it
            return
        if key != self._estimated_key:
            self._estimated_key = key
            self.fit.set_busy()
            self.estimator.trigger()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if self._spec and self._client.is_connected:
            self.spec_changed(self._spec)

    def reestimate(self) -> None:
        """Estimate again at the next spec_changed (after a reconnect)."""
        self._estimated_key = ""

    def _estimate_failed(self, err: Any) -> None:
        self.fit.set_error(error_text(err))

    def _no_estimator(self, _err: Any) -> None:
        self.fit.set_error("this engine cannot estimate memory yet (it has no estimate.fit).")
