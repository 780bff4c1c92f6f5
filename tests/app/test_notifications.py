"""The notification centre, errors from anywhere, and the activity indicator, against the real engine."""

from __future__ import annotations

import logging
import sys

import pytest
from PySide6.QtCore import QTimer

from app.state import notifications
from app.state.notifications import MAX_ENTRIES, NotificationCentre, excepthook, report_error
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected

RUN_TIMEOUT_MS = 180_000  # real jobs on two shared cores


def start_job(home, kind, spec, name=""):
    with BlockingClient.connect(home, client="test-starter", timeout=30) as c:
        return c.call("jobs.start", kind=kind, spec=spec, name=name)["id"]


def job_entry(window, job_id):
    return next((e for e in window.notifications.entries if e.job_id == job_id), None)


def tiny_finetune(steps: int, **overrides):
    # The digits CNN: the quickest real fine-tune there is (no model to load).
    spec = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 8,
            "max_steps": steps, "eval_every": 10_000, "log_every": 1, "checkpoint_every": 10_000,
            "device": "cpu"}
    spec.update(overrides)
    return spec


def test_centre_keeps_the_newest_entries_and_reports_without_a_centre(qtbot, caplog):
    centre = NotificationCentre()
    seen = []
    centre.added.connect(seen.append)
    for i in range(MAX_ENTRIES + 5):
        centre.add("info", f"entry {i}", "text")
    assert len(centre.entries) == MAX_ENTRIES and centre.entries[0].title == "entry 5"
    assert centre.unread == MAX_ENTRIES and len(seen) == MAX_ENTRIES + 5
    centre.clear()
    # The same error twice in a row is one entry, not a flood.
    centre.add("error", "Disk full", "Free some space.")
    centre.add("error", "Disk full", "Free some space.")
    assert len(centre.entries) == 1
    with pytest.raises(ValueError):
        centre.add("fatal", "x", "y")

    notifications.install(None)
    with caplog.at_level(logging.WARNING, logger="app.state.notifications"):
        assert report_error("No centre", "only logged") is None
    assert any("No centre: only logged" in r.getMessage() for r in caplog.records)
    notifications.install(centre)
    entry = report_error("Could not save", "The disk is full.", "OSError: [Errno 28]")
    assert entry is not None and entry.level == "error" and centre.entries[-1].details == "OSError: [Errno 28]"
    notifications.install(None)


def test_bell_counts_unread_and_a_request_while_disconnected_adds_nothing(qtbot, make_window):
    window = make_window(start=False)  # no engine: the banner says so
    centre, bell = window.notifications, window.bell
    assert bell.accessibleName() == "Notifications, 0 unread" and bell.text() == ""
    centre.add("warning", "Low disk space", "Free some space before the next run.")
    centre.add("error", "Could not save", "The disk is full.", "OSError: [Errno 28] No space left")
    assert bell.accessibleName() == "Notifications, 2 unread" and bell.text() == "2"

    bell.click()
    panel = bell.panel
    assert panel.isVisible()
    cards = list(panel.cards.values())
    assert [c.title.text() for c in cards] == ["Could not save", "Low disk space"]  # newest first
    assert cards[0].details_button.isVisibleTo(panel) and not cards[1].details_button.isVisibleTo(panel)
    assert not cards[0].open_button.isVisibleTo(panel)  # not about a job
    dialog = panel.show_details(cards[0].entry_id)
    assert dialog.details.isReadOnly() and "No space left" in dialog.details.toPlainText()
    dialog.copy_button.click()
    from PySide6.QtGui import QGuiApplication
    assert "No space left" in QGuiApplication.clipboard().text()
    dialog.close()
    assert bell.accessibleName() == "Notifications, 1 unread"  # reading the details read it

    bell.click()
    assert panel.isVisible()
    panel.mark_read_button.click()
    assert panel.isVisible()
    assert centre.unread == 0 and bell.accessibleName() == "Notifications, 0 unread"
    assert not panel.mark_read_button.isEnabled()
    centre.add("info", "Hello", "again")
    assert bell.text() == "1"
    assert panel.isVisible()
    panel.clear_button.click()
    assert centre.entries == [] and bell.text() == "" and panel.empty.isVisibleTo(panel)

    # Not connected: the banner already says so, so the failed request is not an entry too.
    window.engine.client.request("jobs.list", {})
    qtbot.wait(50)
    assert centre.entries == []
    assert window.activity.text() == "No jobs running"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.qt_no_exception_capture  # the app's own excepthook is what is tested
def test_job_endings_engine_errors_and_uncaught_exceptions_become_entries(
        qtbot, make_window, gui_home, tmp_path, caplog, monkeypatch):
    window = make_window(page="runs")
    wait_connected(qtbot, window)
    centre = window.notifications

    # A machine probe is the engine's own job: it ends without an entry.
    probe = start_job(gui_home, "system.probe", {})
    # A job that succeeds: a success entry whose Open shows it on Monitor.
    quick = start_job(gui_home, "train.finetune", tiny_finetune(2), "quick")
    qtbot.waitUntil(lambda: job_entry(window, quick) is not None, timeout=RUN_TIMEOUT_MS)
    done = job_entry(window, quick)
    assert done.level == "success" and done.title == "Fine-tune “quick” finished", done
    with BlockingClient.connect(gui_home, client="test-check", timeout=30) as c:
        qtbot.waitUntil(lambda: c.call("jobs.get", id=probe)["state"] == "succeeded", timeout=RUN_TIMEOUT_MS)
    qtbot.wait(200)  # the probe's last jobs event has reached the window
    assert job_entry(window, probe) is None
    window.bell.click()
    card = window.bell.panel.cards[done.id]
    assert card.open_button.isVisibleTo(window.bell.panel)
    card.open_button.click()
    monitor = window.page("monitor")
    assert monitor.isVisible() and monitor.job_id == quick
    assert done.read

    # A job that fails for real: data that does not exist. The engine's message is in the entry.
    missing = tmp_path / "no-such-images"
    failing = start_job(gui_home, "train.finetune", tiny_finetune(2, data={"path": str(missing)}), "no data")
    qtbot.waitUntil(lambda: job_entry(window, failing) is not None, timeout=RUN_TIMEOUT_MS)
    failed = job_entry(window, failing)
    with BlockingClient.connect(gui_home, client="test-check", timeout=30) as c:
        error = c.call("jobs.get", id=failing)["error"]
    assert failed.level == "error" and failed.title == "Fine-tune “no data” failed"
    assert error["message"] in failed.text and error["message"] in failed.details
    assert failing in failed.details and f"Hint: {error['hint']}" in failed.details

    # A request no page handles: an entry with the method in its details.
    count = len(centre.entries)
    window.engine.client.request("jobs.get", {"id": "r-no-such-job"})
    qtbot.waitUntil(lambda: len(centre.entries) == count + 1, timeout=10_000)
    refused = centre.entries[-1]
    assert refused.level == "error" and "r-no-such-job" in refused.text
    assert "Request: jobs.get" in refused.details

    # An exception in a Qt slot: an entry with the traceback in its details, and the app goes on.
    monkeypatch.setattr(sys, "excepthook", excepthook(centre))

    def raiser():
        raise RuntimeError("a bug in a slot")

    QTimer.singleShot(0, raiser)
    qtbot.waitUntil(lambda: centre.entries[-1].title == "Something went wrong in Ember Studio", timeout=5000)
    crash = centre.entries[-1]
    assert crash.text.startswith("RuntimeError: a bug in a slot")
    assert "Traceback (most recent call last)" in crash.details and "in raiser" in crash.details
    assert "Traceback" not in crash.text  # never a raw stack outside Details
    logged = [r for r in caplog.get_records("call") if r.getMessage() == "uncaught error"]
    assert logged and logged[0].exc_info[0] is RuntimeError
    caplog.clear()  # logged on purpose: not a GUI error for the fixture that checks for them
    window.show_page("settings")
    replies = []
    window.engine.client.request("engine.status", {}, replies.append)
    qtbot.waitUntil(lambda: bool(replies), timeout=10_000)
    assert window.bell.accessibleName() == f"Notifications, {centre.unread} unread" and centre.unread >= 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_activity_shows_a_running_fine_tune_and_stops_it(qtbot, make_window, gui_home):
    window = make_window(page="runs")
    wait_connected(qtbot, window)
    activity = window.activity
    job_id = start_job(gui_home, "train.finetune", tiny_finetune(5000), "long run")
    qtbot.waitUntil(lambda: bool((j := activity.tracker.job(job_id)) and j.fraction and j.eta_s is not None),
                    timeout=RUN_TIMEOUT_MS)
    assert activity.text().startswith("1 job running · ")
    assert "%" in activity.text() and "ETA" in activity.text()
    assert activity.accessibleName() == f"Activity: {activity.text()}"
    activity.click()
    row = activity.popup.rows[job_id]
    assert activity.popup.isVisible() and row.title.text() == "Fine-tune: long run"
    assert "ETA" in row.eta_label.text() and row.progress.value() >= 0
    assert row.stop_button.isEnabled() and row.cancel_button.isEnabled()
    row.stop_button.click()
    qtbot.waitUntil(lambda: activity.tracker.job(job_id) is None, timeout=RUN_TIMEOUT_MS)
    assert activity.text() == "No jobs running" and job_id not in activity.popup.rows
    qtbot.waitUntil(lambda: job_entry(window, job_id) is not None, timeout=20_000)
    stopped = job_entry(window, job_id)
    assert stopped.level == "info" and stopped.title == "Fine-tune “long run” stopped"
    with BlockingClient.connect(gui_home, client="test-check", timeout=30) as c:
        assert c.call("jobs.get", id=job_id)["state"] == "stopped"


def test_system_jobs_send_no_notification(qtbot):
    from tests.app.test_compress_wizard import fake_engine

    engine = fake_engine({})
    centre = NotificationCentre()
    notifications.JobWatcher(centre, engine, centre)  # what watch() adds for job endings
    probe = {"id": "r-probe", "kind": "system.probe", "name": "system.probe", "spec": {}, "error": None}
    for state in ("running", "succeeded"):
        engine.client.publish("jobs", {**probe, "state": state})
    engine.client.publish("jobs", {**probe, "id": "r-probe-2", "state": "failed",
                                   "error": {"message": "nvidia-smi hung"}})
    assert centre.entries == []  # Settings shows a probe's outcome where it was asked for
    engine.client.publish("jobs", {"id": "r-tune", "kind": "train.finetune", "name": "tickets", "state": "running"})
    engine.client.publish("jobs", {"id": "r-tune", "kind": "train.finetune", "name": "tickets",
                                   "state": "succeeded", "started_at": 1.0, "ended_at": 61.0})
    assert [e.title for e in centre.entries] == ["Fine-tune “tickets” finished"]
