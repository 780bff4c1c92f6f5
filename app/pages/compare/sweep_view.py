"""Compare › Sweeps: a sweep's trials as one picture of setting against metric.

Parallel coordinates: an axis per swept field and one for the metric, a line per trial (the best drawn
thick, pruned and failed trials faint), each axis scaled to the values tried (log where the values span
more than a decade). Scatter: one field against the metric. Under it the trials' table, best first;
double-click opens a trial's run on the Monitor. Kept live from the sweep's ``trial`` events.
"""

from __future__ import annotations

import math
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.state.navigation import Navigator
from app.state.style import colour
from app.widgets.charts import PALETTE, use_theme_colours
from app.widgets.common import label
from app.widgets.wizard_parts import error_text
from engine.api.job_terms import SWEEP

VIEWS = (("parallel", "Parallel coordinates"), ("scatter", "Scatter: a field against the metric"))
FAINT = ("pruned", "failed", "stopped")


def axis_position(values: list[Any], value: Any) -> float:
    """Where ``value`` sits on an axis of ``values``, 0 to 1: numbers by size (log when they span more than
    a decade and are all positive), anything else by its place among the distinct values."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(values) and numbers:
        lo, hi = min(numbers), max(numbers)
        if hi == lo:
            return 0.5
        if lo > 0 and hi / lo > 10:
            return (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return (value - lo) / (hi - lo)
    distinct = sorted({str(v) for v in values})
    return 0.5 if len(distinct) == 1 else distinct.index(str(value)) / (len(distinct) - 1)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class SweepView(QWidget):
    def __init__(self, engine: Any, nav: Navigator, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = engine.client
        self.nav = nav
        self.jobs = engine.jobs
        self.sweep_id: str | None = None
        self.record: dict[str, Any] = {}
        self._sub: Any = None
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 8, 0, 0)
        column.setSpacing(8)
        column.addWidget(label("A sweep's trials, setting against metric: one line per trial across the fields "
                               "it varied, the best drawn thick. Double-click a trial to open its run.",
                               "muted", wrap=True))
        row = QHBoxLayout()
        self.sweep_combo = QComboBox()
        self.sweep_combo.setMinimumWidth(260)
        self.view_combo = QComboBox()
        for key, text in VIEWS:
            self.view_combo.addItem(text, key)
        self.field_combo = QComboBox()
        for widget in (label("Sweep"), self.sweep_combo, self.view_combo, self.field_combo):
            row.addWidget(widget)
        row.addStretch(1)
        column.addLayout(row)
        self.summary = label("", "", wrap=True)
        column.addWidget(self.summary)
        use_theme_colours()
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(280)
        self.plot.showGrid(x=False, y=True, alpha=0.2)
        column.addWidget(self.plot, 2)
        self.table = QTableWidget(0, 0)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.cellDoubleClicked.connect(self._open_trial)
        column.addWidget(self.table, 1)
        self.sweep_combo.currentIndexChanged.connect(lambda: self.show_sweep(self.sweep_combo.currentData()))
        self.view_combo.currentIndexChanged.connect(self.render)
        self.field_combo.currentIndexChanged.connect(self.render)
        self.jobs.jobs_reset.connect(self.fill_sweeps)
        self.jobs.job_changed.connect(self._on_job)
        if self.jobs.loaded:
            self.fill_sweeps()

    # -- which sweep ------------------------------------------------------------------------

    def fill_sweeps(self) -> None:
        sweeps = self.jobs.by_kind(SWEEP)
        current = self.sweep_id
        self.sweep_combo.blockSignals(True)
        self.sweep_combo.clear()
        for job in sweeps:
            self.sweep_combo.addItem(f"{job.get('name') or job['id']} ({job.get('state')})", job["id"])
        index = self.sweep_combo.findData(current)
        self.sweep_combo.setCurrentIndex(index if index >= 0 else 0)
        self.sweep_combo.blockSignals(False)
        if self.sweep_combo.count() and self.sweep_combo.currentData() != current:
            self.show_sweep(self.sweep_combo.currentData())
        if not sweeps:
            self.summary.setText("No sweep yet: on the fine-tune wizard's Review, tick 'Launch as a sweep'.")

    def _on_job(self, job: dict[str, Any]) -> None:
        if job.get("kind") != SWEEP:
            return
        index = self.sweep_combo.findData(job.get("id"))
        if index < 0:
            self.fill_sweeps()
            return
        self.sweep_combo.setItemText(index, f"{job.get('name') or job['id']} ({job.get('state')})")
        if job.get("id") == self.sweep_id:
            self.reload()

    def show_sweep(self, sweep_id: str | None) -> None:
        if not sweep_id:
            return
        if self.sweep_combo.findData(sweep_id) >= 0:
            self.sweep_combo.blockSignals(True)
            self.sweep_combo.setCurrentIndex(self.sweep_combo.findData(sweep_id))
            self.sweep_combo.blockSignals(False)
        if self._sub is not None:
            self._client.unsubscribe(self._sub)
        self.sweep_id = sweep_id
        self._sub = self._client.subscribe([f"run/{sweep_id}/trial"], lambda *_a: self.reload())
        self.reload()

    def reload(self) -> None:
        if self.sweep_id:
            sweep_id = self.sweep_id
            self._client.request("jobs.get", {"id": sweep_id}, lambda r: self._got(sweep_id, r),
                                 lambda err: self.summary.setText(f"Could not read the sweep: {error_text(err)}"))

    def _got(self, sweep_id: str, record: dict[str, Any]) -> None:
        if sweep_id != self.sweep_id:
            return
        self.record = record
        fields = [p["path"] for p in (record.get("spec") or {}).get("params") or []]
        if [self.field_combo.itemText(i) for i in range(self.field_combo.count())] != fields:
            self.field_combo.blockSignals(True)
            self.field_combo.clear()
            self.field_combo.addItems(fields)
            self.field_combo.blockSignals(False)
        self.render()

    # -- the picture --------------------------------------------------------------------------

    def trials(self) -> list[dict[str, Any]]:
        return list(((self.record.get("sweep") or {}).get("trials")) or [])

    def best(self) -> int | None:
        return (self.record.get("sweep") or {}).get("best")

    def render(self) -> None:
        spec = self.record.get("spec") or {}
        fields = [p["path"] for p in spec.get("params") or []]
        metric, mode = spec.get("metric", "loss"), spec.get("mode", "min")
        trials = self.trials()
        self.field_combo.setVisible(self.view_combo.currentData() == "scatter")
        counts = {s: sum(t["state"] == s for t in trials) for s in ("done", "pruned", "failed", "running")}
        best = next((t for t in trials if t["number"] == self.best()), None)
        self.summary.setText(
            f"{len(trials)} of {spec.get('trials', '?')} trials: {counts['done']} done, {counts['pruned']} pruned, "
            f"{counts['failed']} failed, {counts['running']} running. " +
            (f"Best: trial #{best['number']}, {metric} {_fmt(best['value'])} "
             f"({', '.join(f'{k}={_fmt(v)}' for k, v in best['settings'].items())})." if best
             else f"No trial has finished with a {metric} yet."))
        self._fill_table(fields, metric, mode, trials)
        self.plot.clear()
        scored = [t for t in trials if t.get("value") is not None]
        if not scored:
            return
        if self.view_combo.currentData() == "scatter":
            self._scatter(self.field_combo.currentText() or fields[0], metric, scored)
        else:
            self._parallel(fields, metric, scored)

    def _style(self, trial: dict[str, Any]) -> tuple[Any, int]:
        if trial["number"] == self.best():
            return pg.mkPen(PALETTE[0], width=4), 3
        if trial["state"] in FAINT:
            return pg.mkPen(colour("chart-grid"), width=1, style=Qt.PenStyle.DashLine), 1
        return pg.mkPen(PALETTE[1], width=2), 2

    def _parallel(self, fields: list[str], metric: str, trials: list[dict[str, Any]]) -> None:
        axes = fields + [metric]
        columns = {f: [t["settings"].get(f) for t in trials] for f in fields}
        columns[metric] = [t["value"] for t in trials]
        for trial in sorted(trials, key=lambda t: (t["number"] == self.best(), t["state"] not in FAINT)):
            ys = [axis_position(columns[f], trial["settings"].get(f)) for f in fields]
            ys.append(axis_position(columns[metric], trial["value"]))
            pen, z = self._style(trial)
            item = self.plot.plot(list(range(len(axes))), ys, pen=pen, symbol="o", symbolSize=6,
                                  symbolBrush=pen.color())
            item.setZValue(z)
        for i, name in enumerate(axes):
            self.plot.addItem(pg.InfiniteLine(pos=i, angle=90, pen=pg.mkPen(colour("chart-fg"), width=1)))
            values = columns[name]
            distinct = sorted({v for v in values if v is not None}, key=lambda v: axis_position(values, v))
            if len(distinct) > 4:  # many numbers: the ends say the scale, the lines the rest
                distinct = [distinct[0], distinct[-1]]
            for v in distinct:
                text = pg.TextItem(_fmt(v), color=colour("chart-fg"), anchor=(0, 0.5))
                text.setPos(i + 0.03, axis_position(values, v))
                self.plot.addItem(text)
        ticks = [(i, name) for i, name in enumerate(axes)]
        self.plot.getAxis("bottom").setTicks([ticks])
        self.plot.getAxis("left").setTicks([[(0, "low"), (1, "high")]])
        self.plot.setXRange(-0.2, len(axes) - 0.6)
        self.plot.setYRange(-0.08, 1.08)

    def _scatter(self, field: str, metric: str, trials: list[dict[str, Any]]) -> None:
        values = [t["settings"].get(field) for t in trials]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        spread = numeric and min(values) > 0 and max(values) / min(values) > 10
        xs = [math.log10(v) if spread else v if numeric else axis_position(values, v) for v in values]
        for trial, x in zip(trials, xs, strict=True):
            pen, z = self._style(trial)
            item = self.plot.plot([x], [trial["value"]], pen=None, symbol="o", symbolSize=12 if z == 3 else 9,
                                  symbolBrush=pen.color(), symbolPen=pen)
            item.setZValue(z)
        self.plot.getAxis("bottom").setTicks(None if numeric and not spread else
                                             [[(x, _fmt(v)) for x, v in zip(xs, values, strict=True)]])
        self.plot.setLabel("bottom", field + (" (log scale)" if spread else ""))
        self.plot.setLabel("left", metric)
        self.plot.enableAutoRange()

    def _fill_table(self, fields: list[str], metric: str, mode: str, trials: list[dict[str, Any]]) -> None:
        headers = ["#", *fields, metric, "state", "run"]
        self.table.setColumnCount(len(headers))
        self.table.setHorizontalHeaderLabels(headers)

        def rank(t: dict[str, Any]) -> tuple:
            value = t.get("value")
            key = value if value is not None else math.inf
            return (t["state"] != "done", key if mode == "min" else -key if value is not None else math.inf)

        ordered = sorted(trials, key=rank)
        self.table.setRowCount(len(ordered))
        for r, t in enumerate(ordered):
            cells = [("★ " if t["number"] == self.best() else "") + str(t["number"]),
                     *[_fmt(t["settings"].get(f)) for f in fields],
                     _fmt(t.get("value")) if t.get("value") is not None else "—",
                     t["state"] + (f": {t['error']}" if t.get("error") else ""), t["run_id"]]
            for c, text in enumerate(cells):
                self.table.setItem(r, c, QTableWidgetItem(text))

    def _open_trial(self, row: int, _column: int) -> None:
        item = self.table.item(row, self.table.columnCount() - 1)
        if item is not None:
            self.nav.show("monitor", job_id=item.text())
