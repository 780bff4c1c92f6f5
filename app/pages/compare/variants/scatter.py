"""Latency against the metric, one marker per model: size from its file, the Pareto front joined.

Imports pyqtgraph, so it is loaded only with the Compare page.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.models.variants import LATENCY_BASES, Row
from app.text.glossary import term_tooltip
from app.widgets.charts import ChartLegend, export_plot_png
from app.widgets.common import label
from app.widgets.overlay_chart import run_colour

FRONT_COLOUR = "#e8590c"
RECOMMENDED_COLOUR = "#2b8a3e"
PARENT_COLOUR = "#1f2328"
MIN_MARKER, MAX_MARKER = 10.0, 40.0


def marker_size(size_bytes: float | None, largest: float | None) -> float:
    """Area grows with the file size: the largest model gets MAX_MARKER."""
    if not size_bytes or not largest:
        return MIN_MARKER
    return MIN_MARKER + (MAX_MARKER - MIN_MARKER) * math.sqrt(size_bytes / largest)


class VariantsScatter(QWidget):
    point_clicked = Signal(str)  # run id

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self.title = label("Latency and accuracy", "h2")
        layout.addWidget(self.title)
        # Above the plot: no corner of it is sure to be empty (labels and markers go anywhere).
        self.legend = ChartLegend()
        layout.addWidget(self.legend)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setMinimumHeight(260)
        for widget in (self.title, self.plot):
            widget.setToolTip(term_tooltip("Pareto front", "Marker size follows the file size."))
        item = self.plot.getPlotItem()
        item.showGrid(x=True, y=True, alpha=0.15)
        item.getAxis("left").enableAutoSIPrefix(False)
        item.getAxis("bottom").enableAutoSIPrefix(False)
        layout.addWidget(self.plot, 1)
        self.note = label("Marker size follows the file size. ◆ in the table and the orange line: the Pareto "
                          "front (nothing else is both faster and better).", "muted", wrap=True)
        layout.addWidget(self.note)
        self.empty = label("", "muted", wrap=True)
        self.empty.hide()
        layout.addWidget(self.empty)
        self._points: list[tuple[str, float, float, float]] = []  # run id, x, y, marker size
        self.front_xy: list[tuple[float, float]] = []

    def set_rows(self, rows: list[Row], basis: str, front: list[str], recommended: str | None) -> None:
        self.plot.clear()
        self.legend.clear()
        self._points = []
        self.front_xy = []
        drawn = [r for r in rows if r.metric is not None and r.latency(basis) is not None]
        metric = next((r.metric_name for r in drawn), "accuracy")
        better = "higher is better" if next((r.higher_is_better for r in drawn), True) else "lower is better"
        per_token = any(r.per_token for r in drawn)
        self.title.setText(f"{'Time per token' if per_token else 'Latency'} and {metric}")
        item = self.plot.getPlotItem()
        batch = next((r.batch_n for r in drawn if r.batch_n), None)
        requests = "one request at a time" if basis == "b1" else f"{batch or 'N'} requests at once"
        item.setLabel("bottom", f"ms per generated token, {requests}" if per_token
                      else f"latency p50 at {LATENCY_BASES.get(basis, basis)} (ms)")
        item.setLabel("left", f"{metric} ({better})")
        self.empty.setText("" if drawn else "Nothing measured yet: the chart fills in as the variants' "
                                            "jobs finish their evaluation.")
        self.empty.setVisible(not drawn)
        if not drawn:
            return
        largest = max((r.size_bytes or 0) for r in drawn) or None
        by_id = {r.job_id: r for r in drawn}
        line = [(by_id[i].latency(basis), by_id[i].metric) for i in front if i in by_id]
        if len(line) > 1:
            self.plot.plot([x for x, _ in line], [y for _, y in line], name="Pareto front",
                           pen=pg.mkPen(FRONT_COLOUR, width=2, style=pg.QtCore.Qt.PenStyle.DashLine))
            self.legend.add("Pareto front", FRONT_COLOUR, "dash")
        self.front_xy = line
        spots = []
        for i, row in enumerate(drawn):
            x, y = row.latency(basis), row.metric
            size = marker_size(row.size_bytes, largest)
            on_front = row.job_id in front
            colour = PARENT_COLOUR if row.is_parent else run_colour(i - 1 if i else 0)
            spots.append({"pos": (x, y), "size": size, "data": row.job_id,
                          "symbol": "star" if row.is_parent else "o",
                          "brush": pg.mkBrush(colour), "pen": pg.mkPen(FRONT_COLOUR if on_front else "w",
                                                                       width=2.5 if on_front else 1)})
            self._points.append((row.job_id, x, y, size))
        self._label(drawn, front, recommended, basis)
        scatter = pg.ScatterPlotItem(spots=spots, hoverable=True, tip=self._tip(by_id, basis))
        scatter.sigClicked.connect(lambda _item, points, _ev: points and self.point_clicked.emit(points[0].data()))
        self.plot.addItem(scatter)
        if recommended in by_id:
            row = by_id[recommended]
            ring = pg.ScatterPlotItem([row.latency(basis)], [row.metric], symbol="o", brush=None,
                                      size=marker_size(row.size_bytes, largest) + 12,
                                      pen=pg.mkPen(RECOMMENDED_COLOUR, width=3))
            self.plot.addItem(ring)
            self.legend.add("recommended", RECOMMENDED_COLOUR, "ring")
        item.enableAutoRange()
        # Room for the labels and the largest markers at the edges.
        xs, ys = [p[1] for p in self._points], [p[2] for p in self._points]
        xpad = (max(xs) - min(xs)) * 0.25 or max(xs) * 0.25 or 1.0
        ypad = (max(ys) - min(ys)) * 0.2 or abs(max(ys)) * 0.02 or 0.01
        item.setXRange(max(0.0, min(xs) - xpad * 0.4), max(xs) + xpad, padding=0)
        item.setYRange(min(ys) - ypad, max(ys) + ypad, padding=0)

    def _label(self, drawn: list[Row], front: list[str], recommended: str | None, basis: str) -> None:
        """Name the points, the parent, the recommended and the front first; a label that would
        overlap one already placed is left out (hovering a point still names it)."""
        xs = [r.latency(basis) for r in drawn]
        ys = [r.metric for r in drawn]
        x_span, y_span = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
        order = sorted(drawn, key=lambda r: (not r.is_parent, r.job_id != recommended, r.job_id not in front))
        placed: list[tuple[float, float]] = []
        for row in order:
            x, y = row.latency(basis), row.metric
            if any(abs(x - px) < 0.18 * x_span and abs(y - py) < 0.08 * y_span for px, py in placed):
                continue
            placed.append((x, y))
            name = "parent" if row.is_parent else row.technique
            chosen = row.job_id == recommended
            text = pg.TextItem(f"{name} ✓ recommended" if chosen else name,
                               color=RECOMMENDED_COLOUR if chosen else "#33393f", anchor=(-0.12, -0.05))
            text.setPos(x, y)
            self.plot.addItem(text)

    @staticmethod
    def _tip(by_id: dict[str, Row], basis: str):
        def tip(x: float, y: float, data: str) -> str:
            row = by_id.get(data)
            if row is None:
                return ""
            size = f", {row.size_bytes / 1e6:.1f} MB" if row.size_bytes else ""
            return f"{'parent' if row.is_parent else row.technique} ({row.name})\n" \
                   f"{row.metric_name} {y:.4g}, {x:.2f} ms{'/token' if row.per_token else ''} at " \
                   f"{LATENCY_BASES.get(basis, basis)}{size}"
        return tip

    def points(self) -> list[tuple[str, float, float, float]]:
        """(run id, latency, metric, marker size) of every marker drawn."""
        return list(self._points)

    def save_png(self, path: str, width: int = 1600) -> None:
        export_plot_png(self.plot, self.legend, path, width)
