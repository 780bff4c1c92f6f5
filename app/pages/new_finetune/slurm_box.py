"""The Training step's Slurm settings: the cluster (its login node), a partition read from the cluster
itself (hosts.slurm: nodes, CPUs, GPUs, time limit), and what the job asks Slurm for.

The values are exactly ``distributed.slurm`` of the spec (``value()`` / ``set_value``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.text.glossary import field_tooltip
from app.widgets.common import label
from app.widgets.wizard_parts import error_text
from engine.api.host_spec import LOCAL

DEFAULT_PARTITION = ""  # the cluster's own default


def partition_text(p: dict[str, Any]) -> str:
    """One partition in words: 'gpu: 4 nodes (2 idle), 64 CPUs and 8 GPUs each, up to 48 h'."""
    gpus = f" and {p['gpus_per_node']} GPUs" if p.get("gpus_per_node") else ", no GPUs"
    limit = p.get("max_minutes")
    until = (f", up to {limit // 60} h" if limit and limit % 60 == 0 else f", up to {limit} min" if limit
             else ", no time limit")
    state = "" if p.get("up") else " — down"
    return (f"{p['name']}{' (default)' if p.get('default') else ''}: {p.get('nodes', 0)} node(s) "
            f"({p.get('idle_nodes', 0)} idle), {p.get('cpus_per_node', 0)} CPUs{gpus} each{until}{state}")


def _spin(lo: int, hi: int, suffix: str, special: str = "") -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(lo, hi)
    spin.setSuffix(suffix)
    if special:
        spin.setSpecialValueText(special)  # shown at the minimum: "leave it to Slurm"
    return spin


class SlurmBox(QWidget):
    """``changed`` after an edit by the user; ``partition_read(partition)`` once the cluster answered."""

    changed = Signal()
    partition_read = Signal(dict)

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self.partitions: list[dict[str, Any]] = []
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.cluster_combo = QComboBox()
        self.cluster_combo.setToolTip(field_tooltip("slurm", "distributed.slurm.cluster",
                                                    "The cluster's login node: this machine, or a host of the "
                                                    "Hosts page where sinfo and sbatch work."))
        self.read_button = QPushButton("Read partitions")
        self.read_button.setToolTip("Ask the cluster (sinfo) for its partitions, nodes, GPUs and limits")
        row.addWidget(self.cluster_combo, 1)
        row.addWidget(self.read_button)
        form.addRow("Login node", row)
        self.partition_combo = QComboBox()
        self.partition_combo.setEditable(True)
        self.partition_combo.setToolTip(field_tooltip("slurm", "distributed.slurm.partition",
                                                      "Empty: the cluster's default partition."))
        form.addRow("Partition", self.partition_combo)
        self.partition_note = label("Read the partitions to see what each offers.", "muted", wrap=True)
        form.addRow("", self.partition_note)
        self.nodes_spin = _spin(1, 1024, " node(s)")
        self.gpus_spin = _spin(0, 64, " GPU(s) per node", "no GPUs")
        self.cpus_spin = _spin(0, 4096, " CPUs per node", "the partition's default")
        self.time_spin = _spin(0, 525600, " min", "the partition's default")
        self.account_edit = QLineEdit()
        self.qos_edit = QLineEdit()
        for text, widget, path, why in (
                ("Nodes", self.nodes_spin, "nodes", "Machines the job takes; each runs the processes above."),
                ("GPUs", self.gpus_spin, "gpus_per_node", "GPUs asked for on each node (--gpus-per-node)."),
                ("CPUs", self.cpus_spin, "cpus_per_node", "CPU cores asked for on each node."),
                ("Time limit", self.time_spin, "time_limit", "Slurm ends the job then; the run is told two "
                                                              "minutes before, saves a checkpoint and can resume."),
                ("Account", self.account_edit, "account", "The account charged (sbatch --account)."),
                ("QOS", self.qos_edit, "qos", "The quality of service (sbatch --qos).")):
            widget.setToolTip(field_tooltip("slurm", f"distributed.slurm.{path}", why))
            form.addRow(text, widget)
        self.read_button.clicked.connect(self.read_partitions)
        self.cluster_combo.currentIndexChanged.connect(self._on_cluster)
        self.partition_combo.currentTextChanged.connect(self._on_partition)
        for spin in (self.nodes_spin, self.gpus_spin, self.cpus_spin, self.time_spin):
            spin.valueChanged.connect(self.changed)
        for edit in (self.account_edit, self.qos_edit):
            edit.textEdited.connect(self.changed)
        self.set_hosts([])

    # -- the cluster ---------------------------------------------------------------------

    def set_hosts(self, names: list[str]) -> None:
        """Offer this machine and the training hosts; keep the current choice."""
        current = self.cluster()
        self.cluster_combo.blockSignals(True)
        self.cluster_combo.clear()
        self.cluster_combo.addItem("This machine", LOCAL)
        for name in names:
            self.cluster_combo.addItem(name, name)
        if self.cluster_combo.findData(current) < 0:
            self.cluster_combo.addItem(current, current)
        self.cluster_combo.setCurrentIndex(self.cluster_combo.findData(current))
        self.cluster_combo.blockSignals(False)

    def cluster(self) -> str:
        return str(self.cluster_combo.currentData() or LOCAL) if self.cluster_combo.count() else LOCAL

    def _on_cluster(self) -> None:
        self.partitions = []
        self.partition_note.setText("Read the partitions to see what each offers.")
        self.changed.emit()

    def read_partitions(self) -> None:
        self.read_button.setEnabled(False)
        self.partition_note.setText(f"Asking {self.cluster_combo.currentText()} (sinfo)…")
        self._client.request("hosts.slurm", {"name": self.cluster()}, self._show, self._failed)

    def _failed(self, err: Any) -> None:
        self.read_button.setEnabled(True)
        self.partition_note.setText(f"Could not read the partitions: {error_text(err)}")

    def _show(self, reply: dict[str, Any]) -> None:
        self.read_button.setEnabled(True)
        self.partitions = list(reply.get("partitions") or [])
        wanted = self.partition_combo.currentText()
        self.partition_combo.blockSignals(True)
        self.partition_combo.clear()
        self.partition_combo.addItem(DEFAULT_PARTITION)
        for p in self.partitions:
            self.partition_combo.addItem(p["name"])
        self.partition_combo.setCurrentText(wanted)
        self.partition_combo.blockSignals(False)
        self._on_partition(wanted, emit=False)

    def chosen_partition(self) -> dict[str, Any] | None:
        name = self.partition_combo.currentText().strip()
        return next((p for p in self.partitions if p["name"] == name or (not name and p.get("default"))), None)

    def _on_partition(self, _text: str = "", emit: bool = True) -> None:
        part = self.chosen_partition()
        if part is not None:
            self.partition_note.setText(partition_text(part))
            self.partition_read.emit(part)
        elif self.partitions:
            names = ", ".join(p["name"] for p in self.partitions)
            self.partition_note.setText(f"The cluster has no such partition; it has {names}.")
        if emit:
            self.changed.emit()

    # -- the spec ------------------------------------------------------------------------

    def value(self) -> dict[str, Any]:
        return {"cluster": self.cluster(), "partition": self.partition_combo.currentText().strip(),
                "nodes": self.nodes_spin.value(), "gpus_per_node": self.gpus_spin.value(),
                "cpus_per_node": self.cpus_spin.value(), "time_limit": self.time_spin.value(),
                "account": self.account_edit.text().strip(), "qos": self.qos_edit.text().strip()}

    def set_value(self, slurm: dict[str, Any]) -> None:
        cluster = str(slurm.get("cluster") or LOCAL)
        if self.cluster_combo.findData(cluster) < 0:
            self.cluster_combo.addItem(cluster, cluster)
        self.cluster_combo.blockSignals(True)
        self.cluster_combo.setCurrentIndex(self.cluster_combo.findData(cluster))
        self.cluster_combo.blockSignals(False)
        self.partition_combo.blockSignals(True)
        self.partition_combo.setCurrentText(str(slurm.get("partition") or ""))
        self.partition_combo.blockSignals(False)
        for spin, key, default in ((self.nodes_spin, "nodes", 1), (self.gpus_spin, "gpus_per_node", 0),
                                   (self.cpus_spin, "cpus_per_node", 0), (self.time_spin, "time_limit", 0)):
            spin.blockSignals(True)
            spin.setValue(int(slurm.get(key) or default))
            spin.blockSignals(False)
        self.account_edit.setText(str(slurm.get("account") or ""))
        self.qos_edit.setText(str(slurm.get("qos") or ""))
