"""The GUI finds, starts, survives and reattaches to the real engine process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.app.conftest import CONNECT_TIMEOUT_MS, alive, engine_pid, wait_connected

# How the window starts, restarts, stops and re-attaches to this machine's engine.
pytestmark = [pytest.mark.slow, pytest.mark.own_engine]


def record_states(window) -> list[tuple[str, str, bool]]:
    """(state, banner text, banner shown) at every state change, as the user saw it."""
    seen: list[tuple[str, str, bool]] = []
    window.engine.state_changed.connect(
        lambda state: seen.append((state, window.banner.message.text(), window.banner.isVisible())))
    return seen


def test_gui_starts_the_engine_and_shows_connected(qtbot, make_window, gui_home):
    window = make_window()
    assert window.engine.state == "starting"
    assert window.banner.isVisible()
    wait_connected(qtbot, window)
    assert not window.banner.isVisible()
    assert window.engine_status.text.text() == "Engine connected"
    assert window.engine_status.dot.property("state") == "connected"
    assert window.engine_status.version.text().startswith("v0.1.0")
    pid = window.engine.engine_pid
    assert pid == engine_pid(gui_home) == window.engine.child_pid
    # The engine is in its own session, so closing the GUI's terminal cannot signal it.
    assert os.getsid(pid) != os.getsid(0)


def test_engine_killed_without_notice_is_restarted_and_reconnected(qtbot, make_window, gui_home):
    """The acceptance test: SIGKILL the engine; the GUI reconnects with no user action."""
    window = make_window()
    wait_connected(qtbot, window)
    first_pid = window.engine.engine_pid
    seen = record_states(window)

    os.kill(first_pid, signal.SIGKILL)

    qtbot.waitUntil(lambda: any(state == "reconnecting" for state, _, _ in seen), timeout=10_000)
    qtbot.waitUntil(lambda: window.engine.state == "connected", timeout=CONNECT_TIMEOUT_MS)
    reconnecting = [(text, shown) for state, text, shown in seen if state == "reconnecting"]
    assert all(shown for _, shown in reconnecting)
    assert "Engine connection lost — reconnecting (attempt 1)…" in [t for t, _ in reconnecting]
    assert "stopped" not in [state for state, _, _ in seen]

    new_pid = window.engine.engine_pid
    assert new_pid != first_pid and alive(new_pid)
    assert engine_pid(gui_home) == new_pid
    assert not window.banner.isVisible()
    assert window.engine_status.text.text() == "Engine connected"
    # The killed engine was this GUI's child: it must have been reaped, not left a zombie.
    assert not psutil.pid_exists(first_pid)


def test_closing_the_window_keeps_the_engine_and_a_new_window_reattaches(qtbot, make_window,
                                                                         gui_home):
    first = make_window()
    wait_connected(qtbot, first)
    pid = first.engine.engine_pid
    first.close()
    qtbot.wait(1000)
    assert alive(pid), "closing the window stopped the engine"
    assert engine_pid(gui_home) == pid

    second = make_window()
    wait_connected(qtbot, second)
    assert second.engine.engine_pid == pid
    assert second.engine.child_pid is None  # it attached; it did not start another engine


def test_orderly_stop_shows_stopped_and_does_not_restart(qtbot, make_window, gui_home):
    window = make_window()
    wait_connected(qtbot, window)
    pid = window.engine.engine_pid
    seen = record_states(window)

    # Stopped from a terminal, the way a user would. Not subprocess.run: the Qt event loop
    # must keep running (the GUI reaps the engine it started, which the CLI waits for).
    cli = subprocess.Popen([sys.executable, "-m", "engine", "stop"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    qtbot.waitUntil(lambda: window.engine.state == "stopped", timeout=20_000)
    qtbot.waitUntil(lambda: cli.poll() is not None, timeout=20_000)
    assert cli.returncode == 0, cli.stdout.read()
    assert window.banner.isVisible()
    assert window.banner.message.text().startswith("Engine stopped (requested by ember-cli).")
    assert window.banner.start_button.isVisible()
    assert window.engine_status.dot.property("state") == "stopped"
    qtbot.wait(3000)  # longer than the whole reconnect backoff
    assert window.engine.state == "stopped"
    assert [state for state, _, _ in seen] == ["stopped"]
    assert not alive(pid)
    assert engine_pid(gui_home) is None

    # The banner's button brings it back.
    qtbot.mouseClick(window.banner.start_button, _left())
    wait_connected(qtbot, window)
    assert window.engine.engine_pid not in (None, pid)


def test_stop_engine_button_on_settings(qtbot, make_window, gui_home):
    window = make_window(page="settings")
    wait_connected(qtbot, window)
    settings = window.page("settings")
    qtbot.waitUntil(lambda: settings.engine_facts.value("Process id") != "", timeout=10_000)
    assert settings.engine_facts.value("Process id") == str(window.engine.engine_pid)
    assert settings.engine_facts.value("Data folder") == str(gui_home.home)
    # The store was checked at start and backed up (engine/daemon/store_guard.py).
    qtbot.waitUntil(lambda: "last backup ember-" in settings.engine_facts.value("Store"), timeout=15_000)
    assert settings.engine_facts.value("Store").startswith("checked at start: ok")

    qtbot.mouseClick(settings.stop_button, _left())
    qtbot.waitUntil(lambda: window.engine.state == "stopped", timeout=20_000)
    assert "requested by ember-gui" in window.engine.stop_reason
    qtbot.wait(2500)
    assert window.engine.state == "stopped"
    assert not settings.probe_button.isEnabled()


def test_a_second_engine_is_refused_by_the_lock(gui_home, make_window, qtbot):
    """Starting one more engine is always safe: it exits with code 3 at once."""
    window = make_window()
    wait_connected(qtbot, window)
    duplicate = subprocess.Popen([sys.executable, "-m", "engine", "serve"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    qtbot.waitUntil(lambda: duplicate.poll() is not None, timeout=30_000)
    assert duplicate.returncode == 3
    assert engine_pid(gui_home) == window.engine.engine_pid


def _left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def test_an_engine_that_cannot_start_is_reported_not_restarted_forever(qtbot, make_window,
                                                                       gui_home, tmp_path,
                                                                       monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("the runtime dir cannot be created here")
    monkeypatch.setenv("EMBER_RUNTIME_DIR", str(blocker))
    window = make_window()
    qtbot.waitUntil(lambda: window.engine.state == "stopped", timeout=CONNECT_TIMEOUT_MS)
    text = window.banner.message.text()
    assert text.startswith("Engine stopped: The engine exited 3 times while starting")
    assert str(gui_home.engine_log) in text
    assert window.banner.start_button.isVisible()
    qtbot.wait(2500)
    assert window.engine.state == "stopped" and window.engine.child_pid is None
