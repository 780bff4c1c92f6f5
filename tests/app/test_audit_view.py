"""Settings › Audit log and Runs › Lineage… against the real engine the GUI starts."""

from __future__ import annotations

import csv
import json

from engine.api.job_terms import FINAL_STATES
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected
from tests.conftest import wait_for


def test_audit_table_filters_exports_and_the_lineage_dialog(qtbot, make_window, gui_home, tmp_path):
    window = make_window(page="settings")
    wait_connected(qtbot, window)
    # Some state-changing requests from another client: one job started, one refused stop, a template saved.
    with BlockingClient.connect(gui_home, client="audit-test") as c:
        job = c.call("jobs.start", kind="system.probe", spec={}, name="probe")
        c.call("templates.save", name="tiny", kind="system.probe", spec={})
        try:
            c.call("jobs.stop", id="no-such-run")
        except Exception:  # noqa: BLE001, S110 - refused, and that is what the log must show
            pass
        wait_for(lambda: c.call("jobs.get", id=job["id"])["state"] in FINAL_STATES, timeout=60, what="the probe to end")

    view = window.page("settings").audit_view
    view.reload()
    qtbot.waitUntil(lambda: view.table.rowCount() >= 3, timeout=10_000)
    view.text_edit.setText("audit-test")  # this client's requests (the GUI's own may be there too)
    qtbot.waitUntil(lambda: view.table.rowCount() == 3, timeout=10_000)
    shown = [[view.table.item(r, c).text() for c in range(view.table.columnCount())]
             for r in range(view.table.rowCount())]
    actions = [row[3] for row in shown]
    assert actions[:3] == ["jobs.stop", "templates.save", "jobs.start"], shown
    assert shown[0][2] == "audit-test" and shown[0][4] == "no-such-run" and shown[0][5] == "no" and shown[0][6]
    assert shown[2][4] == job["id"] and shown[2][5] == "yes"
    assert shown[0][1] == "local"  # the engine's own admin, on its machine
    assert "Showing 3 of 3" in view.count_label.text()

    # The action filter goes to the engine; the count is of every match.
    view.action_combo.setCurrentText("jobs.*")
    qtbot.waitUntil(lambda: view.table.rowCount() == 2, timeout=10_000)
    assert {view.table.item(r, 3).text() for r in range(2)} == {"jobs.start", "jobs.stop"}
    view.user_edit.setText("nobody")  # the user filter goes to the engine too
    qtbot.waitUntil(lambda: view.table.rowCount() == 0, timeout=10_000)
    view.user_edit.setText("local")
    qtbot.waitUntil(lambda: view.table.rowCount() == 2, timeout=10_000)
    view.action_combo.setCurrentText("All actions")
    view.text_edit.setText("tiny")
    qtbot.waitUntil(lambda: view.table.rowCount() == 1 and view.table.item(0, 3).text() == "templates.save",
                    timeout=10_000)
    assert view.table.item(0, 4).text() == "tiny"
    view.text_edit.setText("audit-test")
    qtbot.waitUntil(lambda: view.table.rowCount() == 3, timeout=10_000)

    # Export writes the matching records, page by page, as CSV (and JSON Lines).
    out = tmp_path / "audit.csv"
    with qtbot.waitSignal(view.exported, timeout=10_000) as sig:
        view.export(str(out))
    assert sig.args == [str(out), 3]
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["action"] for r in rows] == ["jobs.stop", "templates.save", "jobs.start"]
    assert rows[2]["target"] == job["id"] and rows[2]["client"] == "audit-test" and rows[0]["ok"] == "no"
    jsonl = tmp_path / "audit.jsonl"
    with qtbot.waitSignal(view.exported, timeout=10_000):
        view.export(str(jsonl))
    assert [json.loads(line)["action"] for line in jsonl.read_text().splitlines()][-1] == "jobs.start"

    # Runs › Lineage… opens the run's lineage, and saves it.
    runs = window.show_page("runs")
    qtbot.waitUntil(lambda: runs.select_run(job["id"]), timeout=10_000)
    qtbot.waitUntil(runs.lineage_button.isEnabled, timeout=5_000)
    runs.lineage_button.click()
    dialog = runs.lineage_dialog
    with qtbot.waitSignal(dialog.loaded, timeout=30_000):
        pass
    assert dialog.record["run"]["id"] == job["id"] and dialog.record["run"]["kind"] == "system.probe"
    text = dialog.text()
    assert f"Lineage of {job['id']}" in text and "system.probe" in text and "Packages" in text
    saved = tmp_path / "lineage.json"
    dialog.save(str(saved))
    assert json.loads(saved.read_text())["run"]["id"] == job["id"]
    dialog.save(str(tmp_path / "lineage.md"))
    assert job["id"] in (tmp_path / "lineage.md").read_text()
    dialog.close()
