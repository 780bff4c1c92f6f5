"""A newcomer's path through the GUI: wizard defaults -> Launch -> live monitor -> Stop -> Resume ->
close and reopen the window mid-run -> done, with the whole history.

Everything is real: the engine the window starts, torchrun with two gloo processes on
this machine, the built-in MiniLM and the built-in support-ticket dataset.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.app.conftest import wait_connected

# Real runs on two shared cores: minutes, not the default two, when the machine is busy.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STEPS = 40  # enough that the run is still going when the window is reopened


def click(qtbot, button) -> None:
    assert button.isEnabled(), f"{button.text()} is disabled"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def test_wizard_defaults_launch_a_two_process_run_watched_stopped_and_resumed(qtbot, make_window):
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    wizard = window.page("new_finetune")

    # Task, model, data, method: the defaults, as a newcomer clicks through them.
    for _ in range(4):
        click(qtbot, wizard.next_button)
    hardware = wizard.training_step
    assert wizard.current_step() == 4
    hardware.nproc_spin.setValue(2)  # two processes: the strategy becomes DDP by itself
    hardware.max_steps_spin.setValue(STEPS)
    wizard.data_step.max_length_spin.setValue(32)  # short tickets keep each step quick on 2 cores
    hardware.batch_spin.setValue(8)
    qtbot.waitUntil(lambda: hardware.fit.verdict in ("fits", "tight"), timeout=120_000)
    click(qtbot, wizard.next_button)
    assert wizard.current_step() == 5
    spec = wizard.spec_for_launch()
    assert spec["distributed"]["nproc"] == 2 and spec["distributed"]["strategy"] == "ddp"
    assert "torchrun --nproc-per-node 2" in wizard.review_step.command_view.toPlainText()

    qtbot.waitUntil(wizard.launch_button.isEnabled, timeout=120_000)
    click(qtbot, wizard.launch_button)
    qtbot.waitUntil(lambda: getattr(wizard, "last_job_id", None) is not None, timeout=120_000)
    job_id = wizard.last_job_id

    # Launch opens the monitor on the new run; loss points arrive live.
    monitor = window.page("monitor")
    qtbot.waitUntil(lambda: window.stack.currentWidget() is monitor, timeout=10_000)
    assert monitor.job_id == job_id
    qtbot.waitUntil(lambda: monitor.loss_chart.count("train loss") >= 3, timeout=180_000)
    assert monitor.job()["spec"]["distributed"]["nproc"] == 2

    click(qtbot, monitor.stop_button)
    qtbot.waitUntil(lambda: monitor.job().get("state") == "stopped", timeout=120_000)
    stopped_at = monitor.loss_chart.count("train loss")
    assert 3 <= stopped_at < STEPS
    assert "stopped" in monitor.state_label.text().lower()

    click(qtbot, monitor.resume_button)
    qtbot.waitUntil(lambda: monitor.loss_chart.count("train loss") > stopped_at, timeout=180_000)

    # Close the window mid-run and open a new one: the run goes on, and its whole history is back.
    window.close()
    window = make_window(page="monitor")
    wait_connected(qtbot, window)
    monitor = window.page("monitor")
    monitor.show_run(job_id)
    qtbot.waitUntil(lambda: monitor.loss_chart.count("train loss") > stopped_at, timeout=60_000)
    assert list(monitor.loss_chart.series("train loss").x[:stopped_at]) == list(range(1, stopped_at + 1))

    qtbot.waitUntil(lambda: monitor.job().get("state") == "succeeded", timeout=240_000)
    # One point per step, across the stop: the resumed run carries on from its checkpoint.
    qtbot.waitUntil(lambda: monitor.loss_chart.count("train loss") == STEPS, timeout=20_000)
    xs = monitor.loss_chart.series("train loss").x
    assert list(xs) == list(range(1, STEPS + 1))
    assert monitor.charts.eval_chart.series_names()  # evaluations arrived too
