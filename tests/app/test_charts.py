"""The live chart: full history, resumed steps, summaries that keep peaks, export, log scale."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QImage

from app.widgets.charts import LiveChart, redraw_clock
from app.widgets.series_buffer import SeriesBuffer


def test_buffer_grows_and_keeps_every_point():
    buf = SeriesBuffer(capacity=4)
    for step in range(1, 10_001):
        buf.append(step, step * 0.5)
    assert buf.count == 10_000
    assert buf.capacity >= 10_000
    assert buf.x.tolist() == list(range(1, 10_001))
    assert buf.y[-1] == 5000.0 and buf.y[0] == 0.5
    buf.reserve(50_000)  # a run's total steps: later appends never copy the history
    capacity = buf.capacity
    for step in range(10_001, 50_001):
        buf.append(step, 1.0)
    assert buf.capacity == capacity == 50_000 and buf.x[:3].tolist() == [1, 2, 3]


def test_a_repeated_step_cuts_the_series_back_instead_of_zigzagging():
    buf = SeriesBuffer()
    for step in range(1, 11):
        buf.append(step, float(step))
    # A run stopped at step 10 resumes from its checkpoint at step 6: steps 7.. come again.
    buf.append(7, 70.0)
    assert buf.x.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert buf.y.tolist() == [1, 2, 3, 4, 5, 6, 70]
    buf.append(8, 80.0)
    assert np.all(np.diff(buf.x) > 0)
    buf.extend(np.array([3, 4]), np.array([0.3, 0.4]))
    assert buf.x.tolist() == [1, 2, 3, 4]


def test_envelope_keeps_every_peak_of_a_long_history():
    buf = SeriesBuffer()
    n = 200_003
    y = np.zeros(n)
    spikes = [17, 65_537, 199_999]
    y[spikes] = [5.0, -3.0, 9.0]
    buf.extend(np.arange(n), y)
    x_out, y_out = buf.envelope(0, n, 500)
    assert 500 <= len(x_out) <= 8 * 500
    assert y_out.max() == 9.0 and y_out.min() == -3.0 and 5.0 in y_out
    assert np.all(np.diff(x_out) >= 0)  # still in x order: clip-to-view relies on it
    assert x_out[0] == 0 and x_out[-1] == n - 1
    # Summaries follow a truncation and new points.
    buf.truncate_at(150_000)
    buf.append(150_000, 42.0)
    _, y_cut = buf.envelope(0, buf.count, 500)
    assert y_cut.max() == 42.0 and y_cut.min() == -3.0


def test_chart_hands_over_summaries_not_the_whole_history(qtbot):
    chart = LiveChart("Loss", "loss")
    qtbot.addWidget(chart)
    chart.resize(600, 260)
    chart.show()
    chart.extend("loss", np.arange(1, 300_001), np.random.default_rng(0).random(300_000))
    assert chart.dirty
    qtbot.waitUntil(lambda: not chart.dirty, timeout=5000)  # the shared clock drew it
    item = chart._series["loss"].item
    assert 0 < len(item.xData) < 20_000
    assert chart.count("loss") == 300_000


def test_only_dirty_charts_are_redrawn(qtbot):
    a, b = LiveChart("A"), LiveChart("B")
    for chart in (a, b):
        qtbot.addWidget(chart)
        chart.show()
    a.append("s", 1, 1.0)
    calls = []
    b.redraw = lambda: calls.append("b")  # type: ignore[method-assign]
    redraw_clock().tick()
    assert not a.dirty and calls == []


def test_csv_export_has_one_row_per_step(tmp_path, qtbot):
    chart = LiveChart("Loss", "loss")
    qtbot.addWidget(chart)
    for step in range(1, 7):
        chart.append("train loss", step, 1.0 / step)
    chart.append("eval loss", 3, 0.25)
    chart.append("eval loss", 6, 0.125)
    chart.add_series("memory", scale=1024.0)
    chart.append("memory", 1, 2048.0)
    path = tmp_path / "loss.csv"
    chart.export_csv(str(path))
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["step", "train loss", "eval loss", "memory"]
    assert [r[0] for r in rows[1:]] == ["1", "2", "3", "4", "5", "6"]
    assert float(rows[3][1]) == pytest.approx(1 / 3) and float(rows[3][2]) == 0.25
    assert rows[1][2] == "" and rows[1][3] == "2.0"  # shown in the chart's unit


def test_png_export_writes_an_image(tmp_path, qtbot):
    chart = LiveChart("Loss", "loss")
    qtbot.addWidget(chart)
    chart.resize(500, 300)
    chart.show()
    for step in range(1, 50):
        chart.append("loss", step, 1.0 / step)
    path = tmp_path / "loss.png"
    chart.export_png(str(path), width=800)
    image = QImage(str(path))
    assert not image.isNull() and image.width() == 800 and image.height() > 100


def test_log_toggle_and_hover_readout(qtbot):
    chart = LiveChart("Learning rate", "lr")
    qtbot.addWidget(chart)
    chart.show()
    for step in range(1, 11):
        chart.append("lr", step, 10.0 ** -step)
    chart.redraw()
    assert not chart.log_y
    chart.log_button.click()
    assert chart.log_y and chart.plot.getPlotItem().ctrl.logYCheck.isChecked()
    chart.set_log_y(False)
    assert not chart.log_button.isChecked()
    assert chart.readout_at(3.2) == "step 3: lr 0.001"


def test_zooming_stops_following_and_fit_returns(qtbot):
    chart = LiveChart("Loss")
    qtbot.addWidget(chart)
    chart.resize(600, 260)
    chart.show()
    chart.extend("loss", np.arange(1, 100_001), np.linspace(2, 0, 100_000))
    chart.redraw()
    vb = chart.plot.getPlotItem().vb
    vb.setXRange(1000, 2000, padding=0)
    assert chart.fit_button.isHidden()  # following the data: nothing to reset
    vb.sigRangeChangedManually.emit([True, False])
    assert not chart.following and chart.dirty and chart.fit_button.isVisible()
    chart.redraw()
    xs = chart._series["loss"].item.xData
    assert xs[0] <= 1000 and xs[-1] >= 2000 and len(xs) < 10_000
    chart.fit_button.click()  # the visible way back
    chart.redraw()
    assert chart.following and chart._series["loss"].item.xData[-1] == 100_000 and chart.fit_button.isHidden()


def test_the_clock_skips_charts_whose_window_is_gone(qtbot):
    import shiboken6

    chart = LiveChart("Gone")
    chart.append("s", 1, 1.0)  # dirty, waiting for the clock
    chart.deleteLater()
    qtbot.waitUntil(lambda: not shiboken6.isValid(chart), timeout=2000)
    redraw_clock().tick()  # a closed window's chart must not break the others' redraws


def view_box_rect_in(chart, plot) -> QRect:
    """The plot area (pyqtgraph's view box) in ``chart``'s own coordinates."""
    vb = plot.getPlotItem().vb
    in_view = plot.mapFromScene(vb.sceneBoundingRect()).boundingRect()
    return in_view.translated(plot.viewport().mapTo(chart, QPoint(0, 0)))


def legend_rect_in(chart, legend) -> QRect:
    return legend.geometry().translated(legend.parentWidget().mapTo(chart, QPoint(0, 0)))


def test_the_legend_names_every_series_outside_the_plot_area(qtbot):
    chart = LiveChart("Evaluation", "score", right_label="perplexity")
    qtbot.addWidget(chart)
    chart.resize(420, 300)
    chart.show()
    for step in range(1, 20):
        chart.append("accuracy", step, step / 20)
    chart.add_series("eval loss", "#1864ab", symbol="o", line=False)
    chart.add_series("perplexity", right=True)
    chart.append("perplexity", 5, 3.0)
    chart.redraw()
    qtbot.waitUntil(lambda: chart.legend.isVisible())
    assert chart.legend.names() == ["accuracy", "eval loss", "perplexity"]  # right-axis series too
    assert chart.plot.getPlotItem().legend is None  # no box drawn over the curves
    legend, area = legend_rect_in(chart, chart.legend), view_box_rect_in(chart, chart.plot)
    assert legend.height() > 0 and area.height() > 50
    assert not legend.intersects(area), f"legend {legend} over the plot area {area}"
    assert "#1864ab" in chart.legend.html() and "\u25cf" in chart.legend.html()  # a marker-only series shows its dot


def test_a_long_legend_wraps_instead_of_widening_the_chart(qtbot):
    chart = LiveChart("Memory per rank", "GiB")
    qtbot.addWidget(chart)
    for rank in range(8):
        chart.add_series(f"rank {rank} allocated")
        chart.add_series(f"rank {rank} reserved")
    assert chart.minimumSizeHint().width() < 300
    chart.resize(360, 400)
    chart.show()
    qtbot.waitUntil(lambda: chart.legend.isVisible())
    line = chart.legend.fontMetrics().lineSpacing()
    assert chart.legend.height() > 2 * line  # on several lines, all of it shown
    assert not legend_rect_in(chart, chart.legend).intersects(view_box_rect_in(chart, chart.plot))


def test_an_exported_image_carries_the_legend(tmp_path, qtbot):
    chart = LiveChart("Loss", "loss")
    qtbot.addWidget(chart)
    chart.resize(500, 300)
    chart.show()
    for step in range(1, 50):
        chart.append("loss", step, 1.0 / step)
    bare = tmp_path / "bare.png"
    chart.legend.clear()
    chart.export_png(str(bare), width=800)
    chart.legend.add("loss", "#e8590c")
    named = tmp_path / "named.png"
    chart.export_png(str(named), width=800)
    without, with_legend = QImage(str(bare)), QImage(str(named))
    assert with_legend.width() == without.width() == 800
    assert with_legend.height() > without.height()  # a band above the plot for the names
    band = [with_legend.pixelColor(x, y).name() for x in range(0, 200) for y in range(with_legend.height()
                                                                                   - without.height())]
    assert "#e8590c" in band  # the series' colour, in the mark beside its name


def test_comparison_and_variant_charts_name_their_lines_outside_the_plot(qtbot):
    from app.models.variants import Row
    from app.pages.compare.variants.scatter import FRONT_COLOUR, VariantsScatter
    from app.widgets.overlay_chart import OverlayChart

    overlay = OverlayChart("Eval loss", "loss")
    qtbot.addWidget(overlay)
    overlay.resize(420, 320)
    overlay.show()
    overlay.set_series([("run-a", "#0072b2", [1, 2, 3], [1.0, 0.8, 0.7]),
                        ("run-b", "#e69f00", [1, 2, 3], [1.1, 0.9, 0.6]),
                        ("no points", "#009e73", [], [])])
    qtbot.waitUntil(lambda: overlay.legend.isVisible())
    assert overlay.legend.names() == ["run-a", "run-b"]
    assert overlay.plot.getPlotItem().legend is None
    assert not legend_rect_in(overlay, overlay.legend).intersects(view_box_rect_in(overlay, overlay.plot))

    scatter = VariantsScatter()
    qtbot.addWidget(scatter)
    scatter.resize(520, 380)
    scatter.show()
    rows = [Row("p", "parent", "parent", "succeeded", is_parent=True, metric=0.9, b1_ms=10.0, size_bytes=400),
            Row("q", "int8", "dynamic int8", "succeeded", metric=0.89, b1_ms=4.0, size_bytes=100),
            Row("h", "fp16", "fp16", "succeeded", metric=0.88, b1_ms=8.0, size_bytes=200)]
    scatter.set_rows(rows, "b1", front=["q", "p"], recommended="q")
    qtbot.waitUntil(lambda: scatter.legend.isVisible())
    assert scatter.legend.names() == ["Pareto front", "recommended"]
    assert FRONT_COLOUR in scatter.legend.html()
    assert scatter.plot.getPlotItem().legend is None
    assert not legend_rect_in(scatter, scatter.legend).intersects(view_box_rect_in(scatter, scatter.plot))
    scatter.set_rows(rows, "b1", front=["q"], recommended=None)  # one point on the front: no line to name
    assert scatter.legend.names() == [] and not scatter.legend.isVisible()
