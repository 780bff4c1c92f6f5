"""Every page exists and says something; Runs and Settings work against the real engine."""

from __future__ import annotations

import os
import platform

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.models.pages import PAGES
from app.widgets.jobs_table import DURATION_COLUMN, NAME_COLUMN, TASK_COLUMN
from engine.api.job_terms import FINAL_STATES
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected

pytestmark = pytest.mark.slow


def visible_words(page) -> str:
    return " ".join(label.text() for label in page.findChildren(QLabel) if label.isVisible())


def runs_state(runs, job_id: str) -> str | None:
    row = runs.model.row_of(job_id)
    return runs.model.job(row)["state"] if row >= 0 else None


def test_every_sidebar_page_exists_and_is_not_blank(qtbot, make_window):
    window = make_window()
    assert [window.sidebar.item(i).text() for i in range(window.sidebar.count())] == [
        "Welcome", "Runs", "New fine-tune", "Monitor", "Compress", "Compare", "Playground", "Export", "Models", "Hosts",
        "Settings"]
    for row, entry in enumerate(PAGES):
        window.sidebar.setCurrentRow(row)
        page = window.stack.currentWidget()
        assert page is window.page(entry.key)
        assert page.isVisible()
        words = visible_words(page)
        assert entry.title in words, f"{entry.title} page has no heading"
        assert len(words.split()) >= 12, f"{entry.title} page is nearly blank: {words!r}"
        assert "Not built yet" not in words  # every page is a working page now


def test_settings_probe_shows_real_facts(qtbot, make_window, gui_home):
    window = make_window(page="settings")
    wait_connected(qtbot, window)
    settings = window.page("settings")
    assert settings.machine_facts.keys() == []  # nothing probed yet in this fresh home

    qtbot.mouseClick(settings.probe_button, Qt.MouseButton.LeftButton)
    assert not settings.probe_button.isEnabled()  # one probe at a time
    qtbot.waitUntil(lambda: settings.machine_facts.value("CPU") != "", timeout=60_000)

    facts = settings.machine_facts
    assert f"{os.cpu_count()} logical cores" in facts.value("CPU")
    assert facts.value("Python").startswith(platform.python_version())
    assert facts.value("OS").startswith(platform.system())
    assert "GiB total" in facts.value("Memory") or "MiB total" in facts.value("Memory")
    assert "free of" in facts.value("Disk")
    assert facts.value("GPUs")  # a device list, or the reason there is none
    assert settings.probe_status.text().startswith("Probed at")
    assert settings.probe_button.isEnabled()
    job_id = settings.probe_status.text().split("(job ")[1].rstrip(").")

    # The probe is an ordinary job: it shows up in Runs, finished.
    runs = window.show_page("runs")
    qtbot.waitUntil(lambda: runs_state(runs, job_id) == "succeeded", timeout=20_000)

    # A new window shows the latest probe as soon as Settings opens.
    window.close()
    again = make_window(page="settings")
    wait_connected(qtbot, again)
    reopened = again.page("settings")
    qtbot.waitUntil(lambda: reopened.machine_facts.value("CPU") != "", timeout=20_000)
    assert job_id in reopened.probe_status.text()
    assert reopened.machine_facts.value("CPU") == facts.value("CPU")


def test_runs_page_follows_a_job_started_by_another_client(qtbot, make_window, gui_home):
    window = make_window(page="runs")
    wait_connected(qtbot, window)
    runs = window.page("runs")
    qtbot.waitUntil(lambda: runs.list_stack.currentWidget() is runs.empty, timeout=10_000)

    with BlockingClient.connect(gui_home, client="another-client", timeout=30) as other:
        job = other.call("jobs.start", kind="system.probe",
                         spec={"samples": 600, "interval_s": 0.2}, name="long probe")
        qtbot.waitUntil(lambda: runs_state(runs, job["id"]) == "running", timeout=30_000)
        row = runs.model.row_of(job["id"])
        assert runs.model.index(row, NAME_COLUMN).data() == "long probe"
        assert runs.model.job(row)["kind"] == "system.probe"
        assert runs.model.index(row, TASK_COLUMN).data() == "—"  # not a fine-tune
        assert runs.list_stack.currentWidget() is runs.empty  # a system job is no run: hidden
        runs.system_check.setChecked(True)  # Show system jobs
        assert runs.list_stack.currentWidget() is runs.table

        assert runs.select_run(job["id"])
        assert runs.stop_button.isEnabled() and runs.cancel_button.isEnabled()
        other.call("jobs.cancel", id=job["id"])
        qtbot.waitUntil(lambda: runs_state(runs, job["id"]) == "cancelled", timeout=30_000)
        assert not runs.stop_button.isEnabled() and not runs.cancel_button.isEnabled()
        # The event carries the state; the record with its end time follows (duration).
        qtbot.waitUntil(lambda: runs.model.index(runs.model.row_of(job["id"]),
                                                 DURATION_COLUMN).data() != "—", timeout=10_000)


def test_runs_page_stops_the_selected_job_and_shows_its_log(qtbot, make_window, gui_home):
    window = make_window(page="runs")
    wait_connected(qtbot, window)
    runs = window.page("runs")
    with BlockingClient.connect(gui_home, client="another-client", timeout=30) as other:
        job = other.call("jobs.start", kind="system.probe",
                         spec={"samples": 600, "interval_s": 0.2})
    qtbot.waitUntil(lambda: runs_state(runs, job["id"]) == "running", timeout=30_000)
    assert runs.select_run(job["id"])
    details = runs.details
    # Events arrive live while the job runs: wait for its facts before stopping it.
    qtbot.waitUntil(lambda: " result " in details.events_view.toPlainText(), timeout=30_000)

    qtbot.mouseClick(runs.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: runs_state(runs, job["id"]) in FINAL_STATES, timeout=40_000)
    assert details.job_id == job["id"] and job["id"] in details.meta.text()
    # What the job printed and recorded is what the two tabs show. The engine may still be
    # reading the job's last events when its state turns final; they arrive live.
    check = BlockingClient.connect(gui_home, client="check", timeout=30)
    lines = check.call("jobs.logs", id=job["id"], tail=500)["lines"]
    qtbot.waitUntil(lambda: details.log_view.toPlainText() == "\n".join(lines), timeout=10_000)

    def same_events() -> bool:
        stored = check.call("events.query", topics=[f"run/{job['id']}/*"])["events"]
        shown = details.events_view.toPlainText().splitlines()
        return len(shown) == len(stored) and "status" in stored[-1]["topic"]

    qtbot.waitUntil(same_events, timeout=20_000)
    check.close()
    shown = details.events_view.toPlainText().splitlines()
    assert "status" in shown[0] and "state=running" in shown[0]
    assert any(" result " in line for line in shown)
    assert "exit code" in details.meta.text()
