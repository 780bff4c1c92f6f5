"""Find or start the engine, and keep the GUI connected to it.

The engine outlives the GUI: it is started in its own session with its output
going to engine.log, so closing the window (or a Ctrl-C in the terminal that
launched it) never stops the engine or its jobs. Starting one is always safe:
the engine holds an flock on engine.lock, so a duplicate exits with code 3 at
once and the GUI simply connects to the one already running.

States, as shown in the status bar:
  starting      looking for an engine, starting one if none answers
  connected     handshake done; requests and events flow
  reconnecting  the engine went away without notice; retrying and restarting it
  stopped       the engine announced an orderly shutdown (or would not start);
                nothing restarts it until the user asks

With a remote engine (Engine › Connect to engine…, or the ``remote_engine`` preference with a saved token),
the client connects over TLS to that address instead and never starts an engine here; a certificate that
is not the accepted one stops it with the reason (docs/security.md).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.connection.engine_client import EngineClient
from app.state.job_list import JobsState
from app.state.prefs import engine_paths_from_prefs, prefs
from engine.api import paths as engine_paths
from engine.api.remote_engine import SavedLogins

log = logging.getLogger(__name__)

STARTING = "starting"
CONNECTED = "connected"
RECONNECTING = "reconnecting"
STOPPED = "stopped"

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 2.0
# An engine that dies this many times in a row before answering is broken, not
# busy; restarting it forever would only hide the error in engine.log.
MAX_FAILED_STARTS = 3
DUPLICATE_ENGINE_EXIT = 3  # engine's exit code when another engine holds the lock
# The engine serves a Unix socket and starts jobs in POSIX sessions: Linux and macOS. On Windows the GUI
# connects to an engine elsewhere over TLS.
LOCAL_ENGINE_POSSIBLE = sys.platform != "win32"


class EngineProcess(QObject):
    """Owns the EngineClient and drives it through the four states above."""

    # Emitted on every state change, and while reconnecting on each new attempt.
    state_changed = Signal(str)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.client = EngineClient(parent=self)
        self.client.connected.connect(self._on_connected)
        self.client.certificate_refused.connect(self._on_certificate_refused)
        self.client.hello_refused.connect(self._on_hello_refused)
        self.client.disconnected.connect(self._on_disconnected)
        self.client.subscribe(["engine"], self._on_engine_event)
        # Every job record, for every page: the one jobs.list and the one "jobs" subscription.
        self.jobs = JobsState(self.client, self)
        self.state = STARTING
        self.attempt = 0
        self.version = ""
        self.engine_pid: int | None = None
        self.stop_reason = ""  # from the engine's `stopping` event, e.g. "requested by ember-cli"
        self.start_failure = ""  # set when the engine would not start; shown instead
        self.paths: engine_paths.Paths | None = None
        self.remote: dict[str, str] | None = None  # {address, token} of a team engine, else this machine's
        self.user: dict[str, Any] = {}  # who the engine says this connection is: {name, role, projects}
        self.refused_certificate: tuple[str, str, str] | None = None  # (address, fingerprint, unknown|changed)
        self._home_from_prefs = False  # the home is the "data_dir" preference, passed on as EMBER_HOME
        self._child: subprocess.Popen | None = None
        self._child_answered = False  # our child became the engine we talked to
        self._failed_starts = 0
        self._delay = FIRST_DELAY_S
        self._stop_expected = False
        self._closed = False
        self._retry = QTimer(self, singleShot=True)
        self._retry.timeout.connect(self._try_connect)
        # Poll our child now and then so an engine that exits while we are
        # stopped (or connected to another engine) never lingers as a zombie.
        self._reaper = QTimer(self, interval=1000)
        self._reaper.timeout.connect(self._reap)

    # -- public -----------------------------------------------------------------

    def start(self) -> None:
        """Connect to the engine, starting one if none answers (a remote one: only connect)."""
        self._closed = False
        self.paths, self._home_from_prefs = engine_paths_from_prefs()
        self.refused_certificate = None
        if self.remote is None:
            self.remote = _saved_remote()
        if self.remote is None and not LOCAL_ENGINE_POSSIBLE:
            self.start_failure = ("On Windows the engine runs on a Linux machine (a team's GPU server): "
                                  "Engine › Connect to engine….")
            self._set_state(STOPPED)
            return
        self._stop_expected = False
        self._failed_starts = 0
        self._delay = FIRST_DELAY_S
        self.attempt = 0
        self.stop_reason = ""
        self.start_failure = ""
        self._set_state(STARTING)
        self._try_connect()

    def connect_remote(self, address: str, token: str) -> None:
        """Leave this machine's engine (it keeps running) for the team engine at ``address``."""
        self._switch({"address": address, "token": token})

    def use_local(self) -> None:
        """Back to this machine's engine."""
        prefs().set("remote_engine", "")
        self._switch(None)

    def _switch(self, remote: dict[str, str] | None) -> None:
        self._retry.stop()
        self._closed = True  # the disconnection that follows is ours: no reconnecting to the old engine
        self.client.close()
        self._closed = False
        self.remote = remote
        self.state = STARTING
        self.start()

    def stop_engine(self) -> None:
        """Ask the engine to shut down (its jobs keep running); we then show `stopped`."""
        self._stop_expected = True

        def refused(err: Any) -> None:
            self._stop_expected = False
            self.client.error.emit(f"The engine did not stop: {err}")

        self.client.request("engine.shutdown", {}, None, refused)

    def close(self) -> None:
        """Disconnect for good (the window is closing). The engine keeps running."""
        self._closed = True
        self._retry.stop()
        self._reaper.stop()
        self.client.close()
        self._reap()

    @property
    def child_pid(self) -> int | None:
        """Pid of the engine this GUI started, while it runs (tests use it)."""
        return self._child.pid if self._child is not None else None

    # -- connection loop -------------------------------------------------------------

    def _try_connect(self) -> None:
        if self._closed or self.state in (CONNECTED, STOPPED):
            return
        if self.remote is not None:
            try:
                self.client.connect_remote(self.remote["address"], self.remote["token"])
            except ValueError as exc:  # not host:port
                self.start_failure = str(exc)
                self._set_state(STOPPED)
            return
        if not self.client.connect_to_engine(self.paths):
            self._connect_failed()  # no token: no engine has ever started here

    def _on_connected(self, hello: dict[str, Any]) -> None:
        self.version = str(hello.get("version", ""))
        self.user = dict(hello.get("user") or {})
        self.engine_pid = hello.get("pid")
        self._stop_expected = False  # a new engine; any earlier stop was for the old one
        if self._child is not None and self._child.pid == self.engine_pid:
            self._child_answered = True
        self.attempt = 0
        self._delay = FIRST_DELAY_S
        self._failed_starts = 0
        self._set_state(CONNECTED)

    def _on_disconnected(self) -> None:
        if self._closed:
            return
        if self.state == CONNECTED:
            if self._stop_expected:
                self._set_state(STOPPED)
                return
            log.warning("engine went away without notice; reconnecting")
            self._delay = FIRST_DELAY_S
            self.attempt = 0
            self._set_state(RECONNECTING)
        self._connect_failed()

    def _on_certificate_refused(self, address: str, fingerprint: str, kind: str) -> None:
        self.refused_certificate = (address, fingerprint, kind)
        self.start_failure = (f"The engine at {address} presents a certificate ({fingerprint}) "
                              + ("not yet trusted: compare it and accept it in Engine › Connect to engine…"
                                 if kind == "unknown" else "other than the one accepted before: not connected"))
        self._set_state(STOPPED)

    def _on_hello_refused(self, err: Any) -> None:
        if self.remote is not None:  # a wrong or revoked token: retrying only counts as failed logins
            self.start_failure = f"The engine at {self.remote['address']} refused the token: {err}"
            self._set_state(STOPPED)

    def _connect_failed(self) -> None:
        if self._closed or self.state in (CONNECTED, STOPPED):
            return
        self._reap()
        if self.remote is not None:  # a team engine: retry, never start one here
            self.attempt += 1
            self._retry.start(int(self._delay * 1000))
            self._delay = min(self._delay * 2, MAX_DELAY_S)
            return
        if self._child is None:
            if self._failed_starts >= MAX_FAILED_STARTS:
                self.start_failure = (f"The engine exited {self._failed_starts} times while "
                                      f"starting; see {self.paths.engine_log}.")
                self._set_state(STOPPED)
                return
            self._spawn()
        self.attempt += 1
        if self.state == RECONNECTING:
            self.state_changed.emit(self.state)  # the banner shows the attempt number
        self._retry.start(int(self._delay * 1000))
        self._delay = min(self._delay * 2, MAX_DELAY_S)

    def _on_engine_event(self, _topic: str, _seq: int, data: dict) -> None:
        if data.get("state") == "stopping":
            self._stop_expected = True
            reason = data.get("reason")
            self.stop_reason = str(reason or "")

    def _set_state(self, state: str) -> None:
        if state != self.state:
            log.info("engine state: %s -> %s", self.state, state)
        self.state = state
        self.state_changed.emit(state)

    # -- the engine process --------------------------------------------------------------

    def _spawn(self) -> None:
        assert self.paths is not None
        # Private like the engine makes it: runs and the store may hold paths and specs.
        self.paths.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = dict(os.environ)
        root = _source_root()
        if root is not None:  # running from a checkout: let `-m engine` find the package
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        if self._home_from_prefs:  # the data directory preference: the engine must use the same home
            env["EMBER_HOME"] = str(self.paths.home)
        log_fd = os.open(self.paths.engine_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(log_fd, "ab") as out:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "engine", "serve"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                cwd=str(self.paths.home), env=env,
                start_new_session=True, close_fds=True,
            )
        self._child_answered = False
        log.info("started engine, pid %d", self._child.pid)
        self._reaper.start()

    def _reap(self) -> None:
        if self._child is None:
            self._reaper.stop()
            return
        code = self._child.poll()
        if code is None:
            return
        log.info("engine pid %d exited with code %s", self._child.pid, code)
        self._child = None
        self._reaper.stop()
        if code not in (0, DUPLICATE_ENGINE_EXIT) and not self._child_answered:
            self._failed_starts += 1


def _saved_remote() -> dict[str, str] | None:
    """The team engine the user connected to and asked to remember, with its saved token."""
    address = prefs().get("remote_engine")
    token = SavedLogins(engine_paths.saved_logins_file()).get(address) if address else None
    return {"address": address, "token": token} if address and token else None


def _source_root() -> Path | None:
    import engine

    root = Path(engine.__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None
