"""The Monitor page against the real engine: a real fine-tune, its replayed history, errors."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from engine.client import EngineClient
from tests.app.conftest import wait_connected

# Real runs on two shared cores: minutes, not the default two, when the machine is busy.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
RUN_TIMEOUT_MS = 180_000  # a tiny run, but the CI machines have two cores


def tiny_spec(**overrides):
    # The digits CNN: the quickest real fine-tune there is (no model to load).
    spec = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 16,
            "max_steps": 6, "eval_every": 3, "log_every": 1, "checkpoint_every": 100,
            "device": "cpu"}
    spec.update(overrides)
    return spec


def start_job(home, spec, name="monitor test"):
    with EngineClient.connect(home, client="test-starter", timeout=30) as c:
        return c.call("jobs.start", kind="train.finetune", spec=spec, name=name)["id"]


def stored_train_steps(home, job_id):
    with EngineClient.connect(home, client="test-check", timeout=30) as c:
        events = c.call("events.query", topics=[f"run/{job_id}/train"], limit=100_000)["events"]
    return [e["data"]["step"] for e in events]


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
    assert not page.banner.isVisible()
    qtbot.waitUntil(lambda: not charts.loss_chart.dirty, timeout=5000)  # the clock drew it
    drawn = charts.loss_chart._series["train loss"].item.xData
    assert drawn.tolist() == [1, 2, 3, 4, 5, 6]

    # A new window knows nothing; showing the run replays its whole history.
    window.close()
    again = make_window(page="runs")
    wait_connected(qtbot, again)
    again.open_run(job_id)
    page = again.page("monitor")
    assert page.isVisible() and page.job_id == job_id
    qtbot.waitUntil(lambda: page.charts.loss_chart.count("eval loss") == 2, timeout=20_000)
    assert page.charts.loss_chart.series("train loss").x.tolist() == [1, 2, 3, 4, 5, 6]
    assert np.allclose(page.charts.loss_chart.series("train loss").y,
                       charts.loss_chart.series("train loss").y)
    assert page.charts.lr_chart.count("lr") == 6
    qtbot.waitUntil(lambda: page.state_label.text() == "succeeded", timeout=10_000)


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
