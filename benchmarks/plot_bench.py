"""Live chart speed: a million points per curve while events arrive at 1,000 per second.

    python benchmarks/plot_bench.py [--points 1000000] [--curves 3] [--rate 1000] [--seconds 10]

Builds the Monitor's chart widget (app/widgets/charts.LiveChart) offscreen,
preloads ``--points`` points into each of ``--curves`` curves, then feeds
events at ``--rate`` per second for ``--seconds`` through ``LiveChart.append``
(the path the Monitor page uses), while the shared 40 ms redraw clock draws.

Measured:
- redraw: one clock tick (the data handed to pyqtgraph) plus the paint that
  follows it (timed around the plot's paintEvent), per frame;
- stall: a 5 ms timer's worst lateness, i.e. the longest the event loop was
  busy with anything (redraw, paint, appends).

The figures are printed beside the targets (median redraw under 16 ms, no stall
over 50 ms) as ratios, and beside an anchor: the same chart with the whole
history handed to pyqtgraph on every redraw (its own peak downsampling and
clip-to-view still on, but no block summaries), measured for a few frames.
Exits 0 always; PASS/FAIL says whether the targets were met.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PySide6.QtCore import QElapsedTimer, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

REDRAW_TARGET_MS = 16.0
STALL_TARGET_MS = 50.0
STALL_TICK_MS = 5


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def build_chart(points: int, curves: int):
    from app.widgets.charts import LiveChart

    chart = LiveChart("Loss", "loss")
    rng = np.random.default_rng(0)
    xs = np.arange(1, points + 1, dtype=np.int64)
    for c in range(curves):
        # A decaying, noisy loss with spikes: the shape peak downsampling must keep.
        y = 2.0 * np.exp(-xs / (points / 5)) + 0.05 * rng.standard_normal(points) + 0.1 * c
        y[rng.integers(0, points, 50)] += 1.5
        chart.add_series(f"curve {c}")
        chart.extend(f"curve {c}", xs, y)
    # As the Monitor does from run_info's total_steps: room for the whole run up front.
    chart.reserve(points + 200_000)
    chart.resize(900, 320)
    chart.show()
    return chart


class PaintTimer:
    """Times each paint of the chart's plot (QGraphicsView.paintEvent)."""

    def __init__(self, plot):
        self.durations: list[float] = []
        original = plot.paintEvent

        def timed(event):
            t0 = time.perf_counter()
            original(event)
            self.durations.append(time.perf_counter() - t0)

        plot.paintEvent = timed


def run_live(app: QApplication, chart, rate: int, seconds: float) -> dict[str, list[float]]:
    from app.widgets.charts import redraw_clock

    clock = redraw_clock()
    paints = PaintTimer(chart.plot)
    ticks: list[float] = []
    frames: list[float] = []
    pending: list[tuple[float, int]] = []  # (tick seconds, paints done before it)

    def on_tick(elapsed: float) -> None:
        ticks.append(elapsed)
        pending[:] = [(elapsed, len(paints.durations))]

    clock.ticked.connect(on_tick)
    names = chart.series_names()
    next_x = {name: int(chart.series(name).x[-1]) + 1 for name in names}
    rng = np.random.default_rng(1)
    sent = 0
    clock_start = time.perf_counter()

    def feed() -> None:
        nonlocal sent
        due = int((time.perf_counter() - clock_start) * rate)
        for _ in range(due - sent):
            for name in names:
                chart.append(name, next_x[name], 0.3 + 0.05 * float(rng.standard_normal()))
                next_x[name] += 1
            sent += 1

    lateness: list[float] = []
    stall_clock = QElapsedTimer()
    stall_clock.start()
    last = [stall_clock.nsecsElapsed()]

    def on_stall_tick() -> None:
        now = stall_clock.nsecsElapsed()
        lateness.append(max(0.0, (now - last[0]) / 1e6 - STALL_TICK_MS))
        last[0] = now

    def on_paint_done() -> None:
        # A frame: the tick that handed over the data, plus the paint it caused.
        if pending and len(paints.durations) > pending[0][1]:
            elapsed, index = pending.pop()
            frames.append(elapsed + paints.durations[index])

    feeder = QTimer(interval=2, timerType=Qt.TimerType.PreciseTimer)
    feeder.timeout.connect(feed)
    staller = QTimer(interval=STALL_TICK_MS, timerType=Qt.TimerType.PreciseTimer)
    staller.timeout.connect(on_stall_tick)
    framer = QTimer(interval=1)
    framer.timeout.connect(on_paint_done)
    for timer in (feeder, staller, framer):
        timer.start()
    QTimer.singleShot(int(seconds * 1000), app.quit)
    app.exec()
    for timer in (feeder, staller, framer):
        timer.stop()
    clock.ticked.disconnect(on_tick)
    return {"frames": frames, "ticks": ticks, "paints": paints.durations, "stall": lateness,
            "events": [float(sent)]}


def idle_stalls(app: QApplication, seconds: float) -> list[float]:
    """The same 5 ms timer with nothing else to do: what this machine's scheduler costs alone."""
    lateness: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.nsecsElapsed()]

    def on_tick() -> None:
        now = clock.nsecsElapsed()
        lateness.append(max(0.0, (now - last[0]) / 1e6 - STALL_TICK_MS))
        last[0] = now

    timer = QTimer(interval=STALL_TICK_MS, timerType=Qt.TimerType.PreciseTimer)
    timer.timeout.connect(on_tick)
    timer.start()
    QTimer.singleShot(int(seconds * 1000), app.quit)
    app.exec()
    timer.stop()
    return lateness


def anchor_frames(app: QApplication, chart, frames: int) -> list[float]:
    """Whole history to pyqtgraph each redraw (its downsampling and clipping still on)."""
    paints = PaintTimer(chart.plot)
    out = []
    for i in range(frames):
        for name in chart.series_names():
            chart.series(name).append(int(chart.series(name).x[-1]) + 1, 0.3)
        t0 = time.perf_counter()
        for name in chart.series_names():
            buf = chart.series(name)
            chart._series[name].item.setData(buf.x, buf.y)
        chart.dirty = False
        set_data = time.perf_counter() - t0
        paints.durations.clear()
        chart.plot.viewport().repaint()
        out.append(set_data + sum(paints.durations))
        app.processEvents()
        del i
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--curves", type=int, default=3)
    ap.add_argument("--rate", type=int, default=1000, help="events per second")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--anchor-frames", type=int, default=10)
    args = ap.parse_args()

    app = QApplication.instance() or QApplication([])
    t0 = time.perf_counter()
    chart = build_chart(args.points, args.curves)
    chart.redraw()  # the first draw builds the block summaries of the preloaded history
    app.processEvents()
    print(f"chart: {args.curves} curves x {args.points:,} points preloaded and drawn once "
          f"in {time.perf_counter() - t0:.2f} s")

    live = run_live(app, chart, args.rate, args.seconds)
    frames_ms = [f * 1000 for f in live["frames"]]
    ticks_ms = [f * 1000 for f in live["ticks"]]
    paints_ms = [f * 1000 for f in live["paints"]]
    stall_ms = max(live["stall"]) if live["stall"] else float("nan")
    events = int(live["events"][0])
    med, p95, worst = statistics.median(frames_ms), percentile(frames_ms, 0.95), max(frames_ms)
    print(f"live: {events:,} events in {args.seconds:.0f} s ({events / args.seconds:,.0f}/s, "
          f"each appending to {args.curves} curves), {len(frames_ms)} frames")
    print(f"  redraw (data hand-over + paint): median {med:.2f} ms  p95 {p95:.2f} ms  "
          f"max {worst:.2f} ms")
    print(f"    of which hand-over: median {statistics.median(ticks_ms):.2f} ms, "
          f"paint: median {statistics.median(paints_ms):.2f} ms")
    over = sum(1 for v in live["stall"] if v > STALL_TARGET_MS)
    print(f"  event-loop stall ({STALL_TICK_MS} ms timer lateness): worst {stall_ms:.1f} ms, "
          f"p99 {percentile(live['stall'], 0.99):.1f} ms, {over} of {len(live['stall'])} ticks "
          f"over {STALL_TARGET_MS:.0f} ms")
    idle = idle_stalls(app, min(5.0, args.seconds))
    print(f"  the same timer on an idle event loop here: worst {max(idle):.1f} ms, "
          f"p99 {percentile(idle, 0.99):.1f} ms (the machine's own scheduling noise; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")

    anchor = [f * 1000 for f in anchor_frames(app, chart, args.anchor_frames)]
    a_med = statistics.median(anchor)
    print(f"anchor, whole history to pyqtgraph each redraw: median {a_med:.2f} ms "
          f"max {max(anchor):.2f} ms  -> anchor/chart ratio {a_med / med:.1f}x")
    print(f"targets: median redraw {med:.2f} / {REDRAW_TARGET_MS:.0f} ms = ratio "
          f"{med / REDRAW_TARGET_MS:.2f};  worst stall {stall_ms:.1f} / {STALL_TARGET_MS:.0f} ms "
          f"= ratio {stall_ms / STALL_TARGET_MS:.2f}")
    ok = med < REDRAW_TARGET_MS and stall_ms <= STALL_TARGET_MS
    print("PASS" if ok else "FAIL", "(median redraw under 16 ms and no stall over 50 ms)")


if __name__ == "__main__":
    main()
