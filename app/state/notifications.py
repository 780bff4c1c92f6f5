"""The notification centre: finished and failed jobs, and errors from anywhere, kept as readable entries.

Every entry has a short title, a sentence saying what happened and what to do,
and optional ``details`` (a traceback, the engine's full error, the last lines
of a job's log) that only the Details view shows: the user never gets a raw
stack in a message box, and nothing fails silently.

Where entries come from:

- ``JobWatcher``: live state changes of jobs (the JobsState's ``job_changed``,
  fed by the engine's ``jobs`` topic). Only live changes count, so connecting to an engine with a long history does
  not replay a notification for every job that ever ended.
- ``EngineErrors``: engine replies to requests sent without an error callback
  (a page that does not handle the error itself), and the client's own
  problems. Connection errors are left to the connection banner.
- ``excepthook(centre)``: an exception nobody caught in a Qt slot.
- ``report_error(title, text, details)``: any other code, through the centre
  ``install``-ed at startup.

Desktop notifications for finished and failed jobs go through
``QSystemTrayIcon`` when the platform has a system tray. The offscreen
platform (tests, CI) and some desktops have none: then only the entry is kept.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QSystemTrayIcon

from app.models.jobs import best_text, is_system
from app.state.prefs import prefs
from app.text import format as fmt
from engine.api.job_terms import FINETUNE, kind_noun

log = logging.getLogger(__name__)

LEVELS = ("info", "success", "warning", "error")
MAX_ENTRIES = 200  # older entries are dropped; the engine keeps the jobs themselves
LOG_TAIL = 60  # lines of a failed job's log put in its Details
TRAY_MESSAGE_MS = 8000

# What a job of each kind is called in a sentence ("Export finished").

# Client-side error codes (app/connection/engine_client.py) that mean "no connection": the banner says so already.
_CONNECTION_CODES = (-32090, -32091)


@dataclass
class Notification:
    id: int
    time: float  # epoch seconds
    level: str  # one of LEVELS
    title: str
    text: str
    details: str = ""
    job_id: str | None = None
    read: bool = False


class NotificationCentre(QObject):
    """The last MAX_ENTRIES notifications of this window, oldest first."""

    added = Signal(object)  # Notification
    changed = Signal()  # anything: added, read, details filled in, cleared

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._entries: list[Notification] = []
        self._next_id = 1
        self._tray: QSystemTrayIcon | None = None
        self._tray_job: str | None = None
        self._watchers: list[QObject] = []

    # -- reading ---------------------------------------------------------------------

    @property
    def entries(self) -> list[Notification]:
        """Oldest first (the panel shows them newest first)."""
        return list(self._entries)

    @property
    def unread(self) -> int:
        return sum(not entry.read for entry in self._entries)

    def entry(self, entry_id: int) -> Notification | None:
        return next((e for e in self._entries if e.id == entry_id), None)

    # -- changing --------------------------------------------------------------------

    def add(self, level: str, title: str, text: str, details: str = "",
            job_id: str | None = None) -> Notification:
        if level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
        newest = self._entries[-1] if self._entries else None
        if newest is not None and not newest.read and job_id is None and \
                (newest.level, newest.title, newest.text, newest.job_id) == (level, title, text, None):
            # The same problem again (a page retrying, say): one entry, moved to now, not a flood.
            newest.time = time.time()
            newest.details = details or newest.details
            self.changed.emit()
            return newest
        entry = Notification(self._next_id, time.time(), level, title, text, details, job_id)
        self._next_id += 1
        self._entries.append(entry)
        del self._entries[:-MAX_ENTRIES]
        log.log(logging.WARNING if level == "error" else logging.INFO, "notification: %s: %s", title, text)
        self.added.emit(entry)
        self.changed.emit()
        if job_id and level in ("success", "error"):
            self._desktop(entry)
        return entry

    def set_details(self, entry: Notification, details: str) -> None:
        entry.details = details
        self.changed.emit()

    def mark_read(self, entry_id: int) -> None:
        entry = self.entry(entry_id)
        if entry is not None and not entry.read:
            entry.read = True
            self.changed.emit()

    def mark_all_read(self) -> None:
        if self.unread:
            for entry in self._entries:
                entry.read = True
            self.changed.emit()

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self.changed.emit()

    # -- sources -----------------------------------------------------------------------

    def watch(self, engine) -> None:
        """Take job endings and unhandled engine errors from ``engine`` (an EngineProcess)."""
        self._watchers += [JobWatcher(self, engine, self), EngineErrors(self, engine.client, self)]

    def open_job(self, job_id: str) -> None:
        """Bring the window up and show the job on Monitor (the entries' Open action)."""
        window = self.parent()
        nav = getattr(window, "nav", None)  # the main window's Navigator
        if window is None or nav is None:
            return
        if window.isMinimized():
            window.showNormal()
        window.raise_()
        window.activateWindow()
        nav.show("monitor", job_id=job_id)

    # -- the desktop ---------------------------------------------------------------------

    def _desktop(self, entry: Notification) -> None:
        """A tray message for a finished or failed job, where there is a tray and the user wants them."""
        if not QSystemTrayIcon.isSystemTrayAvailable() or not desktop_notifications_wanted():
            return
        if self._tray is None:
            from app.state.style import icon

            self._tray = QSystemTrayIcon(icon("ember"), self)
            self._tray.setToolTip("Ember Studio")
            self._tray.messageClicked.connect(self._tray_clicked)
            self._tray.show()
        self._tray_job = entry.job_id
        kind = QSystemTrayIcon.MessageIcon.Critical if entry.level == "error" \
            else QSystemTrayIcon.MessageIcon.Information
        self._tray.showMessage(entry.title, entry.text, kind, TRAY_MESSAGE_MS)

    def _tray_clicked(self) -> None:
        if self._tray_job:
            self.open_job(self._tray_job)


def desktop_notifications_wanted() -> bool:
    """The user's preference (on by default; an unreadable value reads as the default)."""
    return bool(prefs().get("desktop_notifications"))


# -- job endings ------------------------------------------------------------------------------

def job_title(job: dict[str, Any], verb: str) -> str:
    """'Fine-tune “tickets” finished'; a job named after its kind (the default) is not named twice."""
    kind = str(job.get("kind") or "")
    name = str(job.get("name") or "")
    subject = kind_noun(kind) if not name or name == kind else f"{kind_noun(kind)} “{name}”"
    return f"{subject} {verb}"


def job_ended(job: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """(level, title, text, details) for a job that reached a final state, else None."""
    state = job.get("state")
    ran = fmt.job_duration(job)
    if state == "succeeded":
        best = (job.get("summary") or {}).get("best")
        facts = [f"best {best_text(best)}" if best and best.get("value") is not None else "",
                 f"ran {ran}" if ran != "—" else ""]
        text = "; ".join(f for f in facts if f) or "Done"
        return "success", job_title(job, "finished"), f"{text[0].upper()}{text[1:]}. Open it to see the results.", ""
    if state == "failed":
        error = job.get("error") or {}
        message = str(error.get("message") or "The job failed without saying why.")
        hint = str(error.get("hint") or "Open it and read its log for the reason.")
        text = message if hint in message else f"{message}\n{hint}"  # some messages quote their hint
        return "error", job_title(job, "failed"), text, failure_details(job)
    if state == "stopped":
        resumable = job.get("kind") == FINETUNE
        text = "Stopped on request" + ("; it saved a checkpoint and can be resumed." if resumable else ".")
        return "info", job_title(job, "stopped"), text, ""
    if state == "cancelled":
        return "info", job_title(job, "cancelled"), "Cancelled on request.", ""
    return None


def failure_details(job: dict[str, Any], log_lines: list[str] | None = None) -> str:
    """Everything the engine says about a failed job; the log's last lines when they are known."""
    error = job.get("error") or {}
    rows = [
        ("Job", f"{job.get('id', '')} ({job.get('kind', '')})"),
        ("Name", str(job.get("name") or "")),
        ("Error", str(error.get("message") or "")),
        ("Hint", str(error.get("hint") or "")),
        ("Exit code", "" if job.get("exit_code") is None else str(job.get("exit_code"))),
        ("Run directory", str(job.get("run_dir") or "")),
    ]
    extra = {k: v for k, v in error.items() if k not in ("message", "hint")}
    if extra:
        rows.append(("Error data", json.dumps(extra, indent=1, default=str)))
    text = "\n".join(f"{key}: {value}" for key, value in rows if value)
    if log_lines:
        text += f"\n\nLast {len(log_lines)} lines of its log:\n" + "\n".join(log_lines)
    return text


class JobWatcher(QObject):
    """Adds an entry when a job ends: live ``jobs`` events only, never the history."""

    def __init__(self, centre: NotificationCentre, engine, parent: QObject | None = None):
        super().__init__(parent)
        self._centre = centre
        self._client = engine.client
        self._states: dict[str, str] = {}
        # Live changes only (job_changed), never the list read at connect (jobs_reset).
        engine.jobs.job_changed.connect(self._on_job)
        engine.jobs.job_removed.connect(lambda job_id: self._states.pop(job_id, None))

    def _on_job(self, job: dict[str, Any]) -> None:
        job_id = job["id"]
        if is_system(job):
            return  # a machine probe: Settings shows its outcome where it was asked for
        state = str(job.get("state") or "")
        before, self._states[job_id] = self._states.get(job_id), state
        if state == before:
            return
        ended = job_ended(job)
        if ended is None:
            return
        level, title, text, details = ended
        entry = self._centre.add(level, title, text, details, job_id=job_id)
        if level == "error":
            self._add_log(entry, job)

    def _add_log(self, entry: Notification, job: dict[str, Any]) -> None:
        """The traceback of a crashed job is in its log: fetch the tail into Details."""
        def done(reply: dict[str, Any]) -> None:
            lines = [str(line) for line in reply.get("lines") or []]
            if lines:
                self._centre.set_details(entry, failure_details(job, lines))

        # A log that cannot be read leaves the details as they are; nothing to add.
        self._client.request("jobs.logs", {"id": job["id"], "tail": LOG_TAIL}, done, lambda _e: None)


# -- errors ------------------------------------------------------------------------------------

def request_details(method: str, err) -> str:
    rows = [f"Request: {method}", f"Error code: {err.code}", f"Message: {err.message}"]
    if err.hint:
        rows.append(f"Hint: {err.hint}")
    extra = {k: v for k, v in (err.data or {}).items() if k != "hint"}
    if extra:
        rows.append("Data: " + json.dumps(extra, indent=1, default=str))
    return "\n".join(rows)


class EngineErrors(QObject):
    """Engine errors no page handled, and the client's own problems, as entries.

    A request sent without an error callback fails on ``request_failed``
    (method, RpcError) and then on ``error`` (the same as text, for the status
    bar): the first makes the entry, the second is then skipped. Other text on
    ``error`` (a page callback that raised, an unreadable frame) becomes an
    entry too, with the traceback when one is being handled.
    """

    def __init__(self, centre: NotificationCentre, client, parent: QObject | None = None):
        super().__init__(parent)
        self._centre = centre
        self._covered = ""  # the error text that request_failed has already turned into an entry
        client.request_failed.connect(self._on_request_failed)
        client.error.connect(self._on_error)

    def _on_request_failed(self, method: str, err) -> None:
        self._covered = f"{method}: {err}"
        if err.code in _CONNECTION_CODES:
            return  # the connection banner shows this
        hint = err.hint or "Check the details, then try again."
        text = err.message if err.message.endswith(".") else f"{err.message}."
        text = text if hint in text else f"{text} {hint}"
        self._centre.add("error", "The engine could not do that", text,
                         request_details(method, err))

    def _on_error(self, text: str) -> None:
        if text == self._covered:
            self._covered = ""
            return
        # The client emits `error` inside its `except` block when a page's callback raised,
        # and the signal is delivered synchronously: the traceback is still at hand here.
        exc = sys.exc_info()[1]
        details = "".join(traceback.format_exception(exc)) if exc is not None else ""
        self._centre.add("error", "Something went wrong in Ember Studio", text, details)


# -- anywhere else -------------------------------------------------------------------------------

_installed: NotificationCentre | None = None


def install(centre: NotificationCentre | None) -> None:
    """Make ``centre`` the one ``report_error`` uses (the main window installs its own)."""
    global _installed
    _installed = centre


def installed() -> NotificationCentre | None:
    centre = _installed
    return centre if centre is not None and shiboken6.isValid(centre) else None


def report_error(title: str, text: str, details: str = "") -> Notification | None:
    """An error entry in the installed centre; only a log line when there is none (headless use)."""
    centre = installed()
    if centre is None:
        log.warning("%s: %s%s", title, text, f"\n{details}" if details else "")
        return None
    return centre.add("error", title, text, details)


def excepthook(centre: NotificationCentre) -> Callable[..., None]:
    """A sys.excepthook: log the traceback and add an error entry; the app goes on."""
    app_log = logging.getLogger("app")

    def hook(exc_type, exc, tb) -> None:
        app_log.error("uncaught error", exc_info=(exc_type, exc, tb))
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        text = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
        target = centre if shiboken6.isValid(centre) else installed()
        if target is None:
            return
        target.add("error", "Something went wrong in Ember Studio",
                   f"{text}. Ember Studio carries on; the details hold the traceback for a bug report.",
                   details)
        window = target.parent()
        if hasattr(window, "statusBar"):
            window.statusBar().showMessage(
                f"Something went wrong in Ember Studio: {text} (details under Notifications)", 15000)

    return hook
