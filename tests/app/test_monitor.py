"""The Monitor page against the real engine (a real fine-tune, its replayed history, errors), and on
canned events (the ETA, the log's library noise and its evaluation and checkpoint lines)."""

from __future__ import annotations

import time
from datetime import datetime

import numpy as np
import pytest
from PySide6.QtCore import Qt

from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected

RUN_TIMEOUT_MS = 180_000  # a tiny run, but the CI machines have two cores


def tiny_spec(**overrides):
    # The digits CNN: the quickest real fine-tune there is (no model to load).
    spec = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 16,
            "max_steps": 6, "eval_every": 3, "log_every": 1, "checkpoint_every": 100,
            "device": "cpu"}
    spec.update(overrides)
    return spec


def start_job(home, spec, name="monitor test"):
    with BlockingClient.connect(home, client="test-starter", timeout=30) as c:
        return c.call("jobs.start", kind="train.finetune", spec=spec, name=name)["id"]


def stored_train_steps(home, job_id):
    with BlockingClient.connect(home, client="test-check", timeout=30) as c:
        events = c.call("events.query", topics=[f"run/{job_id}/train"], limit=100_000)["events"]
    return [e["data"]["step"] for e in events]


# A real run on two shared cores: minutes, not the default two, when the machine is busy.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_monitor_follows_a_real_run_and_replays_it_in_a_new_window(qtbot, make_window, gui_home):
    window = make_window(page="monitor")
    wait_connected(qtbot, window)
    page = window.page("monitor")
    assert page.body.currentWidget() is page.empty  # nothing to watch in a fresh home

    job_id = start_job(gui_home, tiny_spec())
    # Nothing was picked by hand, so the page follows the run that just started.
    qtbot.waitUntil(lambda: page.job_id == job_id, timeout=30_000)
    assert page.run_combo.currentData() == job_id
    qtbot.waitUntil(lambda: page.loss_chart.count("train loss") > 0, timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: page.job().get("state") == "succeeded", timeout=RUN_TIMEOUT_MS)
    charts = page.charts
    qtbot.waitUntil(lambda: charts.loss_chart.count("eval loss") == 2, timeout=20_000)

    assert charts.loss_chart.count("train loss") == 6 == charts.loss_chart.count("smoothed")
    assert charts.loss_chart.series("train loss").x.tolist() == stored_train_steps(gui_home, job_id)
    assert charts.lr_chart.count("lr") == 6
    assert charts.throughput_chart.count("samples/s") == 6
    assert charts.step_chart.count("step time") == 6 == charts.step_chart.count("data wait %")
    assert charts.eval_chart.count("accuracy") == 2
    memory = charts.memory_chart.series_names()
    assert memory and all(name.startswith("rank 0@") and name.endswith(" rss") for name in memory)
    assert page.run_facts["task"] == "image_classification"
    assert page.run_facts["world size"] == "1"
    assert "trainable params" in page.run_facts
    assert page.state_label.text() == "succeeded"
    assert page.progress.value() == page.progress.maximum()
    assert page.step_label.text() == "step 6 / 6"
    assert not page.stop_button.isEnabled() and not page.cancel_button.isEnabled()
    assert not page.resume_button.isEnabled()
    qtbot.waitUntil(lambda: "6 steps" in page.log_pane.text(), timeout=10_000)
    # A line per evaluation and per checkpoint, from the run's events.
    qtbot.waitUntil(lambda: "evaluation at step 6: accuracy" in page.log_pane.text(), timeout=10_000)
    assert "evaluation at step 3: accuracy" in page.log_pane.text()
    assert "checkpoint saved at step 6" in page.log_pane.text()
    assert not page.banner.isVisible()
    qtbot.waitUntil(lambda: not charts.loss_chart.dirty, timeout=5000)  # the clock drew it
    drawn = charts.loss_chart._series["train loss"].item.xData
    assert drawn.tolist() == [1, 2, 3, 4, 5, 6]

    # A new window knows nothing; showing the run replays its whole history.
    window.close()
    again = make_window(page="runs")
    wait_connected(qtbot, again)
    again.nav.show("monitor", job_id=job_id)
    page = again.page("monitor")
    assert page.isVisible() and page.job_id == job_id
    qtbot.waitUntil(lambda: page.charts.loss_chart.count("eval loss") == 2, timeout=20_000)
    assert page.charts.loss_chart.series("train loss").x.tolist() == [1, 2, 3, 4, 5, 6]
    assert np.allclose(page.charts.loss_chart.series("train loss").y,
                       charts.loss_chart.series("train loss").y)
    assert page.charts.lr_chart.count("lr") == 6
    qtbot.waitUntil(lambda: page.state_label.text() == "succeeded", timeout=10_000)


# A real run on two shared cores: minutes, not the default two, when the machine is busy.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_that_fails_shows_its_error_and_hint(qtbot, make_window, gui_home, tmp_path):
    window = make_window(page="monitor")
    wait_connected(qtbot, window)
    page = window.page("monitor")
    missing = tmp_path / "no-such-folder"
    # jobs.start does not check inputs (jobs.check does), so this fails in the run itself.
    job_id = start_job(gui_home, tiny_spec(data={"path": str(missing)}), name="broken")
    page.show_run(job_id)
    qtbot.waitUntil(lambda: page.banner.isVisible(), timeout=RUN_TIMEOUT_MS)
    assert page.banner.kind == "error"
    assert str(missing) in page.banner.message.text()
    assert "data.path" in page.banner.hint.text()
    qtbot.waitUntil(lambda: page.job().get("state") == "failed", timeout=60_000)
    assert page.resume_button.isEnabled() and not page.stop_button.isEnabled()
    qtbot.mouseClick(page.banner.close_button, Qt.MouseButton.LeftButton)
    assert not page.banner.isVisible()


# -- canned events ---------------------------------------------------------------------------

# The top of a real stdout.log of a text LoRA fine-tune: library noise around Ember's one line.
RECORDED_LOG = [
    "W1203 19:39:22.627000 6337 torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum subclass and is "
    "now natively supported by torch.compile as an opaque value type. Calling register_constant() on Enum "
    "subclasses is deprecated and will be an error in a future release.",
    "W1203 19:39:22.659000 6337 torch/utils/_pytree.py:630] <enum 'ScaleCalculationMode'> is an Enum subclass and "
    "is now natively supported by torch.compile as an opaque value type. Calling register_constant() on Enum "
    "subclasses is deprecated and will be an error in a future release.",
    "/home/user/ember/.venv/lib/python3.11/site-packages/transformers/modeling_utils.py:3312: FutureWarning: "
    "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use `is_activation_checkpointing` instead.",
    "  warnings.warn(",
    "19:39:23 text_classification: minilm with lora on 1 process(es) (single, cpu); 75,653 of 22,790,794 "
    "parameters train; 6 steps",
]


def test_log_hides_library_noise_and_pins_evaluations_and_checkpoints_in_time():
    from app.widgets.log_pane import library_noise, merge_notes

    assert library_noise(RECORDED_LOG) == [True, True, True, True, False]
    # Errors stay, and so does a traceback after a warning (its lines are not a warning's continuation).
    kept = ["E1203 19:40:00.000000 6337 torch/distributed/elastic/api.py:12] failed (exitcode: 1)",
            "Traceback (most recent call last):", '  File "train.py", line 3, in <module>']
    assert library_noise(["x.py:1: UserWarning: y", "  warnings.warn(", *kept]) == [True, True, False, False, False]
    base = datetime(2026, 12, 1, 19, 39, 0).timestamp()
    lines = ["19:39:23 started", "untimed", "19:39:30 stopped at step 6"]
    notes = [(base + 27.5, "evaluation at step 3"), (base + 40, "checkpoint saved at step 6")]
    assert merge_notes(lines, notes) == ["19:39:23 started", "untimed", "19:39:27 evaluation at step 3",
                                         "19:39:30 stopped at step 6", "19:39:40 checkpoint saved at step 6"]
    # A run past midnight: the clock going back means the next day.
    late = datetime(2026, 12, 1, 23, 59, 50).timestamp()
    assert merge_notes(["23:59:55 a", "00:00:10 b"], [(late + 30, "note")]) == \
        ["23:59:55 a", "00:00:10 b", "00:00:20 note"]


def test_monitor_log_eta_and_event_lines_on_canned_events(qtbot):
    from app.pages.monitor.page import MonitorPage
    from tests.app.test_compress_wizard import fake_engine, finetune_record, settle

    record = {**finetune_record("r-tickets", "tickets", {"task": "text_classification"}, 0.5, "minilm"),
              "state": "running", "ended_at": None}
    engine = fake_engine({"jobs.list": {"jobs": [record]}, "jobs.get": record,
                          "jobs.logs": {"lines": RECORDED_LOG}})
    page = MonitorPage(engine)
    qtbot.addWidget(page)
    page.resize(828, 620)
    page.show()
    settle(qtbot, engine.client)
    assert page.job_id == "r-tickets"
    pane = page.log_pane
    assert pane.text().splitlines() == [RECORDED_LOG[-1]]  # the noise is hidden, not lost
    assert pane.noise_check.isVisible() and pane.noise_check.text() == "Library warnings (4)"
    pane.noise_check.setChecked(True)
    assert pane.text().splitlines() == RECORDED_LOG
    pane.noise_check.setChecked(False)

    day = datetime.now().date()
    at = datetime.combine(day, datetime.min.time()).timestamp() + 19 * 3600 + 39 * 60  # 19:39 today
    publish = engine.client.publish
    publish("run/r-tickets/eval", {"t": at + 25, "step": 3, "metrics": {"accuracy": 0.91, "loss": 1.6112}})
    publish("run/r-tickets/checkpoint", {"t": at + 25.2, "step": 3, "path": "/runs/r/checkpoints/step-00000003",
                                         "seconds": 0.017})
    qtbot.waitUntil(lambda: "checkpoint" in pane.text(), timeout=5000)
    assert pane.text().splitlines()[1:] == ["19:39:25 evaluation at step 3: accuracy 0.91 · loss 1.611",
                                            "19:39:25 checkpoint saved at step 3"]

    # The ETA: none during warm-up, a count-down after, none (not "0.0 s") once it ran out.
    now = time.time()
    publish("run/r-tickets/train", {"t": now, "step": 1, "progress": 0.01, "eta_s": 3.0, "loss": 1.6})
    page._show_progress()
    assert page.eta_label.text() == ""
    publish("run/r-tickets/train", {"t": now, "step": 85, "progress": 0.85, "eta_s": 600.0, "loss": 1.2})
    page._show_progress()
    assert page.eta_label.text().startswith("ETA 9 min 5") or page.eta_label.text().startswith("ETA 10 min")
    publish("run/r-tickets/train", {"t": now - 700, "step": 85, "progress": 0.85, "eta_s": 600.0, "loss": 1.2})
    page._show_progress()
    assert page.eta_label.text() == ""
    publish("run/r-tickets/train", {"t": now, "step": 100, "progress": 1.0, "eta_s": 0.0, "loss": 1.1})
    page._show_progress()
    assert page.eta_label.text() == "finishing"

    # An evaluation that takes minutes (answers generated on a CPU) says so, answer by answer, until its result.
    publish("run/r-tickets/evaluating", {"t": now, "step": 100, "what": "generating answers", "done": 5, "total": 30})
    qtbot.waitUntil(lambda: page.eta_label.text() == "evaluating at step 100: generating answers 5/30", timeout=5000)
    publish("run/r-tickets/eval", {"t": now, "step": 100, "metrics": {"accuracy": 0.9}})
    qtbot.waitUntil(lambda: "evaluation at step 100" in pane.text(), timeout=5000)
    page._show_progress()
    assert page.eta_label.text() == "finishing"


def test_a_tensor_parallel_runs_memory_names_each_ranks_place_and_offload_is_shown(qtbot):
    from app.pages.monitor.run_charts import RunCharts
    from app.pages.monitor.speed_line import perf_summary

    charts = RunCharts()
    qtbot.addWidget(charts)
    ranks = [{"rank": r, "dp": r // 2, "tp": r % 2, "host": "gpu1", "device": f"cuda:{r}", "rss": 1e9,
              "allocated": 2e9, "peak": 3e9} for r in range(4)]
    charts.add_event("memory", {"step": 1, "ranks": ranks})
    names = charts.memory_chart.series_names()
    assert "rank 3@gpu1 (dp 1 · tp 1) peak" in names and len(names) == 8
    line = perf_summary({"offloaded_bytes": 48 * 2**20, "data_wait_frac": 0.01}, {})
    assert line == "activations offloaded 48 MiB/step  ·  data wait 1.0%"


def test_the_facts_say_how_a_split_models_processes_divide():
    from app.pages.monitor.speed_line import layout_summary

    pipeline = {"schedule": "1f1b", "stages": [[0, 1], [1, 2]], "microbatches": 4, "bubble": 0.2}
    assert layout_summary({"mesh": {"pp": 2, "dp": 1, "tp": 2}, "pipeline": pipeline}) == \
        "2 stages × 1 replica × 2-way tensor split (1f1b, 4 micro-batches, bubble 20%)"
    assert layout_summary({"mesh": {"pp": 1, "dp": 2, "tp": 2}}) == "2 replicas × 2-way tensor split"
    assert layout_summary({"mesh": {"pp": 1, "dp": 4, "tp": 1}}) == ""  # data parallel alone: nothing split
    assert layout_summary({}) == ""  # a run from before the mesh was reported
