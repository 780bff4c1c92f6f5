"""The Hosts page against the real engine and a real OpenSSH server on 127.0.0.1.

A host is added through the form, its key fingerprint is shown for a person to
compare and trusted, and the probe's facts about this very machine appear on
its card; a host nobody listens for shows why on its card instead.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import version

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit, QMessageBox

from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected
from tests.sshd import free_port, host_venv, make_sshd

pytestmark = pytest.mark.slow
PROBE_TIMEOUT_MS = 60_000


def click(qtbot, button) -> None:
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def test_add_trust_probe_and_an_unreachable_host(qtbot, make_window, gui_home, sshd):
    window = make_window(page="hosts")
    wait_connected(qtbot, window)
    page = window.page("hosts")
    qtbot.waitUntil(lambda: page.empty_state.isVisible(), timeout=10_000)
    assert "A host is another machine" in " ".join(w.text() for w in page.empty_state.findChildren(type(page.intro)))

    # The form checks fields itself before sending: nothing reaches the engine.
    click(qtbot, page.empty_add_button)
    dialog = page.host_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.set_values({**sshd.host("bad name"), "python": sys.executable})
    click(qtbot, dialog.ok_button)
    assert "letters, digits" in dialog.error_for("name")
    assert dialog.isVisible() and not page.cards

    # First contact: the key is shown to compare, exactly the server's.
    dialog.set_values({"name": "loop"})
    click(qtbot, dialog.ok_button)
    qtbot.waitUntil(lambda: page.key_dialog is not None and page.key_dialog.isVisible(), timeout=20_000)
    assert not dialog.isVisible()
    keys = page.key_dialog
    assert keys.fingerprint == sshd.fingerprint
    assert keys.fingerprint_label.text() == sshd.fingerprint
    assert keys.trust_button is not None
    assert page.card("loop").key_badge.text() == "key not trusted yet"
    click(qtbot, keys.trust_button)

    # Trusted, then probed: the facts are this machine's, read over SSH.
    card = page.card("loop")
    qtbot.waitUntil(lambda: card.hardware.value("CPU") != "", timeout=PROBE_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not card.busy_text, timeout=PROBE_TIMEOUT_MS)
    assert card.key_badge.text() == "key trusted"
    assert f"{os.cpu_count()} cores" in card.hardware.value("CPU")
    assert card.software.value("Python").startswith(platform.python_version())
    assert sys.executable in card.software.value("Python")
    assert card.software.value("PyTorch") == version("torch")
    assert card.hardware.value("GPUs")  # the GPUs, or "no GPU"
    assert card.ready_badge.text() in ("Ready", "Not ready")
    assert card.age_label.text() == "probed just now"
    assert card.error_text() == ""
    assert card.buttons["forget_key"].isVisible()
    assert not page.empty_state.isVisible()

    # A name the engine already has comes back as a field error, next to the field.
    second = page.add_host()
    second.set_values({**sshd.host("loop"), "python": sys.executable})
    click(qtbot, second.ok_button)
    qtbot.waitUntil(lambda: second.error_for("name") != "", timeout=10_000)
    assert second.isVisible()
    second.reject()

    # Nobody listens on this port: the card says so (message and hint), no key is asked about.
    third = page.add_host()
    port = free_port()
    third.set_values({**sshd.host("nowhere"), "port": port, "python": sys.executable})
    click(qtbot, third.ok_button)
    qtbot.waitUntil(lambda: page.card("nowhere") is not None and page.card("nowhere").error_text() != "",
                    timeout=30_000)
    nowhere = page.card("nowhere")
    assert f"127.0.0.1:{port}" in nowhere.error_text()
    assert nowhere.key_badge.text() == "key not checked yet"
    assert len(nowhere.error_text().splitlines()) == 2  # the message, then the hint
    assert page.key_dialog is keys  # no key question for a host that did not answer
    assert nowhere.buttons["probe"].isEnabled()  # not left busy

    # A password host is asked for it each time it logs in; this server takes keys only, and says so.
    # (Its address and port are loop's, whose key is trusted already: no key question this time.)
    fourth = page.add_host()
    fourth.set_values({**sshd.host("pw"), "auth": "password", "key_path": "", "python": sys.executable})
    assert not fourth.edits["key_path"].isEnabled()
    click(qtbot, fourth.ok_button)
    qtbot.waitUntil(lambda: page.password_dialog is not None and page.password_dialog.isVisible(), timeout=20_000)
    assert page.password_dialog.textEchoMode() == QLineEdit.EchoMode.Password
    page.password_dialog.setTextValue("not-the-password")
    page.password_dialog.accept()
    pw = page.card("pw")
    qtbot.waitUntil(lambda: pw.error_text() != "", timeout=30_000)
    assert "password" in pw.error_text().lower()
    assert "password" not in pw.record and pw.buttons["probe"].isEnabled()
    assert page.key_dialog is keys

    # Edit: the form comes filled in; a rename replaces the card.
    click(qtbot, nowhere.buttons["edit"])
    edit = page.host_dialog
    assert edit.values()["port"] == port and edit.ok_button.text() == "Save"
    edit.set_values({"name": "gone"})
    click(qtbot, edit.ok_button)
    qtbot.waitUntil(lambda: page.card("gone") is not None and page.card("nowhere") is None, timeout=10_000)
    assert not edit.isVisible()

    # Remove asks first; the list also follows changes made by another client.
    page.remove_host("gone")
    click(qtbot, page.confirm_dialog.button(QMessageBox.StandardButton.Yes))
    qtbot.waitUntil(lambda: page.card("gone") is None, timeout=10_000)
    with BlockingClient.connect(gui_home, client="test-other", timeout=10) as other:
        other.call("hosts.remove", name="loop")
        other.call("hosts.remove", name="pw")
    qtbot.waitUntil(lambda: page.card("loop") is None and page.empty_state.isVisible(), timeout=10_000)


def add_and_trust(qtbot, page, host: dict) -> None:
    """The first-contact flow: the form, then the key question answered Trust, then the probe."""
    before = page.key_dialog
    dialog = page.add_host()
    dialog.set_values(host)
    click(qtbot, dialog.ok_button)
    qtbot.waitUntil(lambda: page.key_dialog is not before and page.key_dialog.isVisible(), timeout=20_000)
    click(qtbot, page.key_dialog.trust_button)
    card = page.card(host["name"])
    qtbot.waitUntil(lambda: card.hardware.value("CPU") != "" and not card.busy_text, timeout=PROBE_TIMEOUT_MS)


def test_a_changed_host_key_is_refused_until_forgotten_and_checked_again(qtbot, make_window, tmp_path):
    first = make_sshd(tmp_path / "sshd").start()
    window = make_window(page="hosts")
    wait_connected(qtbot, window)
    page = window.page("hosts")
    try:
        add_and_trust(qtbot, page, {**first.host("moved"), "python": sys.executable})
        old_fingerprint = first.fingerprint
        first.stop()
        # The "same" host answers on the same port with another key: reinstalled, or an impostor.
        second = make_sshd(tmp_path / "sshd", port=first.port).start()
    except Exception:
        first.stop()
        raise
    try:
        assert second.fingerprint != old_fingerprint
        card = page.card("moved")
        click(qtbot, card.buttons["probe"])
        qtbot.waitUntil(lambda: card.key_badge.text() == "KEY CHANGED", timeout=20_000)
        assert card.error_text() and card.key_warning.isVisible()
        assert "intercepting" in card.key_warning.text()

        # Probing again asks about the key: a warning with both fingerprints, and no way to trust.
        trusted_before = page.key_dialog
        click(qtbot, card.buttons["probe"])
        qtbot.waitUntil(lambda: page.key_dialog is not trusted_before and page.key_dialog.isVisible(),
                        timeout=20_000)
        warning = page.key_dialog
        assert warning.status == "changed" and warning.trust_button is None
        assert warning.fingerprint == second.fingerprint
        assert "CHANGED" in warning.windowTitle().upper()
        warning.reject()

        # Forget key (asked first), then the new key is a first contact again.
        click(qtbot, card.buttons["forget_key"])
        click(qtbot, page.confirm_dialog.button(QMessageBox.StandardButton.Yes))
        qtbot.waitUntil(lambda: card.key_badge.text() == "key not checked yet", timeout=10_000)
        assert not card.key_warning.isVisible()
        click(qtbot, card.buttons["probe"])
        qtbot.waitUntil(lambda: page.key_dialog is not warning and page.key_dialog.isVisible(), timeout=20_000)
        assert page.key_dialog.status == "unknown"
        assert page.key_dialog.fingerprint == second.fingerprint
        click(qtbot, page.key_dialog.trust_button)
        qtbot.waitUntil(lambda: card.key_badge.text() == "key trusted" and not card.busy_text, timeout=PROBE_TIMEOUT_MS)
        assert card.error_text() == ""
        assert card.age_label.text() == "probed just now"
    finally:
        second.stop()


def test_prepare_installs_ember_with_progress_on_the_card(qtbot, make_window, sshd, tmp_path):
    python = host_venv(tmp_path / "venv", "0.0.1")
    window = make_window(page="hosts")
    wait_connected(qtbot, window)
    page = window.page("hosts")
    add_and_trust(qtbot, page, sshd.host("old", python=str(python), workdir=str(tmp_path / "work")))
    card = page.card("old")
    assert card.ready_badge.text() == "Not ready"
    assert card.software.value("Ember") == "0.0.1"
    assert "Ember 0.0.1 on the host" in card.problems_label.text()
    assert card.buttons["prepare"].property("role") == "primary"  # the thing to do now

    click(qtbot, card.buttons["prepare"])
    assert card.busy_text and not card.buttons["probe"].isEnabled()  # busy, and the page still answers
    qtbot.waitUntil(lambda: not card.busy_text, timeout=100_000)
    assert card.error_text() == ""
    assert any(message.startswith("Copying ember_studio-") for message, _ in card.progress_seen)
    fractions = [fraction for _, fraction in card.progress_seen]
    assert fractions == sorted(fractions) and fractions[-1] >= 0.85  # up to "Checking the host" (the rest is the reply)
    assert card.ready_badge.text() == "Ready"
    assert card.software.value("Ember") != "0.0.1"
    assert not card.problems_label.isVisible()
