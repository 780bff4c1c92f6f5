"""The machines of a multi-node run: one row per node, node 0 (rank 0, the rendezvous) first.

Each row is a host (this machine, or a training host from the Hosts page), its process
count and a remove button, with the host's readiness from its last probe next to it, so a
host without torch or with another Ember version shows up here rather than at launch.
The host list comes from ``hosts.list`` records (``set_hosts``); the rows are plain data
(``nodes()`` / ``set_nodes``), exactly ``distributed.nodes`` of the spec.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.state.style import set_role
from app.widgets.common import label
from engine.api.host_spec import LOCAL

MAX_NODES = 64  # distributed.nodes' max_length
MAX_NPROC = 1024  # NodeSpec.nproc's bound


def host_readiness(name: str, record: dict[str, Any] | None, listed: bool) -> tuple[str, str]:
    """(text, role) saying whether ``name`` can run a recipe now, from its host record.

    ``listed``: the host list has arrived, so a name missing from it is really unknown
    (a host removed since the spec was written), not just not loaded yet.
    """
    if name == LOCAL:
        return "", "muted"  # the machine the engine runs on: nothing to probe
    if record is None:
        return ("⚠ not on the Hosts page: add it there or choose another host", "error") if listed else ("", "muted")
    if ((record.get("key") or {}).get("status")) == "changed":
        return "⚠ its SSH host key changed: check it on the Hosts page", "error"
    facts = record.get("facts")
    if not facts:
        return "⚠ not probed yet — probe it on the Hosts page", "error"
    if facts.get("ready"):
        gpus = facts.get("gpus") or []
        where = f"{len(gpus)} GPU(s)" if gpus else f"CPU only, {facts.get('cpu_count') or '?'} cores"
        return f"✓ ready ({where})", "muted"
    problems = facts.get("problems") or []
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"⚠ {first.get('message', '')}{more}", "error"
    return "⚠ not ready to run Ember: probe it again on the Hosts page", "error"


class NodeRow(QWidget):
    """One node: its rank label, host, processes, remove button, and the host's readiness."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(2)
        self.rank_label = label("", wrap=True)
        self.rank_label.setFixedWidth(120)
        self.host_combo = QComboBox()
        self.host_combo.setMinimumWidth(140)
        self.host_combo.setToolTip("The machine this node runs on: this one, or a training host of the Hosts "
                                   "page. Job file: distributed.nodes[].host.")
        self.nproc_spin = QSpinBox()
        self.nproc_spin.setRange(1, MAX_NPROC)
        self.nproc_spin.setSuffix(" process(es)")
        self.nproc_spin.setToolTip("Processes on this node: one per GPU, or CPU processes. "
                                   "Job file: distributed.nodes[].nproc.")
        self.remove_button = QPushButton("Remove")
        self.readiness = label("", "muted", wrap=True)
        self.readiness.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        grid.addWidget(self.rank_label, 0, 0)
        grid.addWidget(self.host_combo, 0, 1)
        grid.addWidget(self.nproc_spin, 0, 2)
        grid.addWidget(self.remove_button, 0, 3)
        grid.addWidget(self.readiness, 1, 1, 1, 3)
        grid.setColumnStretch(1, 1)

    def host(self) -> str:
        return str(self.host_combo.currentData() or LOCAL)

    def set_hosts(self, names: list[str], wanted: str) -> None:
        """Offer this machine and ``names``; keep ``wanted`` even when it is not among them."""
        self.host_combo.blockSignals(True)
        try:
            self.host_combo.clear()
            self.host_combo.addItem("This machine", LOCAL)
            for name in names:
                self.host_combo.addItem(name, name)
            if self.host_combo.findData(wanted) < 0:
                # A spec naming a host this list lacks (removed, or the list not in yet):
                # keep it, so a duplicated run round-trips and the row says what is wrong.
                self.host_combo.addItem(wanted, wanted)
            self.host_combo.setCurrentIndex(self.host_combo.findData(wanted))
        finally:
            self.host_combo.blockSignals(False)

    def set_readiness(self, text: str, role: str) -> None:
        self.readiness.setText(text)
        set_role(self.readiness, role)
        self.readiness.style().unpolish(self.readiness)
        self.readiness.style().polish(self.readiness)
        self.readiness.setVisible(bool(text))


class NodesEditor(QWidget):
    """The node list; ``changed`` after any edit by the user (not after set_nodes)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.rows: list[NodeRow] = []
        self._records: dict[str, dict[str, Any]] = {}  # training hosts by name
        self.listed = False  # a hosts.list reply has arrived

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(6)
        self._rows_box = QVBoxLayout()
        self._rows_box.setSpacing(8)
        outer.addLayout(self._rows_box)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add node")
        self.add_button.clicked.connect(self._on_add)
        buttons.addWidget(self.add_button)
        buttons.addStretch(1)
        outer.addLayout(buttons)

    # -- hosts ------------------------------------------------------------------------

    def set_hosts(self, records: list[dict[str, Any]]) -> None:
        """The records of ``hosts.list``; only training hosts can be nodes."""
        self._records = {str(r.get("name")): r for r in records
                         if r.get("name") and r.get("role", "training") == "training"}
        self.listed = True
        for row in self.rows:
            self._fill_row(row, row.host())

    def host_names(self) -> list[str]:
        return list(self._records)

    def record(self, name: str) -> dict[str, Any] | None:
        return self._records.get(name)

    def addresses(self) -> dict[str, str]:
        """Host name -> address, for the rendezvous endpoint of the by-hand commands."""
        return {name: str(r.get("address") or name) for name, r in self._records.items()}

    def _fill_row(self, row: NodeRow, host: str) -> None:
        row.set_hosts(self.host_names(), host)
        row.set_readiness(*host_readiness(host, self._records.get(host), self.listed))

    # -- rows -------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        return [{"host": row.host(), "nproc": row.nproc_spin.value()} for row in self.rows]

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        while self.rows:
            self._drop(self.rows[-1])
        for node in nodes:
            self._append(str(node.get("host") or LOCAL), int(node.get("nproc") or 1))
        self._relabel()

    def total_processes(self) -> int:
        return sum(row.nproc_spin.value() for row in self.rows)

    def largest_node(self) -> int:
        return max((row.nproc_spin.value() for row in self.rows), default=1)

    def add_node(self, host: str | None = None, nproc: int = 1) -> NodeRow:
        """A new last row; without ``host``, the first training host no row uses yet."""
        if host is None:
            used = {row.host() for row in self.rows}
            host = next((n for n in self.host_names() if n not in used),
                        LOCAL if LOCAL not in used else (self.host_names() or [LOCAL])[0])
        row = self._append(host, nproc)
        self._relabel()
        return row

    def _append(self, host: str, nproc: int) -> NodeRow:
        row = NodeRow(self)
        self._fill_row(row, host)
        row.nproc_spin.setValue(max(1, min(nproc, MAX_NPROC)))
        row.host_combo.currentIndexChanged.connect(lambda _i, r=row: self._on_host(r))
        row.nproc_spin.valueChanged.connect(self.changed)
        row.remove_button.clicked.connect(lambda _c=False, r=row: self.remove_node(r))
        self.rows.append(row)
        self._rows_box.addWidget(row)
        row.show()  # at once, not at the next turn of the event loop (the layout would wait)
        return row

    def remove_node(self, row: NodeRow) -> None:
        if row in self.rows:
            self._drop(row)
            self._relabel()
            self.changed.emit()

    def _drop(self, row: NodeRow) -> None:
        self.rows.remove(row)
        self._rows_box.removeWidget(row)
        row.hide()
        row.deleteLater()

    def _relabel(self) -> None:
        for i, row in enumerate(self.rows):
            row.rank_label.setText("Node 0: rank 0 / rendezvous" if i == 0 else f"Node {i}")
            row.remove_button.setEnabled(len(self.rows) > 1)  # a run needs a node
        self.add_button.setEnabled(len(self.rows) < MAX_NODES)

    def _on_add(self) -> None:
        self.add_node()
        self.changed.emit()

    def _on_host(self, row: NodeRow) -> None:
        host = row.host()
        row.set_readiness(*host_readiness(host, self._records.get(host), self.listed))
        self.changed.emit()
