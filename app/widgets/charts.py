"""A live line chart that keeps a run's whole history and stays cheap to redraw.

Each series is a pair of growable numpy arrays (x = step as int64, y = float64)
that double when full (``reserve`` sizes them up front), so nothing is ever
dropped. Appending only writes into the arrays and marks the chart dirty; one
shared timer (``RedrawClock``, every 40 ms) redraws the dirty, visible charts.
A redraw hands pyqtgraph min/max block summaries (kept up to date lazily, at
the cost of the new points only) rather than the raw history, and pyqtgraph's
own peak downsampling and clip-to-view finish the job: a million points per
curve draw like a few thousand. Zoomed in, only the part in view is handed over,
at full resolution.

x must grow within a series. When a value comes again (a resumed run repeats
the steps after its checkpoint), the series is cut back to that step first, so
the line continues instead of drawing a zig-zag.

The legend (``ChartLegend``) is a row of text above the plot, never a box over the
curves, and it wraps rather than being cut; an exported image carries it too.
"""

from __future__ import annotations

import csv
import html
import math
import time
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QTextDocument
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.state.style import colour, set_role, theme_tokens
from app.widgets.common import label
from app.widgets.series_buffer import SeriesBuffer

REDRAW_MS = 40
PALETTE = ("#e8590c", "#1864ab", "#2b8a3e", "#862e9c", "#c92a2a", "#0b7285", "#a35f00",
           "#5c7cfa", "#495057", "#d6336c")
pg.setConfigOptions(antialias=False)  # colours: from the theme, when each chart is made


def use_theme_colours() -> None:
    """Make pyqtgraph draw the next plots in the current theme (axes and text take these at creation)."""
    pg.setConfigOptions(background=colour("chart-bg"), foreground=colour("chart-fg"))


# How a legend entry shows its series: the line it is drawn with, or its marker.
LEGEND_MARKS = {"line": "\u2501\u2501", "dash": "\u254d\u254d", "dot": "\u25cf", "star": "\u2605",
                "ring": "\u25ef"}


class ChartLegend(QLabel):
    """The names of a chart's series beside their colours, in a row of their own outside the plot.

    Rich text that wraps: many series (one per rank, one per run) take a second line
    instead of being cut, and never cover a curve. Hidden while there is nothing to name.
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        set_role(self, "muted")
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(True)
        self.setMinimumWidth(0)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
        self._entries: list[tuple[str, str, str]] = []  # name, colour, mark
        self.hide()

    def add(self, name: str, colour: str, mark: str = "line") -> None:
        self._entries.append((name, colour, mark))
        self._refresh()

    def clear(self) -> None:
        self._entries = []
        self._refresh()

    def names(self) -> list[str]:
        return [name for name, _, _ in self._entries]

    def html(self) -> str:
        # A no-break space ties each mark to its name; entries wrap at the plain space between them.
        return "&nbsp;&nbsp;&nbsp; ".join(
            f'<span style="color:{colour}">{LEGEND_MARKS.get(mark, LEGEND_MARKS["line"])}</span>'
            f"&nbsp;{html.escape(name)}" for name, colour, mark in self._entries)

    def _refresh(self) -> None:
        self.setText(self.html())
        self.setVisible(bool(self._entries))


def with_legend(image: QImage, legend: ChartLegend, scale: float, background: QColor) -> QImage:
    """``image`` (an exported plot) with the legend's text above it on ``background``, drawn at ``scale``."""
    if not legend.names():
        return image
    # The text colour of whichever theme suits the plot's background (a chart may keep a white one).
    text = theme_tokens("light" if background.lightness() > 127 else "dark")["text"]
    doc = QTextDocument()
    doc.setDefaultFont(legend.font())
    doc.setDocumentMargin(4)
    doc.setHtml(f'<span style="color:{text}">{legend.html()}</span>')
    doc.setTextWidth(image.width() / scale)
    top = math.ceil(doc.size().height() * scale)
    out = QImage(image.width(), image.height() + top, QImage.Format.Format_ARGB32)
    out.fill(background)
    painter = QPainter(out)
    painter.drawImage(0, top, image)
    painter.scale(scale, scale)  # text drawn at the image's resolution, not scaled up from the screen's
    doc.drawContents(painter)
    painter.end()
    return out


def export_plot_png(plot: pg.PlotWidget, legend: ChartLegend, path: str, width: int) -> None:
    """Save ``plot`` as a PNG ``width`` pixels wide, with ``legend`` above it."""
    import pyqtgraph.exporters

    item = plot.getPlotItem()
    exporter = pyqtgraph.exporters.ImageExporter(item)
    exporter.parameters()["width"] = width
    image = exporter.export(toBytes=True)
    scale = image.width() / max(1.0, item.sceneBoundingRect().width())
    if not with_legend(image, legend, scale, plot.backgroundBrush().color()).save(str(path)):
        raise OSError(f"Could not write the image {path}: check that its folder exists and is writable")


class RedrawClock(QObject):
    """One timer for every chart: redraws the dirty, visible ones, then sleeps until needed."""

    ticked = Signal(float)  # seconds the redraws of this tick took

    def __init__(self, interval_ms: int = REDRAW_MS):
        super().__init__()
        self._charts: weakref.WeakSet[LiveChart] = weakref.WeakSet()
        self._timer = QTimer(self, interval=interval_ms)
        self._timer.timeout.connect(self.tick)
        self.durations: deque[float] = deque(maxlen=10_000)

    def request(self, chart: LiveChart) -> None:
        self._charts.add(chart)
        if not self._timer.isActive():
            self._timer.start()

    def tick(self) -> None:
        t0 = time.perf_counter()
        waiting = False
        for chart in list(self._charts):
            if not shiboken6.isValid(chart):  # its window closed; the Python side lives on
                self._charts.discard(chart)
            elif not chart.dirty:
                self._charts.discard(chart)
            elif chart.isVisible():
                chart.redraw()
                self._charts.discard(chart)
            else:
                waiting = True  # drawn when shown (showEvent asks again)
        if not waiting or not self._charts:
            self._timer.stop()
        elapsed = time.perf_counter() - t0
        self.durations.append(elapsed)
        self.ticked.emit(elapsed)


_clock: RedrawClock | None = None


def redraw_clock() -> RedrawClock:
    global _clock
    if _clock is None:
        _clock = RedrawClock()
    return _clock


@dataclass
class _Series:
    name: str
    buffer: SeriesBuffer
    item: pg.PlotDataItem
    right: bool
    scale: float  # y is shown divided by this (bytes as GiB)


class LiveChart(QWidget):
    """A titled plot of named series; x is the step. Zoom and pan with the mouse."""

    def __init__(self, title: str, y_label: str = "", right_label: str = "",
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.dirty = False
        self._series: dict[str, _Series] = {}
        self._markers: list[pg.InfiniteLine] = []
        self._log_y = False
        # Following: x spans the data with room to grow, so the axis (costly to lay out)
        # changes only now and then. Zooming or panning by hand stops following.
        self.following = True
        self._x_span: tuple[int, int] | None = None

        use_theme_colours()
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(120)  # six fit a small window; they grow with it
        pi = self.plot.getPlotItem()
        # No grid and 1 px pens: in Qt's raster engine both cost more than the curves themselves.
        pi.setLabel("bottom", "step")
        if y_label:
            pi.setLabel("left", y_label)
        pi.setMenuEnabled(False)
        # PlotItem hands these to every item it adds (and would override the item's own).
        pi.setDownsampling(auto=True, mode="peak")
        pi.setClipToView(True)
        # Above the plot, not over it: a legend in the view box hides the curves behind it.
        self.legend = ChartLegend()
        self._right_vb: pg.ViewBox | None = None
        if right_label:
            self._add_right_axis(right_label)

        self.title_label = label(title, "h2")
        self.readout = label(" ", "muted")  # a space keeps its row height when empty
        # Ignored: a long read-out is cut, it never widens the chart (and the page).
        self.readout.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.log_button = QToolButton(text="log")
        self.log_button.setCheckable(True)
        self.log_button.setToolTip("Logarithmic y axis")
        self.log_button.toggled.connect(self.set_log_y)
        # Shown once the user zoomed or panned: one click back to the whole run (the menu's Fit to data).
        self.fit_button = QToolButton(text="Fit")
        self.fit_button.setToolTip("Zoomed in: show all of the data again and follow it")
        self.fit_button.clicked.connect(self.fit)
        self.fit_button.hide()
        self.menu_button = QToolButton(text="⋯")
        self.menu_button.setToolTip("Export and view options")
        self.menu_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_button.setStyleSheet("QToolButton::menu-indicator { image: none; }")
        menu = QMenu(self.menu_button)
        menu.addAction("Fit to data", self.fit)
        menu.addAction("Export image (PNG)…", self._ask_png)
        menu.addAction("Export data (CSV)…", self._ask_csv)
        self.menu_button.setMenu(menu)

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title_label)
        header.addStretch(1)
        header.addWidget(self.fit_button)
        header.addWidget(self.log_button)
        header.addWidget(self.menu_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(header)
        layout.addWidget(self.legend)
        layout.addWidget(self.readout)
        layout.addWidget(self.plot, 1)

        self._cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen(colour("chart-grid"), width=1))
        self._cursor.hide()
        pi.addItem(self._cursor, ignoreBounds=True)
        pi.hideButtons()  # "Fit to data" in the menu does what the A button would
        pi.vb.disableAutoRange(axis=pg.ViewBox.XAxis)
        pi.vb.sigXRangeChanged.connect(self._on_x_range)
        pi.vb.sigRangeChangedManually.connect(self._on_manual_range)
        for axis in ("left", "bottom", "right"):
            pi.getAxis(axis).enableAutoSIPrefix(False)  # a relabel every frame otherwise
        self._hover = pg.SignalProxy(self.plot.scene().sigMouseMoved, rateLimit=30,
                                     slot=self._on_mouse_moved)

    # -- series ----------------------------------------------------------------------

    def add_series(self, name: str, color: str | None = None, *, symbol: str | None = None,
                   line: bool = True, right: bool = False, scale: float = 1.0,
                   width: float = 1.0) -> None:
        if name in self._series:
            return
        color = color or PALETTE[len(self._series) % len(PALETTE)]
        item = pg.PlotDataItem(
            name=name, pen=pg.mkPen(color, width=width) if line else None,
            symbol=symbol, symbolSize=7, symbolBrush=color, symbolPen=pg.mkPen(colour("chart-bg")))
        if right and self._right_vb is not None:
            self._right_vb.addItem(item)
            item.setLogMode(False, self._log_y)
        else:
            self.plot.getPlotItem().addItem(item)
        item.setDownsampling(auto=True, method="peak")
        item.setClipToView(True)
        self.legend.add(name, color, "line" if line else "dot")
        self._series[name] = _Series(name, SeriesBuffer(), item, right, scale)

    def has_series(self, name: str) -> bool:
        return name in self._series

    def series_names(self) -> list[str]:
        return list(self._series)

    def series(self, name: str) -> SeriesBuffer:
        return self._series[name].buffer

    def count(self, name: str) -> int:
        """Points held for ``name`` (0 when there is no such series)."""
        s = self._series.get(name)
        return s.buffer.count if s else 0

    def append(self, name: str, x: int, y: float) -> None:
        """Add a point; cheap: the redraw waits for the clock."""
        if y is None or not math.isfinite(y):
            return  # a gap is better than a line to infinity, and keeps the finite fast path
        if name not in self._series:
            self.add_series(name)
        self._series[name].buffer.append(int(x), float(y))
        self.mark_dirty()

    def extend(self, name: str, xs: np.ndarray, ys: np.ndarray) -> None:
        if name not in self._series:
            self.add_series(name)
        self._series[name].buffer.extend(xs, ys)
        self.mark_dirty()

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` points in every series (a run's total steps, say).

        Growing a buffer copies it: at a million points that is ~10 ms a series,
        all at once on one event. Reserving up front moves that to the start.
        """
        for s in self._series.values():
            s.buffer.reserve(capacity)

    def add_marker(self, x: int, text: str) -> None:
        """A dashed vertical line at ``x`` (a resume point, say)."""
        line = pg.InfiniteLine(pos=x, angle=90, pen=pg.mkPen(colour("chart-grid"), style=pg.QtCore.Qt.PenStyle.DashLine),
                               label=text, labelOpts={"position": 0.92, "color": colour("muted")})
        self.plot.getPlotItem().addItem(line, ignoreBounds=True)
        self._markers.append(line)

    def clear(self) -> None:
        for s in self._series.values():
            s.buffer.clear()
        for line in self._markers:
            self.plot.getPlotItem().removeItem(line)
        self._markers.clear()
        self.readout.setText(" ")
        self._x_span = None
        self.mark_dirty()

    def mark_dirty(self) -> None:
        self.dirty = True
        redraw_clock().request(self)

    def redraw(self) -> None:
        """Hand the buffers to pyqtgraph (the clock calls this; tests may too).

        Following the data (auto range), each series goes in whole as its block
        summary; zoomed in, only the part in view and one view-width either side.
        pyqtgraph's own peak downsampling and clip-to-view then finish the job.
        """
        self.dirty = False
        vb = self.plot.getPlotItem().vb
        follow = self.following
        if follow:
            self._follow_x()
        lo, hi = vb.viewRange()[0]
        margin = hi - lo
        points = max(200, int(vb.width()))
        for s in self._series.values():
            buf = s.buffer
            if not buf.count:
                s.item.setData([], [])
                continue
            if follow:
                i0, i1 = 0, buf.count
            else:
                i0 = int(np.searchsorted(buf.x, math.floor(lo - margin))) - 1
                i1 = int(np.searchsorted(buf.x, math.ceil(hi + margin))) + 1
            x, y = buf.envelope(i0, i1, points)
            s.item.setData(x, y / s.scale if s.scale != 1.0 else y)
        if self._right_vb is not None:
            used = any(s.right and s.buffer.count for s in self._series.values())
            self.plot.getPlotItem().showAxis("right", used)

    def _follow_x(self) -> None:
        firsts = [int(s.buffer.x[0]) for s in self._series.values() if s.buffer.count]
        lasts = [int(s.buffer.x[-1]) for s in self._series.values() if s.buffer.count]
        if not firsts:
            return
        lo, last = min(firsts), max(lasts)
        span = self._x_span
        if span is None or lo != span[0] or last > span[1] or last < span[0] + (span[1] - span[0]) // 2:
            hi = lo + max(10, int((last - lo) * 1.25))
            self._x_span = (lo, hi)
            self.plot.getPlotItem().vb.setXRange(lo, hi, padding=0.02)

    def _on_manual_range(self, *_args) -> None:
        # Comes after the range change itself: draw the new view at its resolution.
        self.following = False
        self.fit_button.show()
        self.mark_dirty()

    def _on_x_range(self, *_args) -> None:
        # Zoomed or panned: draw the part now in view at its own resolution. Following the
        # data, every point was handed over already.
        if not self.following:
            self.mark_dirty()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if self.dirty:
            redraw_clock().request(self)

    # -- view ------------------------------------------------------------------------

    def start_at_zero(self) -> None:
        """For counts and rates, which are never negative: both y axes stop at 0 (pyqtgraph would centre a flat
        line of zeros, or one first point, on 0 and show negative values)."""
        for vb in (self.plot.getPlotItem().vb, self._right_vb):
            if vb is not None:
                vb.setLimits(yMin=0)
                vb.setYRange(0, 1, padding=0)

    def set_log_y(self, on: bool) -> None:
        self._log_y = bool(on)
        if self.log_button.isChecked() != self._log_y:
            self.log_button.setChecked(self._log_y)
        self.plot.getPlotItem().setLogMode(x=False, y=self._log_y)
        if self._right_vb is not None:
            self.plot.getPlotItem().getAxis("right").setLogMode(False, self._log_y)
            for s in self._series.values():
                if s.right:
                    s.item.setLogMode(False, self._log_y)
            self._right_vb.enableAutoRange(y=True)

    @property
    def log_y(self) -> bool:
        return self._log_y

    def fit(self) -> None:
        """Back to following the data: all of x, y fitted."""
        self.following = True
        self.fit_button.hide()
        self._x_span = None
        self.plot.getPlotItem().vb.enableAutoRange(axis=pg.ViewBox.YAxis)
        if self._right_vb is not None:
            self._right_vb.enableAutoRange(axis=pg.ViewBox.YAxis)
        self.mark_dirty()

    def readout_at(self, x: float) -> str:
        """What hovering at step ``x`` shows: the nearest point of each series."""
        parts = []
        step = None
        for s in self._series.values():
            i = s.buffer.nearest(x)
            if i is None:
                continue
            step = int(s.buffer.x[i]) if step is None else step
            parts.append(f"{s.name} {_number(float(s.buffer.y[i]) / s.scale)}"
                         + ("" if int(s.buffer.x[i]) == step else f" (step {int(s.buffer.x[i])})"))
        return f"step {step:,}: " + " · ".join(parts) if parts else ""

    def _on_mouse_moved(self, args) -> None:
        pos = args[0]
        vb = self.plot.getPlotItem().vb
        if not vb.sceneBoundingRect().contains(pos):
            self._cursor.hide()
            self.readout.setText(" ")
            return
        x = vb.mapSceneToView(pos).x()
        text = self.readout_at(x)
        self.readout.setText(text or " ")
        self.readout.setToolTip(text)
        if text:
            self._cursor.setPos(round(x))
            self._cursor.show()

    def leaveEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().leaveEvent(event)
        self._cursor.hide()
        self.readout.setText(" ")

    # -- export ----------------------------------------------------------------------

    def export_png(self, path: str, width: int = 1600) -> None:
        if self.dirty:
            self.redraw()
        export_plot_png(self.plot, self.legend, path, width)

    def export_csv(self, path: str) -> None:
        """One row per step, one column per series; empty where a series has no point."""
        series = [s for s in self._series.values() if s.buffer.count]
        steps = np.unique(np.concatenate([s.buffer.x for s in series])) if series else []
        columns = []
        for s in series:
            idx = np.searchsorted(s.buffer.x, steps)
            idx_c = np.minimum(idx, s.buffer.count - 1)
            present = s.buffer.x[idx_c] == steps
            columns.append((present, s.buffer.y[idx_c] / s.scale))
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["step", *[s.name for s in series]])
            for row, step in enumerate(steps):
                writer.writerow([int(step), *[repr(float(v[row])) if p[row] else ""
                                              for p, v in columns]])

    def _ask_png(self) -> None:
        path = _save_path(self, f"Export {self.title} as an image", f"{self.title}.png", "PNG image (*.png)")
        if path:
            self.export_png(path)

    def _ask_csv(self) -> None:
        path = _save_path(self, f"Export {self.title} data", f"{self.title}.csv", "CSV (*.csv)")
        if path:
            self.export_csv(path)

    # -- right axis ------------------------------------------------------------------

    def _add_right_axis(self, text: str) -> None:
        pi = self.plot.getPlotItem()
        vb = pg.ViewBox()
        pi.showAxis("right")
        pi.scene().addItem(vb)
        axis = pi.getAxis("right")
        axis.linkToView(vb)
        axis.setLabel(text)
        vb.setXLink(pi)
        pi.showAxis("right", False)  # shown once a series on it has points

        def follow() -> None:
            vb.setGeometry(pi.vb.sceneBoundingRect())
            vb.linkedViewChanged(pi.vb, vb.XAxis)

        pi.vb.sigResized.connect(follow)
        self._right_vb = vb


def _save_path(parent: QWidget, caption: str, name: str, filters: str) -> str:
    from PySide6.QtWidgets import QFileDialog

    path, _ = QFileDialog.getSaveFileName(parent, caption, name.replace(" ", "_").lower(), filters)
    return path


def _number(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.3e}"
    if magnitude >= 100:
        return f"{value:,.1f}"
    return f"{value:.4g}"

