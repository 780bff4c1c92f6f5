"""Step 5, Training: how long and how fast it learns, where it runs, how it is split across processes, and whether it fits.

"Where" is this machine (``distributed.nproc`` processes) or several machines: a node list
(``distributed.nodes``) over the training hosts of the Hosts page, kept live from
``hosts.list`` and the engine's "hosts" events, with the rendezvous settings under it.
"""

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
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.models.spec_tools import DEFAULTS, diff_from_defaults, launch_spec
from app.pages.new_finetune.nodes_editor import NodesEditor
from app.pages.new_finetune.parts import DebouncedRequest, preparing_text, preparing_wait_ms
from app.pages.new_finetune.planner_box import PlannerBox
from app.pages.new_finetune.slurm_box import SlurmBox
from app.pages.new_finetune.speed_box import SpeedBox
from app.text.glossary import field_tooltip
from app.widgets.common import card, label, tip_combo_items
from app.widgets.fit_bars import FitBars
from app.widgets.reflow import Reflow
from app.widgets.wizard_parts import Step, error_text, step_header, with_message
from engine.api.host_spec import LOCAL

STRATEGIES = (("single", "Single process"), ("ddp", "DDP (a full copy per process)"),
              ("fsdp", "FSDP2 (weights sharded across processes)"),
              ("deepspeed", "DeepSpeed ZeRO"))
DEVICES = (("auto", "Automatic (GPU when there is one)"), ("cpu", "CPU"), ("cuda", "CUDA GPU"))
PRECISIONS = (("auto", "auto (bf16 on a capable GPU, else fp32)"), ("fp32", "fp32 (full precision)"), ("bf16", "bf16 (half the activation memory)"),
              ("fp16", "fp16 (CUDA only)"))
SCHEDULES = ("linear", "cosine", "constant", "one_cycle")
ESTIMATE_MS = 300
HOSTS_MS = 150  # several "hosts" events in a row (add, probe) make one hosts.list
RDZV_PORT = 29400
SINGLE, NODES, SLURM = "local", "nodes", "slurm"


def stages_text(pipeline: dict[str, Any] | None) -> str:
    """The estimate's cut in words: "Stages: embeddings + layers 0–7 on process 0 | layers 8–15 + head on
    process 1 (by parameters)"; a split by time says it is measured at launch."""
    if not pipeline or not pipeline.get("stages"):
        return ""
    parts = []
    last = len(pipeline["stages"]) - 1
    for s, (a, b) in enumerate(pipeline["stages"]):
        words = (["embeddings"] if s == 0 else []) + ([f"layers {a}–{b - 1}" if b - a > 1 else f"layer {a}"]
                                                      if b > a else []) + (["head"] if s == last else [])
        parts.append(f"{' + '.join(words) or 'nothing'} on process {pipeline['processes'][s]}")
    how = ("by parameters" if pipeline.get("split_by") != "time"
           else "measured at launch; by parameters it would be this")
    return f"Stages: {' | '.join(parts)} ({how})"


def _combo(items: tuple[tuple[str, str], ...]) -> QComboBox:
    box = QComboBox()
    for key, text in items:
        box.addItem(text, key)
    return box


def _spin(lo: int, hi: int, value: int) -> QSpinBox:
    """A whole-number field. Fields whose spec minimum is 1 start at 0 here: a 0 typed in is shown
    with the reason ("Batch size must be at least 1") instead of silently turning back."""
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setValue(value)
    return box


def _select(box: QComboBox, key: Any) -> None:
    index = box.findData(key)
    if index >= 0:
        box.setCurrentIndex(index)


# The spec paths of the folded "Advanced settings" (the Speed card's included).
ADVANCED = ("precision", "grad_accum", "activation_checkpointing", "activation_offload", "optim.schedule", "eval_every",
            "checkpoint_every", "speed", "data.num_workers", "data.packing", "data.group_by_length")


def _flat_advanced(spec: dict[str, Any]) -> dict[str, Any]:
    """The advanced fields of ``spec`` by path, to compare with the defaults (precision "auto" counts as default)."""
    def at(path: str) -> Any:
        value: Any = spec
        for key in path.split("."):
            value = (value or {}).get(key)
        return value

    return {path: at(path) for path in ADVANCED}


class TrainingStep(Step):
    title = "Training"
    prefixes = ("distributed", "optim", "batch_size", "grad_accum", "max_steps", "epochs",
                "precision", "activation_checkpointing", "activation_offload", "device", "eval_every",
                "checkpoint_every",
                "speed", "data.num_workers", "data.packing", "data.group_by_length")
    patch_requested = Signal(dict)  # a suggestion's spec_patch, to merge into the form
    hosts_page_requested = Signal()  # "Open the Hosts page": the wizard page passes it to its Navigator

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._spec: dict[str, Any] = {}
        self._machine: dict[str, Any] | None = None
        self._estimated_key = ""
        self._first_load = True  # the wizard's opening spec: "auto" there means "the preferred device"
        # Processes a loaded spec or an applied plan asked for, kept above this machine's count (a plan for
        # GPUs elsewhere) until the user picks another device.
        self._kept_nproc = 1

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(14)
        outer.addWidget(step_header("How and where it trains",
                                    "How long and how fast it learns, and where it runs: one process on this "
                                    "machine is the default. The memory estimate updates as you change anything."))
        # Form beside the estimate on a wide window, the estimate under it on a narrow one.
        columns = Reflow(spacing=14, wide=900)
        frame, box = card()
        form = QFormLayout()
        self.where_combo = _combo(((SINGLE, "This machine"), (NODES, "Several machines"),
                                   (SLURM, "A Slurm cluster")))
        form.addRow("Run on", self.where_combo)
        self.where_note = label("", "muted", wrap=True)
        form.addRow("", self.where_note)
        self.multi_box = self._build_multi_box()
        form.addRow(self.multi_box)
        self.slurm_box = SlurmBox(client)
        self.slurm_field = with_message(self.slurm_box, self.message_for("distributed.slurm"))
        form.addRow(self.slurm_field)
        self.device_combo = _combo(DEVICES)
        form.addRow("Device", with_message(self.device_combo, self.message_for("device")))
        self.nproc_spin = _spin(1, os.cpu_count() or 1, 1)
        self.nproc_label = label("Processes")
        self.nproc_field = with_message(self.nproc_spin, self.message_for("distributed.nproc"))
        form.addRow(self.nproc_label, self.nproc_field)
        self._form = form
        self.strategy_combo = _combo(STRATEGIES)
        form.addRow("Strategy", with_message(self.strategy_combo, self.message_for("distributed.strategy")))
        self.tp_spin = _spin(1, 64, 1)
        self.tp_spin.setSuffix(" processes per model")
        self.tp_field = with_message(self.tp_spin, self.message_for("distributed.tensor_parallel"))
        form.addRow("Tensor parallel", self.tp_field)
        pipeline = QWidget()
        row = QHBoxLayout(pipeline)
        row.setContentsMargins(0, 0, 0, 0)
        self.pp_spin = _spin(1, 64, 1)
        self.pp_spin.setSuffix(" stages")
        self.schedule_pp_combo = _combo((("1f1b", "1F1B"), ("gpipe", "GPipe"),
                                         ("interleaved_1f1b", "Interleaved 1F1B")))
        self.microbatch_spin = _spin(1, 1024, 4)
        self.microbatch_spin.setSuffix(" micro-batches")
        self.split_combo = _combo((("params", "split by parameters"), ("time", "split by measured time")))
        self.split_combo.setToolTip(field_tooltip(
            "pipeline parallel", "distributed.pipeline_split",
            "Parameters: each stage holds about as many weights. Measured time: the first process times each "
            "layer, the embeddings and the head before training, and each stage gets about as much work (the "
            "head's large matrix is slow, the embeddings' lookup quick)."))
        for widget in (self.pp_spin, self.schedule_pp_combo, self.microbatch_spin, self.split_combo):
            row.addWidget(widget)
        self.pp_field = with_message(pipeline, self.message_for("distributed.pipeline_parallel"))
        form.addRow("Pipeline parallel", self.pp_field)
        self.pp_note = label("", "muted", wrap=True)
        form.addRow("", self.pp_note)
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
        self._advanced: list[QWidget] = []  # rows folded away until "Advanced settings" is ticked
        self._advanced.append(with_message(self.precision_combo, self.message_for("precision")))
        form.addRow("Precision", self._advanced[-1])
        self.batch_spin = _spin(0, 65536, 16)
        form.addRow("Batch size (per process)", with_message(self.batch_spin, self.message_for("batch_size")))
        self.accum_spin = _spin(0, 4096, 1)
        self._advanced.append(with_message(self.accum_spin, self.message_for("grad_accum")))
        form.addRow("Gradient accumulation", self._advanced[-1])
        self.checkpointing_check = QCheckBox("Activation checkpointing (less memory, ~30% slower)")
        self._advanced.append(with_message(self.checkpointing_check, self.message_for("activation_checkpointing")))
        form.addRow(self._advanced[-1])
        self.act_offload_check = QCheckBox("Activation offload to CPU memory (GPU only)")
        self._advanced.append(with_message(self.act_offload_check, self.message_for("activation_offload")))
        form.addRow(self._advanced[-1])
        length = QWidget()
        row = QHBoxLayout(length)
        row.setContentsMargins(0, 0, 0, 0)
        self.length_combo = _combo((("steps", "Steps"), ("epochs", "Epochs")))
        self.max_steps_spin = _spin(0, 10_000_000, 100)
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
        self._advanced.append(self.schedule_combo)
        form.addRow("Schedule", self.schedule_combo)
        self.eval_every_spin = _spin(0, 10_000_000, 50)
        self._advanced.append(with_message(self.eval_every_spin, self.message_for("eval_every")))
        form.addRow("Evaluate every (steps)", self._advanced[-1])
        self.checkpoint_every_spin = _spin(0, 10_000_000, 50)
        self._advanced.append(with_message(self.checkpoint_every_spin, self.message_for("checkpoint_every")))
        form.addRow("Checkpoint every (steps)", self._advanced[-1])
        # A first user sees a short form; the folded fields keep their values and are summed up here.
        self.advanced_check = QCheckBox("Advanced settings")
        self.advanced_check.setToolTip("Precision, gradient accumulation, activation checkpointing, the learning "
                                       "rate schedule, how often to evaluate and save, and the Speed card. "
                                       "Unfolded by itself when one of them is changed or has a problem.")
        form.addRow(self.advanced_check)
        self.advanced_summary = label("", "muted", wrap=True)
        form.addRow(self.advanced_summary)
        # One-sentence explanations of the terms on this form (app/text/glossary.py).
        tip_combo_items(self.strategy_combo)
        tip_combo_items(self.zero_combo, {"1": "zero_1", "2": "zero_2", "3": "zero_3"})
        tip_combo_items(self.precision_combo)
        self.zero_combo.setToolTip(field_tooltip("DeepSpeed ZeRO", "distributed.zero_stage"))
        self.precision_combo.setToolTip(field_tooltip("mixed precision", "precision"))
        self.offload_optimizer_check.setToolTip(field_tooltip("offload", "distributed.offload_optimizer"))
        self.offload_params_check.setToolTip(field_tooltip("offload", "distributed.offload_params"))
        self.accum_spin.setToolTip(field_tooltip("gradient accumulation", "grad_accum"))
        self.checkpointing_check.setToolTip(field_tooltip("activation checkpointing", "activation_checkpointing"))
        self.act_offload_check.setToolTip(field_tooltip("activation offload", "activation_offload"))
        self.pp_spin.setToolTip(field_tooltip("pipeline parallel", "distributed.pipeline_parallel",
                                              "Language models; with tensor parallel it must divide the processes."))
        self.schedule_pp_combo.setToolTip(field_tooltip("pipeline schedule", "distributed.pipeline_schedule"))
        self.microbatch_spin.setToolTip(field_tooltip("micro-batches", "distributed.pipeline_microbatches",
                                                      "It must divide the batch size."))
        self.tp_spin.setToolTip(field_tooltip("tensor parallel", "distributed.tensor_parallel",
                                              "Language models (Llama, Qwen2, Mistral, SmolLM); it must divide the "
                                              "processes, and the rest train data parallel with FSDP2."))
        self.where_combo.setToolTip(field_tooltip("run on", "distributed.nodes"))
        self.device_combo.setToolTip(field_tooltip("device", "device"))
        self.strategy_combo.setToolTip(field_tooltip("strategy", "distributed.strategy"))
        self.batch_spin.setToolTip(field_tooltip("batch size", "batch_size",
                                                 "At least 1; the effective batch is this × processes × accumulation."))
        for widget in (self.length_combo, self.max_steps_spin, self.epochs_spin):
            widget.setToolTip(field_tooltip("training length", "max_steps or epochs"))
        self.lr_edit.setToolTip(field_tooltip("learning rate", "optim.lr",
                                              "More than 0; set for the task and method until you change it."))
        self.schedule_combo.setToolTip(field_tooltip("schedule", "optim.schedule"))
        self.eval_every_spin.setToolTip(field_tooltip("evaluation interval", "eval_every"))
        self.checkpoint_every_spin.setToolTip(field_tooltip("checkpoint interval", "checkpoint_every"))
        box.addLayout(form)
        box.addWidget(self.general_message)
        box.addStretch(1)
        columns.add(frame, 1)

        frame, box = card()
        box.addWidget(label("Will it fit?", "h2"))
        box.addWidget(label("Estimated memory per device: weights, gradients, optimizer state "
                            "and activations against what the device has.", "muted", wrap=True))
        self.fit = FitBars()
        self.fit.apply_patch.connect(self.patch_requested)
        self.fit_note = label("", "muted", wrap=True)
        box.addWidget(self.fit_note)
        box.addWidget(self.fit)
        self.planner = PlannerBox(client, self.estimate_spec)
        self.planner.apply_patch.connect(self.patch_requested)
        box.addWidget(self.planner)
        box.addStretch(1)
        speed_frame, speed_box = card()
        self.speed = SpeedBox()
        speed_box.addWidget(self.speed)
        for path in ("speed", "data.num_workers", "data.packing", "data.group_by_length"):
            speed_box.addWidget(self.message_for(path))
        right = QVBoxLayout()
        right.setSpacing(14)
        right.addWidget(frame)
        right.addWidget(speed_frame)
        self._advanced.append(speed_frame)
        right.addStretch(1)
        columns.add(right, 1)
        outer.addWidget(columns)
        outer.addStretch(1)

        self.estimator = DebouncedRequest(self, client, "estimate.fit", ESTIMATE_MS,
                                          lambda: {"spec": self.estimate_spec()},
                                          self._on_estimate, self._estimate_failed, self._no_estimator)
        self.hosts_request = DebouncedRequest(self, client, "hosts.list", HOSTS_MS,
                                              lambda: {} if self._client.is_connected else None,
                                              self._on_hosts, self._hosts_failed, self._no_hosts)
        self._hosts_error = ""
        client.subscribe(["hosts"], self._on_hosts_event)
        client.connected.connect(self._on_connected)
        self.where_combo.currentIndexChanged.connect(self._on_where)
        self.device_combo.currentIndexChanged.connect(
            lambda: None if self._loading else setattr(self, "_kept_nproc", 1))
        self.nodes_editor.changed.connect(self._on_form)
        self.slurm_box.changed.connect(self._on_form)
        self.slurm_box.partition_read.connect(
            lambda part: self.planner.set_partition(part, self.slurm_box.nodes_spin.value()))
        self.rdzv_port_spin.valueChanged.connect(self._on_form)
        self.rdzv_host_edit.textChanged.connect(self._on_form)
        self.sync_check.toggled.connect(self._on_form)
        for combo in (self.device_combo, self.strategy_combo, self.zero_combo, self.schedule_pp_combo, self.split_combo,
                      self.precision_combo, self.schedule_combo, self.length_combo):
            combo.currentIndexChanged.connect(self._on_form)
        for spin in (self.nproc_spin, self.tp_spin, self.pp_spin, self.microbatch_spin, self.batch_spin, self.accum_spin, self.max_steps_spin,
                     self.epochs_spin, self.eval_every_spin, self.checkpoint_every_spin):
            spin.valueChanged.connect(self._on_form)
        for check in (self.offload_optimizer_check, self.offload_params_check, self.checkpointing_check,
                      self.act_offload_check):
            check.toggled.connect(self._on_form)
        self.lr_edit.textChanged.connect(self._on_form)
        self.speed.changed.connect(self._on_form)
        self.advanced_check.toggled.connect(self._show_advanced)
        self._show_advanced(False)
        self._update_visibility()
        self.refresh_hosts()

    def _show_advanced(self, on: bool) -> None:
        for widget in self._advanced:
            if self._form.indexOf(widget) >= 0:
                self._form.setRowVisible(widget, on)
            else:
                widget.setVisible(on)
        self.advanced_summary.setVisible(not on)
        self._summarise_advanced()

    def _summarise_advanced(self) -> None:
        """What the folded fields hold, so nothing is hidden from the user."""
        parts = [f"precision {self.precision_combo.currentData()}",
                 f"accumulation {self.accum_spin.value()}",
                 "activation checkpointing" if self.checkpointing_check.isChecked() else "",
                 "activation offload" if self.act_offload_check.isChecked() else "",
                 f"{self.schedule_combo.currentText()} schedule",
                 f"evaluate every {self.eval_every_spin.value()}, checkpoint every "
                 f"{self.checkpoint_every_spin.value()} steps", self.speed.summary()]
        self.advanced_summary.setText("Now: " + ", ".join(p for p in parts if p) + ".")

    def unfold_for(self, paths: list[str]) -> None:
        """Show the advanced settings when any of ``paths`` (spec fields) is one of them."""
        if any(p == a or p.startswith(a + ".") for p in paths for a in ADVANCED):
            self.advanced_check.setChecked(True)

    def _build_multi_box(self) -> QWidget:
        """The node list, and under it the rendezvous settings and the data copy."""
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(6)
        self.no_hosts_box = QWidget()
        row = QHBoxLayout(self.no_hosts_box)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(label("Add a host on the Hosts page first: the other machines of a run are "
                            "training hosts Ember reaches over SSH.", "error", wrap=True), 1)
        self.hosts_page_button = QPushButton("Open the Hosts page")
        self.hosts_page_button.clicked.connect(self._open_hosts_page)
        row.addWidget(self.hosts_page_button)
        column.addWidget(self.no_hosts_box)
        self.nodes_editor = NodesEditor()
        column.addWidget(with_message(self.nodes_editor, self.message_for("distributed.nodes")))
        form = QFormLayout()
        self.rdzv_port_spin = _spin(1024, 65535, RDZV_PORT)
        self.rdzv_port_spin.setToolTip(field_tooltip("rendezvous", "distributed.rdzv_port",
                                                     "Node 0 listens on this TCP port; every node must reach it."))
        form.addRow("Rendezvous port", with_message(self.rdzv_port_spin, self.message_for("distributed.rdzv_port")))
        self.rdzv_host_edit = QLineEdit()
        self.rdzv_host_edit.setPlaceholderText("node 0's address (this machine: as its hosts see it)")
        self.rdzv_host_edit.setToolTip(field_tooltip("rendezvous", "distributed.rdzv_host"))
        form.addRow("Rendezvous address",
                    with_message(self.rdzv_host_edit, self.message_for("distributed.rdzv_host")))
        self.rdzv_note = label("", "muted", wrap=True)
        form.addRow("", self.rdzv_note)
        self.sync_check = QCheckBox("Copy the dataset and model to each host")
        self.sync_check.setChecked(True)
        self.sync_check.setToolTip("Off: the dataset and model paths must already exist on every host")
        form.addRow(with_message(self.sync_check, self.message_for("distributed.sync_data")))
        column.addLayout(form)
        return box

    # -- hosts --------------------------------------------------------------------------

    def refresh_hosts(self) -> None:
        """Ask for hosts.list again (shown, connected, a "hosts" event)."""
        if self._client.is_connected:
            self.hosts_request.trigger()

    def _on_hosts_event(self, _topic: str, _seq: int, _data: dict[str, Any]) -> None:
        self.refresh_hosts()  # a host added, probed, renamed or removed: its name and readiness

    def _on_connected(self, _hello: Any = None) -> None:
        self.refresh_hosts()

    def _on_hosts(self, reply: dict[str, Any]) -> None:
        self._hosts_error = ""
        self.nodes_editor.set_hosts(list((reply or {}).get("hosts") or []))
        self.slurm_box.set_hosts(self.nodes_editor.host_names())
        self._update_visibility()

    def _hosts_failed(self, err: Any) -> None:
        self._hosts_error = f"Could not list the hosts: {error_text(err)}"
        self._update_visibility()

    def _no_hosts(self, _err: Any) -> None:
        self._hosts_error = "This engine cannot run on other machines yet (it has no hosts.list)."
        self._update_visibility()

    def _open_hosts_page(self) -> None:
        self.hosts_page_requested.emit()  # the page opens Hosts (its Navigator)

    # -- form ---------------------------------------------------------------------------

    def several_machines(self) -> bool:
        return self.where_combo.currentData() == NODES

    def on_slurm(self) -> bool:
        return self.where_combo.currentData() == SLURM

    def total_processes(self) -> int:
        if self.on_slurm():
            return self.slurm_box.nodes_spin.value() * self.nproc_spin.value()
        return self.nodes_editor.total_processes() if self.several_machines() else self.nproc_spin.value()

    def estimate_spec(self) -> dict[str, Any]:
        """What estimate.fit gets: the launch spec, with one node's processes for a multi-node run.

        The estimate is per machine and measures this one; for several machines the largest
        node's process count is what one machine's devices must hold.
        """
        spec = launch_spec(self._spec)
        nodes = (spec.get("distributed") or {}).get("nodes") or []
        if nodes:
            spec["distributed"]["nproc"] = max(int(n.get("nproc") or 1) for n in nodes)
        return spec

    def _on_where(self, *_args: Any) -> None:
        if self._loading:
            return
        if self.several_machines():
            if not self.nodes_editor.rows:
                # This machine with the processes it had, and the first host beside it; its
                # count moves into node 0, so the job file does not say it twice.
                self.nodes_editor.add_node(LOCAL, self.nproc_spin.value())
                if self.nodes_editor.host_names():
                    self.nodes_editor.add_node()
                self._set_nproc(1)
        else:
            local = [n["nproc"] for n in self.nodes_editor.nodes() if n["host"] == LOCAL]
            if local:
                self._set_nproc(local[0])
        self._on_form()

    def _set_nproc(self, value: int) -> None:
        self.nproc_spin.setMaximum(max(self.max_processes(), value))
        self.nproc_spin.blockSignals(True)
        self.nproc_spin.setValue(value)
        self.nproc_spin.blockSignals(False)

    def set_machine(self, info: dict[str, Any] | None) -> None:
        self._machine = info
        self.planner.set_machine(info)
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
        # More than one process in all needs a strategy: pick DDP rather than show an error.
        if self.total_processes() > 1 and self.strategy_combo.currentData() == "single":
            _select(self.strategy_combo, "ddp")
        # Split matrices train with FSDP2 (sharding the replicas, when there are several); the spec refuses
        # DeepSpeed, and DDP beside more than one replica.
        split = self.tp_spin.value() > 1 or self.pp_spin.value() > 1
        if split and self.strategy_combo.currentData() in ("ddp", "deepspeed"):
            _select(self.strategy_combo, "fsdp")
        self._update_visibility()
        self._summarise_advanced()
        self.emit_changed()

    def _update_visibility(self) -> None:
        slurm = self.on_slurm()
        limit = 1024 if slurm else self.max_processes()  # a cluster's nodes are not this machine
        self.nproc_spin.setMaximum(max(limit, self._kept_nproc, self.nproc_spin.value() if self._loading else 1))
        on_gpu = self.device_combo.currentData() == "cuda" or (
            self.device_combo.currentData() == "auto" and (self._machine or {}).get("gpus"))
        self.nproc_label.setText("Processes per node" if slurm else "GPUs (one process each)" if on_gpu
                                 else "Processes")
        self.nproc_spin.setToolTip(field_tooltip("processes", "distributed.nproc",
                                                 "On each node the job gets (one per GPU there)." if slurm
                                                 else f"Up to {limit} on this machine."))
        multi = self.several_machines()
        self._form.setRowVisible(self.nproc_field, not multi)
        self._form.setRowVisible(self.multi_box, multi)
        self._form.setRowVisible(self.slurm_field, slurm)
        hosts = self.nodes_editor.host_names()
        listed = self.nodes_editor.listed
        self.no_hosts_box.setVisible(multi and listed and not hosts)
        if slurm:
            note = ("Submitted to the cluster from its login node (sbatch); it waits in the partition's queue "
                    "until its nodes are free. Runs shows its place and the reason it waits.")
        elif self._hosts_error:
            note = self._hosts_error
        elif multi:
            note = ("One process group across these machines; node 0 runs rank 0 and the rendezvous. "
                    "Each host's readiness is from its last probe.")
        else:
            note = ("This machine: every process of the run starts here, on its GPUs or else its CPU cores. "
                    "Several machines adds the training hosts of the Hosts page; a Slurm cluster queues it there.")
        self.where_note.setText(note)
        self.speed.set_on_cpu(not on_gpu and not multi and not slurm)
        nodes = self.nodes_editor.nodes()
        remote_after_local = bool(nodes) and nodes[0]["host"] == LOCAL and any(n["host"] != LOCAL for n in nodes)
        self.rdzv_note.setText("Node 0 is this machine: the other hosts reach it at the address this machine's "
                               "SSH connection to them comes from, unless another is given above."
                               if remote_after_local
                               and not self.rdzv_host_edit.text().strip() else "")
        self.rdzv_note.setVisible(bool(self.rdzv_note.text()))
        self.fit_note.setText(f"For several machines this is one node's estimate: the largest, "
                              f"{self.nodes_editor.largest_node()} process(es), measured against this machine's "
                              "devices. A host's own GPUs are on the Hosts page." if multi else
                              "On a cluster this is one node's estimate, measured against this machine's "
                              "devices: plan for the partition's GPUs under Parallel layouts." if slurm else "")
        self.fit_note.setVisible(multi or slurm)
        self.deepspeed_box.setVisible(self.strategy_combo.currentData() == "deepspeed")
        # Tensor and pipeline parallelism split a language model; they need two processes at least.
        offered = self._spec.get("task") == "causal_lm" and self.total_processes() > 1
        self._form.setRowVisible(self.tp_field, offered or self.tp_spin.value() > 1)
        self._form.setRowVisible(self.pp_field, offered or self.pp_spin.value() > 1)
        self.schedule_pp_combo.setEnabled(self.pp_spin.value() > 1)
        self.split_combo.setEnabled(self.pp_spin.value() > 1)
        self.microbatch_spin.setEnabled(self.pp_spin.value() > 1)
        self.pp_note.setText(self._layout_note())
        self._form.setRowVisible(self.pp_note, bool(self.pp_note.text()))
        self.offload_params_check.setEnabled(self.zero_combo.currentData() == "3")
        steps = self.length_combo.currentData() == "steps"
        self.max_steps_spin.setVisible(steps)
        self.epochs_spin.setVisible(not steps)

    def _layout_note(self) -> str:
        """How the processes divide, and the pipeline's bubble: "2 replicas × 2 stages × 2-way split; the
        pipeline idles 20% of each step (1F1B, 4 micro-batches)"."""
        tp, pp, procs = self.tp_spin.value(), self.pp_spin.value(), self.total_processes()
        if tp == 1 and pp == 1:
            return ""
        if procs % (tp * pp):
            return f"{tp * pp} processes per model do not divide {procs} processes."
        parts = [f"{procs // (tp * pp)} replica(s)"] + ([f"{pp} stages"] if pp > 1 else []) + \
            ([f"{tp}-way split"] if tp > 1 else [])
        note = " × ".join(parts)
        if pp > 1:
            m = self.microbatch_spin.value()
            v = 2 if self.schedule_pp_combo.currentData() == "interleaved_1f1b" else 1
            idle = (pp - 1) / (v * m + pp - 1)
            note += (f"; the pipeline idles {100 * idle:.0f}% of each step ({self.schedule_pp_combo.currentText()}, "
                     f"{m} micro-batches: (p−1)/({'2' if v == 2 else ''}m+p−1))")
            stages = stages_text((self.fit.estimate or {}).get("pipeline"))
            if stages:
                note += ". " + stages
        return note + "."

    def _on_estimate(self, reply: dict[str, Any]) -> None:
        self.fit.set_estimate(reply)
        self.pp_note.setText(self._layout_note())  # the stages the estimate worked out
        self._form.setRowVisible(self.pp_note, bool(self.pp_note.text()))

    def _load(self, spec: dict[str, Any]) -> None:
        dist = spec.get("distributed") or {}
        optim = spec.get("optim") or {}
        nodes = list(dist.get("nodes") or [])
        self.nodes_editor.set_nodes(nodes)
        if dist.get("slurm"):
            self.slurm_box.set_value(dist["slurm"])
        _select(self.where_combo, SLURM if dist.get("slurm") else NODES if nodes else SINGLE)
        self.rdzv_port_spin.setValue(int(dist.get("rdzv_port") or RDZV_PORT))
        self.rdzv_host_edit.setText(str(dist.get("rdzv_host") or ""))
        self.sync_check.setChecked(bool(dist.get("sync_data", True)))
        device = spec.get("device", "auto")
        if self._first_load and device == "auto":
            from app.state.prefs import prefs

            device = prefs().get("default_device")  # the Preferences card's default hardware
        self._first_load = False
        _select(self.device_combo, device)
        self._kept_nproc = int(dist.get("nproc", 1))
        self.nproc_spin.setMaximum(max(self.max_processes(), self._kept_nproc))
        self.nproc_spin.setValue(int(dist.get("nproc", 1)))
        _select(self.strategy_combo, dist.get("strategy", "single"))
        self.tp_spin.setValue(int(dist.get("tensor_parallel", 1)))
        self.pp_spin.setValue(int(dist.get("pipeline_parallel", 1)))
        _select(self.schedule_pp_combo, dist.get("pipeline_schedule", "1f1b"))
        _select(self.split_combo, dist.get("pipeline_split", "params"))
        self.microbatch_spin.setValue(int(dist.get("pipeline_microbatches", 4)))
        _select(self.zero_combo, str(dist.get("zero_stage", 2)))
        self.offload_optimizer_check.setChecked(bool(dist.get("offload_optimizer")))
        self.offload_params_check.setChecked(bool(dist.get("offload_params")))
        _select(self.precision_combo, spec.get("precision", "auto"))
        self.batch_spin.setValue(int(spec.get("batch_size", 16)))
        self.accum_spin.setValue(int(spec.get("grad_accum", 1)))
        self.checkpointing_check.setChecked(bool(spec.get("activation_checkpointing")))
        self.act_offload_check.setChecked(bool(spec.get("activation_offload")))
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
        self.speed.load(spec)
        self.unfold_for(list(diff_from_defaults(_flat_advanced(spec), _flat_advanced(DEFAULTS))))
        self._summarise_advanced()
        self._update_visibility()

    def write(self, spec: dict[str, Any]) -> None:
        dist = spec.setdefault("distributed", {})
        dist.update(strategy=self.strategy_combo.currentData(), nproc=self.nproc_spin.value(),
                    zero_stage=int(self.zero_combo.currentData()),
                    offload_optimizer=self.offload_optimizer_check.isChecked(),
                    offload_params=self.offload_params_check.isChecked()
                    and self.offload_params_check.isEnabled(), tensor_parallel=self.tp_spin.value(),
                    pipeline_parallel=self.pp_spin.value(), pipeline_schedule=self.schedule_pp_combo.currentData(),
                    pipeline_microbatches=self.microbatch_spin.value(),
                    pipeline_split=self.split_combo.currentData(),
                    nodes=self.nodes_editor.nodes() if self.several_machines() else [],
                    slurm=self.slurm_box.value() if self.on_slurm() else None)
        if self.several_machines():
            # On this machine alone these say nothing; a loaded spec's values stay as they were.
            dist.update(rdzv_port=self.rdzv_port_spin.value(),
                        rdzv_host=self.rdzv_host_edit.text().strip() or None,
                        sync_data=self.sync_check.isChecked())
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
                    activation_offload=self.act_offload_check.isChecked(),
                    max_steps=self.max_steps_spin.value() if steps else None,
                    epochs=None if steps else round(self.epochs_spin.value(), 2),
                    eval_every=self.eval_every_spin.value(),
                    checkpoint_every=self.checkpoint_every_spin.value())
        self.speed.write(spec)  # after the Data step's write: it adds to spec["data"]

    def busy(self) -> bool:
        return False  # the estimate is advice: Launch never waits for it

    def show_errors(self, errors: dict[str, list[str]]) -> None:
        self.unfold_for(list(errors))  # a problem is never folded away
        super().show_errors(errors)

    # -- estimate -----------------------------------------------------------------------

    def spec_changed(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        self._update_visibility()  # the task decides whether tensor parallelism is offered
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
        self.refresh_hosts()
        if self._spec and self._client.is_connected:
            self.spec_changed(self._spec)

    def reestimate(self) -> None:
        """Estimate again at the next spec_changed (after a reconnect)."""
        self._estimated_key = ""

    def _estimate_failed(self, err: Any) -> None:
        wait = preparing_wait_ms(err)
        if wait is not None:  # the built-in model is written first: say so, and ask again
            self.fit.set_error(preparing_text(err.data["preparing"]))
            self.estimator.again_in(wait)
            return
        self.fit.set_error(error_text(err))

    def _no_estimator(self, _err: Any) -> None:
        self.fit.set_error("this engine cannot estimate memory yet (it has no estimate.fit).")
