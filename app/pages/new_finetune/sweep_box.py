"""Review's sweep card: launch the spec as a sweep, with some of its fields varied (docs/sweeps.md).

One row per field: its path in the spec and what to try, either values ("0.0005, 0.001, 0.003") or a
range ("1e-5 .. 1e-2", with log or int after it: "2 .. 32 int"). ``document(base)`` is the
``train.sweep`` spec, checked by the engine's own SweepSpec; ``problem`` says what is wrong with it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.choice_delegate import ChoiceDelegate
from app.widgets.common import label
from engine.api.sweep_spec import SweepSpec

# Fields people sweep most, offered in the field column (any spec path may be typed instead).
COMMON_FIELDS = ("optim.lr", "method.lora_r", "method.lora_alpha", "method.lora_dropout", "batch_size",
                 "optim.weight_decay", "optim.warmup_steps", "optim.schedule", "method.kind", "max_steps", "seed")
METRICS = (("loss", "min"), ("accuracy", "max"), ("f1", "max"), ("perplexity", "min"))
METHODS = (("grid", "Grid: every combination"), ("random", "Random draws"),
           ("optuna", "Optuna (TPE), optional pruning"))


def _number(text: str) -> Any:
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def parse_values(path: str, text: str) -> dict[str, Any]:
    """One row's SweepParam: 'a, b, c' are values; 'lo .. hi [log] [int]' is a range."""
    text = text.strip()
    if ".." in text:
        lo, _, rest = text.partition("..")
        words = rest.split()
        if not words:
            raise ValueError(f"{path}: a range is written 'low .. high'")
        flags = {w.lower() for w in words[1:]}
        unknown = flags - {"log", "int"}
        if unknown:
            raise ValueError(f"{path}: after a range only 'log' and 'int' may follow, not {', '.join(sorted(unknown))}")
        try:
            low, high = float(lo), float(words[0])
        except ValueError:
            raise ValueError(f"{path}: a range's ends must be numbers ('1e-5 .. 1e-2')") from None
        return {"path": path, "low": low, "high": high, "log": "log" in flags, "integer": "int" in flags}
    values = [_number(v) for v in text.split(",") if v.strip()]
    if not values:
        raise ValueError(f"{path}: give values ('0.001, 0.003') or a range ('1e-5 .. 1e-2 log')")
    return {"path": path, "values": values}


class SweepBox(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(8)
        self.enable_check = QCheckBox("Launch as a sweep: train this spec several times with fields varied")
        self.enable_check.setToolTip("Each trial is a fine-tune of its own in the queue; the best by the metric "
                                     "is marked, and Compare › Sweeps plots setting against metric.")
        column.addWidget(self.enable_check)
        self.body = QWidget()
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Field", "Values, or low .. high [log] [int]"])
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMinimumHeight(120)
        # The field: a spec path typed, or picked from the common ones (app/widgets/choice_delegate.py).
        self.table.setItemDelegateForColumn(0, ChoiceDelegate(COMMON_FIELDS, editable=True, parent=self.table))
        body.addWidget(self.table)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add field")
        self.remove_button = QPushButton("Remove field")
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        body.addLayout(buttons)
        form = QFormLayout()
        self.method_combo = QComboBox()
        for key, text in METHODS:
            self.method_combo.addItem(text, key)
        self.method_combo.setToolTip("Grid: every combination of the values. Random: draws from the values or "
                                     "ranges, seeded. Optuna: its TPE sampler learns from the trials so far. "
                                     "Job file: method.")
        form.addRow("Search", self.method_combo)
        self.trials_spin = QSpinBox()
        self.trials_spin.setRange(1, 256)
        self.trials_spin.setValue(8)
        self.trials_spin.setSuffix(" trials")
        self.trials_spin.setToolTip("How many fine-tunes to run (a grid runs every combination instead). "
                                    "Job file: trials.")
        form.addRow("Trials", self.trials_spin)
        self.metric_combo = QComboBox()
        for name, mode in METRICS:
            self.metric_combo.addItem(f"{name} ({'lower' if mode == 'min' else 'higher'} is better)", (name, mode))
        self.metric_combo.setToolTip("The evaluation metric that picks the best trial (and that pruning "
                                     "compares). Job file: metric, mode.")
        form.addRow("Ranked by", self.metric_combo)
        self.prune_check = QCheckBox("Stop trials early that trail the median at an evaluation")
        self.prune_check.setToolTip("Optuna's median pruner: a trial whose metric at an evaluation is worse than "
                                    "the median of earlier trials there is stopped. Job file: prune.")
        form.addRow("Pruning", self.prune_check)
        self.parallel_spin = QSpinBox()
        self.parallel_spin.setRange(1, 64)
        self.parallel_spin.setValue(2)
        self.parallel_spin.setSuffix(" at once")
        self.parallel_spin.setToolTip("Trials in the queue or running at the same time; the queue's own limits "
                                      "still apply")
        form.addRow("Parallel", self.parallel_spin)
        body.addLayout(form)
        self.note = label("", "muted", wrap=True)
        body.addWidget(self.note)
        column.addWidget(self.body)

        self.enable_check.toggled.connect(self._on_change)
        self.add_button.clicked.connect(lambda: self.add_row())
        self.remove_button.clicked.connect(self._remove_row)
        self.table.itemChanged.connect(self._on_change)
        self.method_combo.currentIndexChanged.connect(self._on_change)
        self.metric_combo.currentIndexChanged.connect(self._on_change)
        for widget in (self.trials_spin, self.parallel_spin):
            widget.valueChanged.connect(self._on_change)
        self.prune_check.toggled.connect(self._on_change)
        self.add_row("optim.lr", "0.0005, 0.001, 0.003")
        self._on_change()

    def enabled(self) -> bool:
        return self.enable_check.isChecked()

    def add_row(self, path: str = "", values: str = "") -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        used = {self.field(r) for r in range(row)}
        self.table.setItem(row, 0, QTableWidgetItem(path or next((f for f in COMMON_FIELDS if f not in used), "")))
        self.table.setItem(row, 1, QTableWidgetItem(values))
        self._on_change()

    def _remove_row(self) -> None:
        row = self.table.currentRow() if self.table.currentRow() >= 0 else self.table.rowCount() - 1
        if row >= 0:
            self.table.removeRow(row)
            self._on_change()

    def field(self, row: int) -> str:
        item = self.table.item(row, 0)
        return item.text().strip() if item is not None else ""

    def params(self) -> list[dict[str, Any]]:
        rows = []
        for r in range(self.table.rowCount()):
            item = self.table.item(r, 1)
            rows.append(parse_values(self.field(r), item.text() if item is not None else ""))
        return rows

    def document(self, base: dict[str, Any]) -> dict[str, Any]:
        """The train.sweep spec for ``base``; ValueError says what is wrong with it."""
        name, mode = self.metric_combo.currentData()
        method = self.method_combo.currentData()
        doc = {"base": base, "params": self.params(), "method": method, "trials": self.trials_spin.value(),
               "metric": name, "mode": mode, "prune": self.prune_check.isChecked() and method == "optuna",
               "parallel": self.parallel_spin.value()}
        try:
            sweep = SweepSpec.model_validate(doc)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(str(first["msg"]).removeprefix("Value error, ")) from None
        doc["trials"] = sweep.total()
        return doc

    def problem(self, base: dict[str, Any]) -> str:
        if not self.enabled():
            return ""
        try:
            self.document(base)
        except ValueError as exc:
            return f"Sweep: {exc}"
        return ""

    def _on_change(self, *_args: Any) -> None:
        self.body.setVisible(self.enabled())
        method = self.method_combo.currentData()
        self.trials_spin.setEnabled(method != "grid")
        self.prune_check.setEnabled(method == "optuna")
        self.changed.emit()

    def describe(self, base: dict[str, Any]) -> str:
        """What Launch will start, in words, or the problem."""
        try:
            doc = self.document(base)
        except ValueError as exc:
            return str(exc)
        fields = ", ".join(p["path"] for p in doc["params"])
        return (f"{doc['trials']} trials varying {fields}, {doc['parallel']} at a time, the best by "
                f"{doc['metric']} ({'lowest' if doc['mode'] == 'min' else 'highest'}).")
