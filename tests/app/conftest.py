"""GUI test fixtures: an offscreen Qt, a private EMBER_HOME, and the real engine.

The GUI under test starts the engine itself (that is part of what is tested);
teardown stops every engine a test may have left behind, so nothing outlives it.

``EMBER_TEST_ENGINE=tls`` runs the same tests against a team engine: the test's engine is started listening
on TCP with TLS as well, and every window connects to it over TLS with a user's token (an admin of every
project), accepted certificate and saved login as a GUI on another machine has them (docs/security.md).
Tests that pick the window's engine themselves (how it starts, restarts or stops this machine's engine, or
connects to a team engine) are marked ``own_engine`` and skipped then.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything imports Qt

import psutil
import pytest

from engine.api import paths as paths_mod
from engine.api.protocol import RpcError
from engine.cli.client import BlockingClient, EngineNotRunning
from tests.conftest import alive, kill_job_groups
from tests.timing import scaled

CONNECT_TIMEOUT_MS = 40_000  # the CI machines have two cores; an engine start can be slow


def _scale_qt_waits() -> None:
    """pytest-qt's waits take their limits scaled by the machine's slowness (tests/timing.py), as
    ``wait_for`` does; ``qtbot.wait(ms)`` is a pause, not a limit, and stays as written."""
    from pytestqt.qtbot import QtBot

    for name in ("waitUntil", "waitSignal", "waitSignals", "waitCallback", "waitActive", "waitExposed"):
        original = getattr(QtBot, name)

        def wait(self, *args, _original=original, timeout: int = 5000, **kwargs):
            return _original(self, *args, timeout=int(scaled(timeout)) if timeout and timeout > 0 else timeout,
                             **kwargs)

        wait.__doc__ = original.__doc__
        setattr(QtBot, name, wait)


_scale_qt_waits()
OVER_TLS = os.environ.get("EMBER_TEST_ENGINE") == "tls"


def engine_pid(paths: paths_mod.Paths) -> int | None:
    """The pid of the engine answering for ``paths``, or None."""
    try:
        with BlockingClient.connect(paths, client="test-probe", timeout=5) as c:
            return int(c.call("engine.status")["pid"])
    except (EngineNotRunning, OSError, RpcError):
        return None


def engines_for(paths: paths_mod.Paths) -> set[int]:
    """Engine processes whose EMBER_HOME is this test's, whatever state they are in."""
    found = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (proc.info["cmdline"] or [])[-3:] == ["-m", "engine", "serve"] and \
                    proc.environ().get("EMBER_HOME") == str(paths.home):
                found.add(proc.info["pid"])
    return found


def stop_engine(paths: paths_mod.Paths, extra_pids: tuple[int, ...] = ()) -> None:
    """Stop the engine for ``paths`` politely, then SIGKILL whatever is left."""
    pids = {pid for pid in extra_pids if pid}
    with contextlib.suppress(EngineNotRunning, OSError, RpcError):
        with BlockingClient.connect(paths, client="test-teardown", timeout=5) as c:
            pids.add(int(c.call("engine.status")["pid"]))
            c.call("engine.shutdown")
    with contextlib.suppress(OSError, ValueError):
        pids.add(int(paths.lock.read_text().strip()))  # the engine writes its pid there
    pids |= engines_for(paths)  # one still starting has neither answered nor locked yet
    for pid in pids:  # SIGTERM is an orderly stop too (and harmless to one already stopping)
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if alive(pid) and "engine" in " ".join(psutil.Process(pid).cmdline()):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if alive(pid) and "engine" in " ".join(psutil.Process(pid).cmdline()):
                os.kill(pid, signal.SIGKILL)
    kill_job_groups(paths.home)
    assert not {pid for pid in engines_for(paths) if alive(pid)}, "an engine outlived its test"


@pytest.fixture(autouse=True)
def no_widget_outlives_its_test(qapp) -> Iterator[None]:
    """Delete the windows, menus and popups a test made once it is over (torn down last: after the engines
    are stopped). Closed widgets are only deleted when Qt next processes deferred deletions, and parentless
    ones (pyqtgraph's context menus, popups) never are: they piled up in the worker's one QApplication, to 3,000
    widgets after a few files, and every app-wide change (a theme, a font size) restyled them all, 5 s of a
    theme test growing to 100 s."""
    from PySide6.QtCore import QCoreApplication, QEvent

    before = set(qapp.topLevelWidgets())
    yield
    for widget in qapp.topLevelWidgets():
        if widget not in before:
            widget.close()
            widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture(autouse=True)
def no_gui_errors(caplog) -> Iterator[None]:
    """Fail a test whose page callbacks raised: the client logs those instead of crashing."""
    yield
    errors = [r for r in caplog.get_records("call")
              if r.name.startswith("app.") and r.levelno >= logging.ERROR]
    assert not errors, "errors in the GUI:\n" + "\n".join(r.getMessage() for r in errors)


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path, monkeypatch) -> Iterator[None]:
    """Every test gets its own settings file: none reads or writes the user's preferences."""
    from app.state.prefs import reset_prefs

    monkeypatch.setenv("EMBER_SETTINGS_FILE", str(tmp_path / "settings.ini"))
    reset_prefs()
    yield
    reset_prefs()


@pytest.fixture(autouse=True)
def own_engine_only_here(request) -> None:
    if OVER_TLS and request.node.get_closest_marker("own_engine"):
        pytest.skip("the test picks the window's engine itself (EMBER_TEST_ENGINE=tls)")


@pytest.fixture
def gui_home(ember_home: paths_mod.Paths) -> Iterator[paths_mod.Paths]:
    yield ember_home
    stop_engine(ember_home)


def serve_over_tls(paths: paths_mod.Paths, folder, monkeypatch) -> subprocess.Popen | None:
    """Start the test's engine on TLS as well, and point the GUI's preferences at it with a user's token."""
    from app.state.prefs import prefs
    from engine.api.remote_engine import KnownEngines, SavedLogins
    from tests.conftest import start_engine_process

    proc = None
    if engine_pid(paths) is None:  # else the test started its own engine (on TLS: tests/app/test_remote_gui.py)
        proc = start_engine_process(paths, "--listen", "127.0.0.1:0")
    with BlockingClient.connect(paths, client="test-setup", timeout=30) as c:
        tls = c.call("engine.status").get("tls")
        assert tls, "the test's engine was started without --listen: it cannot serve a GUI over TLS"
        token = c.call("users.add", name="tester", role="admin", projects=["*"])["token"]
    monkeypatch.setenv("EMBER_KNOWN_ENGINES", str(folder / "known_engines.json"))
    KnownEngines(paths_mod.known_engines_file()).accept(tls["listen"], tls["fingerprint"])
    SavedLogins(paths_mod.saved_logins_file()).save(tls["listen"], token)
    prefs().set("remote_engine", tls["listen"])
    return proc


@pytest.fixture
def make_window(qtbot, gui_home, tmp_path, monkeypatch) -> Iterator[Callable[..., object]]:
    """Build, show and start main windows; all are closed and their engines stopped after."""
    from app.main_window import MainWindow

    windows: list[MainWindow] = []
    served: list[subprocess.Popen | None] = []

    def make(start: bool = True, page: str = "runs") -> MainWindow:
        if OVER_TLS and not served:
            served.append(serve_over_tls(gui_home, tmp_path, monkeypatch))
        window = MainWindow()
        qtbot.addWidget(window)
        window.show_page(page)
        window.show()
        if start:
            window.engine.start()
        windows.append(window)
        return window

    yield make
    children = []
    for window in windows:
        child = window.engine._child
        if child is not None:
            children.append(child)
        window.close()
    served_procs = [p for p in served if p is not None]
    stop_engine(gui_home, tuple(c.pid for c in children) + tuple(p.pid for p in served_procs))
    for child in [*children, *served_procs]:  # reap what the GUIs started, so no zombie outlives the test
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(10)


def wait_connected(qtbot, window) -> None:
    qtbot.waitUntil(lambda: window.engine.state == "connected", timeout=CONNECT_TIMEOUT_MS)
