"""The GUI against a team engine over TLS (Engine › Connect to engine…): the certificate's fingerprint shown
and accepted once, two users in two windows each seeing only their project's jobs, a wrong token and a
changed certificate refused with the reason."""

from __future__ import annotations

import pytest

from engine.api.remote_engine import KnownEngines
from tests.conftest import wait_for

# The windows connect themselves (Engine › Connect to engine…), in either mode of tests/app/conftest.py.
pytestmark = [pytest.mark.timeout(180), pytest.mark.own_engine]
CONNECT_MS = 30_000


@pytest.fixture
def team(gui_home, monkeypatch, tmp_path):
    """A TLS engine with two users in two projects, a finished job in each."""
    from tests.conftest import RunningEngine, start_engine_process

    monkeypatch.setenv("EMBER_KNOWN_ENGINES", str(tmp_path / "known_engines.json"))
    eng = RunningEngine(gui_home, start_engine_process(gui_home, "--listen", "127.0.0.1:0"))
    with eng.client("admin") as admin:
        tls = admin.call("engine.status")["tls"]
        tokens = {name: admin.call("users.add", name=name, role=role, projects=[project])["token"]
                  for name, role, project in (("ann", "operator", "vision"), ("ben", "operator", "nlp"),
                                              ("ada", "admin", "*"))}
        jobs = {project: admin.call("jobs.start", kind="system.probe", spec={}, name=f"{project} probe",
                                    project=project)["id"] for project in ("vision", "nlp")}
        for job_id in jobs.values():
            wait_for(lambda j=job_id: admin.call("jobs.get", id=j)["state"] == "succeeded", timeout=60)
    yield tls, tokens, jobs, tmp_path / "known_engines.json"
    eng.stop()


def _connect(qtbot, window, address: str, token: str):
    window.show_connect_dialog()
    dialog = window.connect_dialog
    dialog.address_edit.setText(address)
    dialog.token_edit.setText(token)
    dialog.remember_check.setChecked(False)
    dialog.connect_button.click()
    return dialog


def test_two_users_connect_over_tls_and_each_sees_only_their_project(qtbot, make_window, team):
    tls, tokens, jobs, known_file = team
    address, fingerprint = tls["listen"], tls["fingerprint"]
    first = make_window(start=False)
    dialog = _connect(qtbot, first, address, tokens["ann"])
    qtbot.waitUntil(dialog.accept_button.isVisible, timeout=CONNECT_MS)
    assert fingerprint in dialog.status.text() and "Compare it" in dialog.status.text()
    assert first.engine.state == "stopped"  # nothing is sent before the certificate is accepted
    dialog.accept_button.click()
    qtbot.waitUntil(lambda: first.engine.state == "connected", timeout=CONNECT_MS)
    assert first.engine.user == {"name": "ann", "role": "operator", "projects": ["vision"]}
    assert KnownEngines(known_file).get(address) == fingerprint
    qtbot.waitUntil(lambda: jobs["vision"] in first.engine.jobs, timeout=CONNECT_MS)
    assert [j["id"] for j in first.engine.jobs.all()] == [jobs["vision"]]

    second = make_window(start=False)
    _connect(qtbot, second, address, tokens["ben"])  # the certificate is known now: straight in
    qtbot.waitUntil(lambda: second.engine.state == "connected", timeout=CONNECT_MS)
    qtbot.waitUntil(lambda: jobs["nlp"] in second.engine.jobs, timeout=CONNECT_MS)
    assert [j["id"] for j in second.engine.jobs.all()] == [jobs["nlp"]]
    assert second.engine.child_pid is None and first.engine.child_pid is None  # no engine started here

    # ann starts a job from her window; an admin's window sees every project's jobs, and in Settings › Audit
    # log who did what.
    started = []
    first.engine.client.request("jobs.start", {"kind": "system.probe", "spec": {}, "name": "ann's probe"},
                                started.append)
    qtbot.waitUntil(lambda: bool(started), timeout=CONNECT_MS)
    assert started[0]["owner"] == "ann" and started[0]["project"] == "vision"
    third = make_window(start=False, page="settings")
    _connect(qtbot, third, address, tokens["ada"])
    qtbot.waitUntil(lambda: third.engine.state == "connected", timeout=CONNECT_MS)
    qtbot.waitUntil(lambda: {*jobs.values(), started[0]["id"]} <= {j["id"] for j in third.engine.jobs.all()},
                    timeout=CONNECT_MS)
    audit = third.page("settings").audit_view
    audit.user_edit.setText("ann")
    qtbot.waitUntil(lambda: audit.table.rowCount() == 1, timeout=CONNECT_MS)
    row = [audit.table.item(0, c).text() for c in range(audit.table.columnCount())]
    assert row[1] == "ann" and row[3] == "jobs.start" and row[4] == started[0]["id"] and row[5] == "yes", row
    # By now the job's record has reached every window allowed to see it; ben's (nlp) is not one of them.
    assert started[0]["id"] in first.engine.jobs and started[0]["id"] not in second.engine.jobs


def test_a_wrong_token_and_a_changed_certificate_are_refused_with_the_reason(qtbot, make_window, team):
    tls, _tokens, _jobs, known_file = team
    address = tls["listen"]
    KnownEngines(known_file).accept(address, tls["fingerprint"])
    window = make_window(start=False)
    dialog = _connect(qtbot, window, address, "emb_not-a-token")
    qtbot.waitUntil(lambda: "refused the token" in dialog.status.text(), timeout=CONNECT_MS)
    assert "Wrong token" in dialog.status.text() and window.engine.state == "stopped"

    KnownEngines(known_file).accept(address, "AB:" * 31 + "CD")  # as if the engine's certificate changed
    dialog.token_edit.setText(_tokens["ann"])
    dialog.connect_button.click()
    qtbot.waitUntil(lambda: "DIFFERENT certificate" in dialog.status.text(), timeout=CONNECT_MS)
    assert not dialog.accept_button.isVisible() and window.engine.state == "stopped"
    assert tls["fingerprint"] in dialog.status.text()


def test_settings_users_card_adds_a_user_shows_the_token_once_and_revokes(qtbot, make_window, tmp_path):
    from app.pages.settings.users_card import token_state

    window = make_window(page="settings")
    qtbot.waitUntil(lambda: window.engine.state == "connected", timeout=CONNECT_MS)
    settings = window.page("settings")
    users = settings.users_card
    qtbot.waitUntil(lambda: "You are local (admin" in users.me.text(), timeout=CONNECT_MS)
    # Alone on this machine: the team engine's settings are folded behind one sentence and a button.
    assert not users.isVisible() and settings.team_button.text() == "Show users and projects"
    settings.team_button.click()
    assert users.admin_box.isVisible()
    users.name_edit.setText("cara")
    users.role_combo.setCurrentIndex(users.role_combo.findData("viewer"))
    users.projects_edit.setText("vision, nlp")
    users.add_button.click()
    qtbot.waitUntil(lambda: users.table.rowCount() == 1, timeout=CONNECT_MS)
    assert users.last_token.startswith("emb_") and users.token_view.text() == users.last_token
    assert [users.table.item(0, c).text() for c in range(4)] == ["cara", "viewer", "vision, nlp", "active"]
    users.table.selectRow(0)
    users.revoke_button.click()
    qtbot.waitUntil(lambda: users.table.item(0, 3).text() == "revoked", timeout=CONNECT_MS)
    assert not users.token_view.isVisible()
    assert token_state({"expires_at": 1.0}, now=2.0) == "expired"

    # Projects: cara's two and the default one; vision gets a data folder.
    qtbot.waitUntil(lambda: [p["name"] for p in users.projects] == ["default", "nlp", "vision"], timeout=CONNECT_MS)
    users.projects_table.selectRow(2)
    assert users.project_name.text() == "vision" and users.project_box.isVisible()
    users.project_folders.setText(str(tmp_path))
    users.save_project_button.click()
    qtbot.waitUntil(lambda: "Project vision: data folders" in users.status.text(), timeout=CONNECT_MS)
    qtbot.waitUntil(lambda: users.projects_table.item(2, 2).text() == str(tmp_path.resolve()), timeout=CONNECT_MS)
    assert users.projects_table.item(2, 1).text() == "cara" and users.projects_table.item(2, 3).text() == "-"
