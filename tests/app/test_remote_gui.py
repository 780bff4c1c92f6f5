"""The GUI against a team engine over TLS (Engine › Connect to engine…): the certificate's fingerprint shown
and accepted once, two users in two windows each seeing only their project's jobs, a wrong token and a
changed certificate refused with the reason."""

from __future__ import annotations

import pytest

from engine.api.remote import KnownEngines
from tests.conftest import wait_for

pytestmark = [pytest.mark.timeout(180)]
CONNECT_MS = 30_000


@pytest.fixture
def team(gui_home, monkeypatch, tmp_path):
    """A TLS engine with two users in two projects, a finished job in each."""
    from tests.conftest import RunningEngine, start_engine_process

    monkeypatch.setenv("EMBER_KNOWN_ENGINES", str(tmp_path / "known_engines.json"))
    eng = RunningEngine(gui_home, start_engine_process(gui_home, "--listen", "127.0.0.1:0"))
    with eng.client("admin") as admin:
        tls = admin.call("engine.status")["tls"]
        tokens = {name: admin.call("users.add", name=name, role="operator", projects=[project])["token"]
                  for name, project in (("ann", "vision"), ("ben", "nlp"))}
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


def test_settings_users_card_adds_a_user_shows_the_token_once_and_revokes(qtbot, make_window):
    from app.pages.users_card import token_state

    window = make_window(page="settings")
    qtbot.waitUntil(lambda: window.engine.state == "connected", timeout=CONNECT_MS)
    users = window.page("settings").users_card
    qtbot.waitUntil(lambda: "You are local (admin" in users.me.text(), timeout=CONNECT_MS)
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
