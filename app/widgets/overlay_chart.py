"""One metric of several runs on one chart: a line per run, one colour each, named in a legend above it.

Imports pyqtgraph, so only the Compare page (built on first show) imports this.
Long runs stay fast: pyqtgraph draws only what is in view and downsamples
keeping peaks, so a loss spike never disappears when zoomed out.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.state.style import colour as theme_colour
from app.widgets.charts import ChartLegend, use_theme_colours
from app.widgets.common import label

# Distinct on white and for the common colour-vision deficiencies (Okabe-Ito order, then more).
RUN_COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#7f7f7f",
               "#000000", "#b8860b", "#6a3d9a")


def run_colour(i: int) -> str:
    colour = RUN_COLOURS[i % len(RUN_COLOURS)]
    return theme_colour("text") if colour == "#000000" else colour  # black vanishes on a dark chart


class OverlayChart(QWidget):
    def __init__(self, title: str, y_label: str, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self.title = label(title, "h2")
        layout.addWidget(self.title)
        self.legend = ChartLegend()  # outside the plot: a box in it would hide the lines behind it
        layout.addWidget(self.legend)
        use_theme_colours()
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(180)
        item = self.plot.getPlotItem()
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setLabel("bottom", "step")
        item.setLabel("left", y_label)
        item.getAxis("left").enableAutoSIPrefix(False)  # accuracy 0.91, not "910 (x0.001)"
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        self.empty = label("", "muted", wrap=True)
        self.empty.hide()
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.empty)
        self._curves: list[pg.PlotDataItem] = []

    def set_title(self, title: str, y_label: str) -> None:
        self.title.setText(title)
        self.plot.getPlotItem().setLabel("left", y_label)

    def set_series(self, series: Sequence[tuple[str, str, Sequence[float], Sequence[float]]],
                   empty_text: str = "") -> None:
        """Replace the lines: (name, colour, steps, values) per run; runs without points are left out."""
        self.plot.clear()
        self.legend.clear()
        self._curves = []
        for name, colour, xs, ys in series:
            if not len(xs):
                continue
            symbol = "o" if len(xs) <= 30 else None  # a few eval points read better as dots
            curve = self.plot.plot(list(xs), list(ys), name=name,
                                   pen=pg.mkPen(colour, width=2), symbol=symbol, symbolSize=5,
                                   symbolBrush=colour, symbolPen=None)
            self._curves.append(curve)
            self.legend.add(name, colour, "line")
        self.empty.setText(empty_text)
        self.empty.setVisible(not self._curves and bool(empty_text))
        self.plot.getPlotItem().enableAutoRange()

    def series_count(self) -> int:
        return len(self._curves)

    def point_counts(self) -> list[int]:
        return [len(curve.xData) if curve.xData is not None else 0 for curve in self._curves]

    def series_names(self) -> list[str]:
        return [curve.name() for curve in self._curves]
