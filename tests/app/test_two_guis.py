"""Two windows on one real engine see the same jobs and the same queue, whichever one acts."""

from __future__ import annotations

import pytest

from app.widgets.jobs_table import STATE_COLUMN
from tests.app.conftest import wait_connected

pytestmark = [pytest.mark.timeout(300)]
LONG_PROBE = {"samples": 10_000, "interval_s": 0.2}
WAIT_MS = 30_000


def state(runs, job_id: str) -> str:
    row = runs.model.row_of(job_id)
    return runs.model.index(row, STATE_COLUMN).data() if row >= 0 else ""


def test_a_change_from_one_window_shows_in_the_other(qtbot, make_window):
    first = make_window(page="runs")
    wait_connected(qtbot, first)
    second = make_window(page="runs")  # finds the engine the first window started
    wait_connected(qtbot, second)
    assert first.engine.client.server["pid"] == second.engine.client.server["pid"]
    runs_a, runs_b = first.page("runs"), second.page("runs")
    queue_a, queue_b = runs_a.queue_panel, runs_b.queue_panel

    # Settings: one window changes them, the other shows them.
    qtbot.waitUntil(lambda: queue_a.max_jobs_spin.isEnabled(), timeout=WAIT_MS)
    queue_a.max_jobs_spin.setValue(1)
    qtbot.waitUntil(lambda: queue_b.max_jobs_spin.value() == 1, timeout=WAIT_MS)
    queue_b.sharing_check.setChecked(True)
    qtbot.waitUntil(lambda: queue_a.sharing_check.isChecked(), timeout=WAIT_MS)

    # Jobs started from the first window's connection appear in the second's table and queue.
    started: list[str] = []
    for name in ("one", "two", "three"):
        first.engine.client.request("jobs.start", {"kind": "system.probe", "spec": LONG_PROBE, "name": name},
                                    lambda job: started.append(job["id"]))
        qtbot.waitUntil(lambda n=name: len(started) == ("one", "two", "three").index(n) + 1, timeout=WAIT_MS)
    one, two, three = started
    qtbot.waitUntil(lambda: state(runs_b, one) == "running" and state(runs_b, three) == "queued", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: queue_b.queued_ids() == [two, three], timeout=WAIT_MS)
    assert queue_b.reasons()[two] == "1 job already running (limit 1)"

    # Reordered in the first window: the second's queue follows.
    qtbot.waitUntil(lambda: queue_a.queued_ids() == [two, three], timeout=WAIT_MS)
    assert queue_a.select(three)
    assert queue_a.top_button.isEnabled()
    queue_a.top_button.click()
    qtbot.waitUntil(lambda: queue_b.queued_ids() == [three, two], timeout=WAIT_MS)
    # A priority set in the second window shows in the first (and reorders: two goes ahead).
    assert queue_b.select(two)
    queue_b.priority_spin.setValue(7)
    qtbot.waitUntil(lambda: queue_a.queued_ids() == [two, three], timeout=WAIT_MS)
    assert queue_a.table.item(0, 2).text() == "7"

    # Stopped from the second window's Runs page: both tables show it, and the next job starts.
    assert runs_b.select_run(one)
    runs_b.stop_button.click()
    qtbot.waitUntil(lambda: state(runs_a, one) == "stopped", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: state(runs_a, two) == "running" and state(runs_b, two) == "running", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: queue_a.queued_ids() == [three] and queue_b.queued_ids() == [three], timeout=WAIT_MS)

    for job_id in (two, three):
        first.engine.client.request("jobs.cancel", {"id": job_id})
    qtbot.waitUntil(lambda: state(runs_b, two) == "cancelled" and state(runs_b, three) == "cancelled",
                    timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not queue_b.queued_ids() and queue_b.empty.isVisibleTo(queue_b), timeout=WAIT_MS)
