"""The Training step's parallelism planner: the layouts that fit the GPUs the user names (estimate.plan),
fastest first, and Apply to put one into the form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.pages.new_finetune.parts import preparing_text, preparing_wait_ms
from app.text.glossary import field_tooltip
from app.widgets.common import label
from app.widgets.wizard_parts import error_text

GiB = 1 << 30
COLUMNS = ("Layout", "Memory per GPU", "Fits", "Speed (GPUs)")
VERDICTS = {"fits": "fits", "tight": "tight", "will_not_fit": "does not fit"}


class PlannerBox(QWidget):
    """``set_machine(info)`` fills in this machine's GPUs; Plan asks the engine; emits ``apply_patch``."""

    apply_patch = Signal(dict)

    def __init__(self, client: Any, spec: Callable[[], dict[str, Any]], parent: QWidget | None = None):
        super().__init__(parent)
        self._client, self._spec = client, spec
        self.reply: dict[str, Any] = {}
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 6, 0, 0)
        column.setSpacing(6)
        column.addWidget(label("Parallel layouts", "h3"))
        # Without a GPU here the planner is folded away: a CPU user sees one line and a button, not
        # "8 GPUs / 80 GB each"; hosts and clusters with GPUs are still a click away.
        self.cpu_note = label("This machine has no GPU: a run here trains on its CPU cores. To spread a run over "
                              "the GPUs of a host or a cluster, plan it here.", "muted", wrap=True)
        self.open_button = QPushButton("Plan for GPUs…")
        self.open_button.setToolTip("Show the planner: every layout for the GPUs you name")
        self.open_button.clicked.connect(lambda: self.expand(True))
        column.addWidget(self.cpu_note)
        column.addWidget(self.open_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.body = QWidget()
        column = QVBoxLayout(self.body)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(6)
        self.layout().addWidget(self.body)
        column.addWidget(label("Every way to spread this run over the GPUs you name (data parallel, ZeRO, tensor "
                               "and pipeline parallel, checkpointing, offload), estimated; the fastest that fits "
                               "first.", "muted", wrap=True))
        row = QHBoxLayout()
        self.gpus_spin = _spin(1, 4096, 8, " GPUs")
        self.memory_spin = _spin(1, 4096, 80, " GB each")
        self.per_node_spin = _spin(1, 64, 8, " per machine")
        self.plan_button = QPushButton("Plan")
        for widget in (self.gpus_spin, self.memory_spin, self.per_node_spin, self.plan_button):
            row.addWidget(widget)
        row.addStretch(1)
        column.addLayout(row)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in range(1, len(COLUMNS)):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setMinimumHeight(180)
        self.table.hide()
        column.addWidget(self.table)
        bottom = QHBoxLayout()
        self.status = label("", "muted", wrap=True)
        bottom.addWidget(self.status, 1)
        self.apply_button = QPushButton("Apply layout")
        self.apply_button.setEnabled(False)
        bottom.addWidget(self.apply_button)
        column.addLayout(bottom)
        self.gpus_spin.setToolTip(field_tooltip("processes", "distributed.nproc",
                                                "The GPUs the run will train on: this machine's, a host's, "
                                                "several hosts' or a cluster partition's."))
        self.memory_spin.setToolTip("Each GPU's memory in GB (as nvidia-smi shows it, in GiB): 24, 40, 48, 80, 141…")
        self.per_node_spin.setToolTip("GPUs in each machine: tensor parallelism stays within one.")
        self.plan_button.setToolTip("Estimate every layout for these GPUs (the model is measured, not loaded).")
        self.apply_button.setToolTip("Put the selected layout into the form: strategy, processes, tensor and "
                                     "pipeline parallel, checkpointing and offload.")
        self.table.setToolTip("Speed is in GPUs' worth of work: the GPUs times each technique's usual efficiency, "
                              "a ranking rather than a measurement.")
        self.plan_button.clicked.connect(self.plan)
        self.apply_button.clicked.connect(self._apply)
        self.table.itemSelectionChanged.connect(
            lambda: self.apply_button.setEnabled(bool(self.table.selectedItems())))
        self.expand(True)  # until this machine's facts say it has no GPU

    def expand(self, on: bool = True) -> None:
        """Show the planner's controls (``on``), or fold them behind Plan for GPUs…."""
        self.body.setVisible(on)
        self.cpu_note.setVisible(not on)
        self.open_button.setVisible(not on)

    def set_machine(self, info: dict[str, Any] | None) -> None:
        """Start from this machine's GPUs when it has some; folded when it has none."""
        gpus = (info or {}).get("gpus") or []
        self.expand(bool(gpus))
        if gpus:
            self.gpus_spin.setValue(len(gpus))
            self.memory_spin.setValue(max(1, round(min(int(g.get("memory_total") or 0) for g in gpus) / GiB)))

    def set_partition(self, partition: dict[str, Any], nodes: int) -> None:
        """Plan for a Slurm partition's GPUs: ``nodes`` of its machines (its GPU memory is not in sinfo)."""
        per_node = int(partition.get("gpus_per_node") or 0)
        if per_node:
            self.expand()
            self.per_node_spin.setValue(per_node)
            self.gpus_spin.setValue(per_node * max(1, nodes))
            self.status.setText(f"GPUs from Slurm partition {partition.get('name')}: {nodes} node(s) × {per_node}; "
                                "set each GPU's memory, then Plan.")

    def plan(self) -> None:
        params = {"spec": self._spec(), "gpus": self.gpus_spin.value(), "gpu_memory_gb": self.memory_spin.value(),
                  "gpus_per_node": self.per_node_spin.value()}
        self.status.setText("Planning…")
        self.plan_button.setEnabled(False)
        self._client.request("estimate.plan", params, self._show, self._failed)

    def _failed(self, err: Any) -> None:
        wait = preparing_wait_ms(err)
        if wait is not None:  # the built-in model is written first: say so, and plan once it is ready
            self.status.setText(preparing_text(err.data["preparing"]))
            QTimer.singleShot(wait, self, self.plan)
            return
        self.plan_button.setEnabled(True)
        self.status.setText(f"No plan: {error_text(err)}")

    def _show(self, reply: dict[str, Any]) -> None:
        self.plan_button.setEnabled(True)
        self.reply = reply
        plans = reply.get("plans") or []
        self.table.setRowCount(len(plans))
        for r, p in enumerate(plans):
            name = ("★ " if p.get("recommended") else "") + str(p.get("layout", ""))
            memory = f"{p.get('memory_per_gpu', 0) / GiB:.1f} of {p.get('capacity', 0) / GiB:.0f} GB"
            cells = (name, memory, VERDICTS.get(p.get("verdict"), str(p.get("verdict"))),
                     f"{p.get('throughput', 0):.2f}")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        self.table.setVisible(bool(plans))
        if plans and plans[0].get("recommended"):
            self.table.selectRow(0)
        shown = f" (the first {len(plans)} shown)" if len(plans) < int(reply.get("considered") or 0) else ""
        self.status.setText(f"{reply.get('fitting', 0)} of {reply.get('considered', 0)} layouts fit{shown}. "
                            + " ".join(reply.get("notes") or []))

    def selected_plan(self) -> dict[str, Any] | None:
        rows = self.table.selectionModel().selectedRows()
        plans = self.reply.get("plans") or []
        return plans[rows[0].row()] if rows and rows[0].row() < len(plans) else None

    def _apply(self) -> None:
        chosen = self.selected_plan()
        if chosen is not None:
            self.apply_patch.emit(chosen["spec_patch"])


def _spin(lo: int, hi: int, value: int, suffix: str) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(lo, hi)
    spin.setValue(value)
    spin.setSuffix(suffix)
    return spin
