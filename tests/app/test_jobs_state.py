"""One JobsState feeds every page: one "jobs" subscription, one event, every page current."""

from __future__ import annotations

import copy

from engine.api.job_terms import FINAL_STATES
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected
from tests.app.test_runs_page import TINY

RUN_TIMEOUT_MS = 120_000


def test_one_jobs_event_from_the_engine_updates_runs_and_monitor(qtbot, make_window, gui_home):
    window = make_window(page="runs")
    wait_connected(qtbot, window)
    runs, monitor = window.page("runs"), window.page("monitor")
    state = window.engine.jobs
    qtbot.waitUntil(lambda: state.loaded, timeout=20_000)
    # The window's only "jobs" subscription is the JobsState's; the pages follow its signals.
    client = window.engine.client
    assert [s for s in client._subscriptions if "jobs" in s.topics] == [state.subscription]

    # Connected after the pages: when this runs for an event, every page has handled that event.
    seen: list[tuple[str, bool, bool]] = []
    state.job_changed.connect(lambda job: seen.append(
        (job["id"], runs.model.row_of(job["id"]) >= 0, monitor.run_combo.findData(job["id"]) >= 0)))
    with BlockingClient.connect(gui_home, client="test-jobs-state", timeout=30) as other:
        job = other.call("jobs.start", kind="train.finetune", spec=copy.deepcopy(TINY), name="one event")
        qtbot.waitUntil(lambda: any(s[0] == job["id"] for s in seen), timeout=20_000)
        first = next(s for s in seen if s[0] == job["id"])
        assert first == (job["id"], True, True)  # the first event for it reached both pages
        assert state.get(job["id"])["name"] == "one event"
        other.call("jobs.cancel", id=job["id"])
    # Its end, too: one record, the same on both pages.
    qtbot.waitUntil(lambda: (state.get(job["id"]) or {}).get("state") in FINAL_STATES, timeout=RUN_TIMEOUT_MS)
    final = state.get(job["id"])["state"]
    row = runs.model.row_of(job["id"])
    assert runs.model.job(row)["state"] == final
    assert f"({final})" in monitor.run_combo.itemText(monitor.run_combo.findData(job["id"]))
    assert sum(1 for s in client._subscriptions if "jobs" in s.topics) == 1
