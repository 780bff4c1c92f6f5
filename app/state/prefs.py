"""The user's preferences, kept with QSettings, typed, defaulted and migrated between layouts.

Every key has a type and a default (``KEYS``); ``Prefs.get`` always returns a value of
that type, so a hand-edited or damaged settings file costs a warning in the log and the
default, never a crash. The layout is versioned: ``migrate`` runs the steps in
``MIGRATIONS`` from the stored version up to ``PREFS_VERSION``, so the next change of
layout is one more function appended there.

Tests (and anyone who wants a private profile) set ``EMBER_SETTINGS_FILE`` to an INI
file; ``prefs()`` notices when it changes and opens that file instead.

The window's geometry is kept per data folder (group ``windows``, keyed by a digest of
the folder's path): the preferences are one file whatever ``EMBER_HOME`` says, and a
window from another data folder, maybe on another screen, is no guide. A geometry that
does not fit any screen now is left unused, without a word.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QObject, QRect, QSettings, Signal

from app.models.pages import PAGE_KEYS
from app.text import format as fmt
from engine.api import paths as engine_paths

log = logging.getLogger(__name__)

ORGANISATION = APPLICATION = "Ember Studio"
SETTINGS_FILE_ENV = "EMBER_SETTINGS_FILE"


@dataclass(frozen=True)
class Key:
    default: Any
    choices: tuple[str, ...] = ()  # for a str key: the only values it may take


KEYS: dict[str, Key] = {
    "data_dir": Key(""),  # "" = the engine's own default (or EMBER_HOME)
    "theme": Key("system", ("system", "light", "dark")),
    "default_device": Key("auto", ("auto", "cpu", "cuda")),
    "units": Key("binary", ("binary", "decimal")),
    "last_page": Key(""),
    "tour_done": Key(False),
    "desktop_notifications": Key(True),
    "remote_engine": Key(""),  # host:port of a team engine to connect to over TLS; "" = this machine's
}
WINDOWS_GROUP = "windows"  # window geometry per data folder

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


# -- migrations: MIGRATIONS[n] turns a version-n layout into version n+1 ----------------------


def _v0_to_v1(settings: QSettings) -> None:
    """Before versions: ``home``, ``dark_mode`` (bool), ``geometry`` and ``page``."""
    renames = {"home": "data_dir", "geometry": "window_geometry", "page": "last_page"}
    for old, new in renames.items():
        if settings.contains(old):
            if not settings.contains(new):
                settings.setValue(new, settings.value(old))
            settings.remove(old)
    if settings.contains("dark_mode"):
        dark = str(settings.value("dark_mode")).strip().lower()
        if not settings.contains("theme") and dark in _TRUE + _FALSE:
            settings.setValue("theme", "dark" if dark in _TRUE else "light")
        settings.remove("dark_mode")


def _v1_to_v2(settings: QSettings) -> None:
    """One ``window_geometry`` for every data folder became one per folder (group ``windows``).
    Which folder the old one belonged to is unknown: it is dropped, the next close saves one."""
    settings.remove("window_geometry")


MIGRATIONS: list[Callable[[QSettings], None]] = [_v0_to_v1, _v1_to_v2]
PREFS_VERSION = len(MIGRATIONS)


def stored_version(settings: QSettings) -> int:
    raw = settings.value("version")
    if raw is None:
        return 0
    try:
        return int(str(raw))
    except ValueError:
        log.warning("settings: version %r is unreadable; migrating from the oldest layout", raw)
        return 0


def migrate(settings: QSettings) -> int:
    """Bring ``settings`` up to PREFS_VERSION one step at a time; returns the version it started at."""
    start = stored_version(settings)
    if start > PREFS_VERSION:
        # A newer Ember wrote these; read what we know and leave its layout alone.
        log.info("settings: written by a newer version (layout %d, this one knows %d)", start, PREFS_VERSION)
        return start
    if start == 0 and not settings.allKeys():
        settings.setValue("version", PREFS_VERSION)  # a new store: nothing to migrate
        settings.sync()
        return start
    for version in range(start, PREFS_VERSION):
        log.info("settings: migrating layout %d -> %d", version, version + 1)
        MIGRATIONS[version](settings)
        settings.setValue("version", version + 1)
    settings.sync()
    return start


# -- typed access -------------------------------------------------------------------------


def _coerce(key: str, raw: Any) -> Any:
    """``raw`` as the key's type; raises ValueError when it cannot be read as one."""
    spec = KEYS[key]
    default = spec.default
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"not a yes/no value: {raw!r}")
    if isinstance(default, bytes):
        if isinstance(raw, QByteArray):
            return bytes(raw.data())
        if isinstance(raw, bytes):
            return raw
        raise ValueError(f"not binary data: {type(raw).__name__}")
    if not isinstance(raw, str):
        raise ValueError(f"not text: {raw!r}")
    if spec.choices and raw not in spec.choices:
        raise ValueError(f"{raw!r} is not one of {', '.join(spec.choices)}")
    return raw


class Prefs(QObject):
    """Typed preferences over one QSettings store."""

    changed = Signal(str)  # the key that changed

    def __init__(self, path: str | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.path = path
        if path:
            self.settings = QSettings(path, QSettings.Format.IniFormat)
        else:
            self.settings = QSettings(ORGANISATION, APPLICATION)
        self._warned: set[str] = set()
        migrate(self.settings)

    def get(self, key: str) -> Any:
        spec = KEYS[key]  # KeyError for a key nobody declared: a bug, not bad data
        raw = self.settings.value(key)
        if raw is None:
            return spec.default
        try:
            return _coerce(key, raw)
        except ValueError as exc:
            if key not in self._warned:  # once per key, not on every read
                self._warned.add(key)
                log.warning("settings: %s is unreadable (%s); using the default %r", key, exc, spec.default)
            return spec.default

    def set(self, key: str, value: Any) -> None:
        spec = KEYS[key]
        value = _coerce(key, value)  # a wrong type or choice here is the caller's bug: raise
        if self.get(key) == value and self.settings.contains(key):
            return
        self.settings.setValue(key, QByteArray(value) if isinstance(spec.default, bytes) else value)
        self.settings.sync()
        self._warned.discard(key)
        self.changed.emit(key)

    def window_geometry(self, home: str) -> bytes:
        """The saved geometry of the window that last showed data folder ``home`` (b"" if none)."""
        raw = self.settings.value(_window_key(home))
        if isinstance(raw, QByteArray):
            return bytes(raw.data())
        return raw if isinstance(raw, bytes) else b""

    def set_window_geometry(self, home: str, geometry: bytes) -> None:
        self.settings.setValue(_window_key(home), QByteArray(geometry))
        self.settings.sync()

    def reset(self, key: str) -> None:
        """Back to the default (stored as absent)."""
        if self.settings.contains(key):
            self.settings.remove(key)
            self.settings.sync()
            self.changed.emit(key)


_prefs: Prefs | None = None


def prefs() -> Prefs:
    """The process-wide preferences (reopened when EMBER_SETTINGS_FILE changes)."""
    global _prefs
    path = os.environ.get(SETTINGS_FILE_ENV) or None
    if _prefs is None or _prefs.path != path:
        _prefs = Prefs(path)
    return _prefs


fmt.units_preference = lambda: prefs().get("units")


def reset_prefs() -> None:
    """Forget the process-wide instance; the next prefs() reads the store again (tests)."""
    global _prefs
    _prefs = None


# -- the main window ----------------------------------------------------------------------


def default_page() -> str:
    return "welcome" if "welcome" in PAGE_KEYS else PAGE_KEYS[0]


def _window_key(home: str) -> str:
    return f"{WINDOWS_GROUP}/{hashlib.sha256(home.encode('utf-8')).hexdigest()[:16]}"


def window_home(window) -> str:
    """The data folder ``window`` shows ('' when it has no engine, as in some tests)."""
    engine = getattr(window, "engine", None)
    paths = getattr(engine, "paths", None)
    if engine is not None and paths is None:
        # Not started yet (the window is placed before it connects): the folder it will use.
        paths = engine_paths_from_prefs()[0]
    home = getattr(paths, "home", None)
    return str(home) if home else ""


# QWidget.saveGeometry's layout (Qt 6, version 3): magic, major, minor version, the frame and the
# normal geometry (QRect: left, top, right, bottom), screen number, maximized, full screen, ...
_GEOMETRY = struct.Struct(">IHH4i4iiBB")
_GEOMETRY_MAGIC = 0x1D9D0CB


def saved_rect(geometry: bytes) -> tuple[QRect, bool] | None:
    """(normal geometry, maximized or full screen) of a saveGeometry blob; None if unreadable."""
    if len(geometry) < _GEOMETRY.size:
        return None
    magic, _major, _minor, *values = _GEOMETRY.unpack_from(geometry)
    if magic != _GEOMETRY_MAGIC:
        return None
    left, top, right, bottom = values[4:8]
    maximized, full_screen = values[9], values[10]
    return QRect(left, top, right - left + 1, bottom - top + 1), bool(maximized or full_screen)


def fits_a_screen(geometry: bytes) -> bool:
    """Whether a saved geometry fits, whole, on one of the screens there are now.

    A maximized or full-screen window fits any screen (Qt puts it on the nearest one).
    """
    from PySide6.QtGui import QGuiApplication

    found = saved_rect(geometry)
    if found is None:
        return False
    rect, maximized = found
    if maximized:
        return True
    return any(screen.availableGeometry().contains(rect) for screen in QGuiApplication.screens())


def restore_window(window, page: str | None = None) -> str:
    """Put ``window`` where it was and show ``page``, else the last page, else the first one.

    The geometry is the one saved for the window's data folder, and only when it fits a
    screen now; otherwise the window keeps its default size (and nothing is said: there is
    nothing the user must do). Returns the key of the page shown.
    """
    p = prefs()
    geometry = p.window_geometry(window_home(window))
    if geometry and not (fits_a_screen(geometry) and window.restoreGeometry(QByteArray(geometry))):
        log.info("settings: the saved window geometry does not fit the screens now; using the default size")
    key = page or p.get("last_page")
    if key not in PAGE_KEYS:
        key = default_page()
    window.show_page(key)
    return key


def save_window(window) -> None:
    """Remember ``window``'s geometry and the page it shows (on close)."""
    p = prefs()
    p.set_window_geometry(window_home(window), bytes(window.saveGeometry().data()))
    row = window.sidebar.currentRow()
    if 0 <= row < len(PAGE_KEYS):
        p.set("last_page", PAGE_KEYS[row])


def engine_paths_from_prefs() -> tuple[engine_paths.Paths, bool]:
    """The engine's paths, and whether they come from the "data_dir" preference.

    EMBER_HOME wins when set; then the preference; then the engine's default.

    The engine started for a preferred data directory gets it as EMBER_HOME, so both sides
    must agree on the runtime dir (socket, token) too: it is resolved here the way the
    engine will, with EMBER_HOME set for the moment.
    """
    data_dir = prefs().get("data_dir").strip()
    if "EMBER_HOME" in os.environ or not data_dir:
        return engine_paths.resolve(), False
    os.environ["EMBER_HOME"] = str(Path(data_dir).expanduser().resolve())
    try:
        return engine_paths.resolve(), True
    finally:
        del os.environ["EMBER_HOME"]
