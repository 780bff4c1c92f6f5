"""The Monitor's six charts (seven for a preference-tuned run), fed one run event at a time.

``add_event(kind, data)`` takes the ``run/<id>/<kind>`` events of a training
run (fields: docs/recipes.md, "What a run writes") and appends to the charts;
the shared redraw clock draws them. x is always the step, so a resumed run
(which repeats the steps after its last checkpoint) carries on in place.
"""

from __future__ import annotations

import math
import re
from typing import Any

from PySide6.QtWidgets import QGridLayout, QWidget

from app.text.glossary import term_tooltip
from app.widgets.charts import LiveChart

# Weight of the newest loss in the smoothed line (an exponential moving average).
SMOOTHING = 0.1
GIB = float(1 << 30)
# Metrics that live on a different scale from accuracy and F1 go on the right axis.
RIGHT_AXIS_METRICS = ("perplexity",)
PER_CLASS = re.compile(r"_c\d+$")  # accuracy_c3 and the like: one per class, too many to draw
# A preference-tuned run's train events (objective dpo, orpo, kto): field, series, colour, right axis.
REWARDS = (("reward_chosen", "chosen", "#2b8a3e", False), ("reward_rejected", "rejected", "#c92a2a", False),
           ("reward_margin", "margin", "#1864ab", False), ("reward_accuracy", "accuracy %", "#862e9c", True))


class RunCharts(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.loss_chart = LiveChart("Loss", "loss")
        self.loss_chart.add_series("train loss", "#f4a77a")
        self.loss_chart.add_series("smoothed", "#d9480f")
        self.loss_chart.add_series("eval loss", "#1864ab", symbol="o", line=False)
        self.eval_chart = LiveChart("Evaluation", "score", right_label="perplexity")
        self.lr_chart = LiveChart("Learning rate", "lr")
        self.lr_chart.add_series("lr", "#862e9c")
        self.throughput_chart = LiveChart("Throughput", "samples/s", right_label="tokens/s")
        self.throughput_chart.add_series("samples/s", "#2b8a3e")
        self.throughput_chart.add_series("tokens/s", "#0b7285", right=True)
        # Percent of the step on the right: data wait, padding (token tasks) and MFU (when the
        # device's peak is known); a series appears in the legend once its run reports it.
        self.step_chart = LiveChart("Step time and utilisation", "seconds", right_label="%")
        # Four series on two axes: four hues far apart (none of them the grid's grey), the left axis's in blue.
        self.step_chart.add_series("step time", "#1864ab")
        self.step_chart.add_series("data wait %", "#e8590c", right=True)
        self.memory_chart = LiveChart("Memory per rank", "GiB")
        # Each chart's title explains its measures (hover); the series names are the glossary's terms.
        self.step_chart.title_label.setToolTip("<br>".join(term_tooltip(t) for t in ("data wait", "padding", "MFU")))
        self.memory_chart.title_label.setToolTip(term_tooltip("memory per rank"))
        self.throughput_chart.title_label.setToolTip("Training examples and tokens processed per second, all "
                                                     "processes together.")
        # Shown only once a run reports rewards (preference tuning); every other run keeps six charts.
        self.reward_chart = LiveChart("Rewards", "reward", right_label="accuracy %")
        for _field, name, colour, right in REWARDS:
            self.reward_chart.add_series(name, colour, right=right)
        self.reward_chart.hide()

        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(10)
        for i, chart in enumerate(self.charts()):
            grid.addWidget(chart, i // 3, i % 3)

    def charts(self) -> list[LiveChart]:
        return [self.loss_chart, self.eval_chart, self.lr_chart, self.throughput_chart,
                self.step_chart, self.memory_chart, self.reward_chart]

    def clear(self) -> None:
        for chart in self.charts():
            chart.clear()
        self.reward_chart.hide()

    def add_event(self, kind: str, data: dict[str, Any]) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if kind == "run_info":
            self._on_run_info(0, data)
        elif handler is not None and isinstance(data.get("step"), (int, float)):
            handler(int(data["step"]), data)

    def _on_train(self, step: int, data: dict[str, Any]) -> None:
        loss = number(data.get("loss"))
        if loss is not None:
            self.loss_chart.append("train loss", step, loss)
            smoothed = self.loss_chart.series("smoothed")
            smoothed.truncate_at(step)  # a resumed run smooths on from where it restarts
            previous = smoothed.last_y()
            value = loss if previous is None else previous + SMOOTHING * (loss - previous)
            self.loss_chart.append("smoothed", step, value)
        self._put(self.lr_chart, "lr", step, data.get("lr"))
        if number(data.get("reward_margin")) is not None:
            self.reward_chart.show()
            for field, name, _colour, right in REWARDS:
                value = number(data.get(field))
                self._put(self.reward_chart, name, step, 100.0 * value if right and value is not None else value)
        self._put(self.throughput_chart, "samples/s", step, data.get("samples_per_s"))
        self._put(self.throughput_chart, "tokens/s", step, data.get("tokens_per_s"))
        self._put(self.step_chart, "step time", step, data.get("step_time_s"))
        for field, name, colour in (("data_wait_frac", "data wait %", ""), ("padding_frac", "padding %", "#2b8a3e"),
                                    ("mfu", "MFU %", "#862e9c")):
            fraction = number(data.get(field))
            if fraction is None:
                continue  # an old run, or an image task: no series, never a line of zeros
            if not self.step_chart.has_series(name):
                self.step_chart.add_series(name, colour or None, right=True, width=1.5 if field == "mfu" else 1.0)
            self.step_chart.append(name, step, 100.0 * min(fraction, 1.0))  # a share: never above 100%

    def _on_eval(self, step: int, data: dict[str, Any]) -> None:
        metrics = data.get("metrics") or {}
        for name, value in metrics.items():
            if name == "loss":
                self._put(self.loss_chart, "eval loss", step, value)
                continue
            if PER_CLASS.search(name):
                continue
            if not self.eval_chart.has_series(name):
                self.eval_chart.add_series(name, symbol="o", right=name in RIGHT_AXIS_METRICS)
            self._put(self.eval_chart, name, step, value)

    def _on_run_info(self, _step: int, data: dict[str, Any]) -> None:
        total = data.get("total_steps")
        if isinstance(total, int) and 0 < total <= 50_000_000:
            for chart in (self.loss_chart, self.lr_chart, self.throughput_chart, self.step_chart):
                chart.reserve(total + 1)

    def _on_resumed(self, step: int, _data: dict[str, Any]) -> None:
        for chart in (self.loss_chart, self.lr_chart):
            chart.add_marker(step, "resumed")

    def _on_memory(self, step: int, data: dict[str, Any]) -> None:
        for rank in data.get("ranks") or []:
            who = f"rank {rank.get('rank', '?')}@{rank.get('host') or '?'}"
            if isinstance(rank.get("tp"), int) and isinstance(rank.get("dp"), int):
                who += f" (dp {rank['dp']} · tp {rank['tp']})"  # the rank's place in a tensor-parallel mesh
            # CUDA: what the allocator holds now and at its peak; CPU: the process's RSS.
            if number(rank.get("allocated")) is not None:
                pairs = [("allocated", rank.get("allocated")), ("peak", rank.get("peak"))]
            else:
                pairs = [("rss", rank.get("rss"))]
            for what, value in pairs:
                name = f"{who} {what}"
                if not self.memory_chart.has_series(name):
                    self.memory_chart.add_series(name, scale=GIB)
                self._put(self.memory_chart, name, step, value)

    @staticmethod
    def _put(chart: LiveChart, name: str, step: int, value: Any) -> None:
        figure = number(value)
        if figure is not None:
            chart.append(name, step, figure)


def number(value: Any) -> float | None:
    """A reported figure as a float; None for a missing, non-numeric, nan or infinite one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None  # nan/inf: a gap, and no series made for a figure the run never had
    return float(value)
