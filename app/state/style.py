"""Stylesheet, themes and icons from app/resources/, and the helpers pages use to apply them.

Styling is driven by dynamic properties (``role``, ``state``) that the
stylesheet selects on, so a page says what a widget *is* ("primary", "muted",
"card") and the look lives in one file. That file is a template: ``@token``
names a colour of the theme (resources/themes/<theme>.json), so light and dark
share every rule. Code that paints by itself (charts) asks ``colour(token)``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

from PySide6.QtCore import QByteArray, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QIconEngine, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QApplication, QWidget

log = logging.getLogger(__name__)

# Inside the package, so a wheel or a pipx install carries them too.
RESOURCES = Path(__file__).resolve().parents[1] / "resources"
THEMES = ("light", "dark")
THEME_CHOICES = ("system", *THEMES)
TOKEN = re.compile(r"@([a-z][a-z0-9-]*)")

_current = "light"


@cache
def theme_tokens(theme: str) -> dict[str, str]:
    """Token -> colour for ``theme``; the light theme fills any token a theme leaves out."""
    tokens: dict[str, str] = {}
    for name in ("light", theme):
        path = RESOURCES / "themes" / f"{name}.json"
        try:
            tokens.update(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            log.warning("theme file %s is unreadable (%s)", path, exc)
    return tokens


def fill_template(template: str, tokens: dict[str, str]) -> str:
    """Replace each ``@token``; an unknown one becomes the text colour (and a warning), not a broken sheet."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in tokens:
            log.warning("stylesheet names an unknown colour token @%s", name)
            return tokens.get("text", "#1f2328")
        return tokens[name]

    return TOKEN.sub(value, template)


def resolve_theme(theme: str) -> str:
    """"light" or "dark": "system" follows the desktop's colour scheme, light when it says nothing."""
    if theme in THEMES:
        return theme
    app = QGuiApplication.instance()
    if app is not None and app.styleHints().colorScheme() == Qt.ColorScheme.Dark:
        return "dark"
    return "light"


def palette_for(tokens: dict[str, str]) -> QPalette:
    """A palette matching the stylesheet, for what the sheet does not style (inputs, menus, tooltips)."""
    role = QPalette.ColorRole
    palette = QPalette()
    pairs = {
        role.Window: "bg", role.WindowText: "text", role.Base: "surface", role.AlternateBase: "surface-alt",
        role.Text: "text", role.Button: "surface", role.ButtonText: "text", role.BrightText: "primary-text",
        role.Highlight: "selection", role.HighlightedText: "text", role.ToolTipBase: "surface",
        role.ToolTipText: "text", role.PlaceholderText: "muted", role.Link: "link", role.Mid: "border-strong",
        role.Midlight: "border", role.Dark: "border-strong", role.Light: "surface", role.Shadow: "border-strong",
    }
    for r, token in pairs.items():
        palette.setColor(r, QColor(tokens[token]))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.WindowText, role.Text, role.ButtonText):
        palette.setColor(disabled, r, QColor(tokens["disabled-text"]))
    return palette


def apply_theme(app: QApplication, theme: str) -> str:
    """Style ``app`` in ``theme`` ("system", "light" or "dark"); returns the theme applied."""
    global _current
    resolved = resolve_theme(theme)
    tokens = theme_tokens(resolved)
    _current = resolved
    app.setPalette(palette_for(tokens))
    path = RESOURCES / "style.qss"
    try:
        app.setStyleSheet(fill_template(path.read_text(encoding="utf-8"), tokens))
    except OSError:
        # A missing stylesheet makes the app plain, not broken.
        log.warning("stylesheet not found at %s", path)
    _follow_system(app)
    return resolved


_following: set[int] = set()


def _follow_system(app: QApplication) -> None:
    """While the preference is "system", a change of the desktop's colour scheme restyles the app."""
    if id(app) in _following:
        return
    _following.add(id(app))

    def scheme_changed(_scheme: object) -> None:
        from app.state.prefs import prefs

        if prefs().get("theme") == "system":
            apply_theme(app, "system")

    app.styleHints().colorSchemeChanged.connect(scheme_changed)


def apply_stylesheet(app: QApplication) -> None:
    """Apply the theme chosen in the preferences."""
    from app.state.prefs import prefs

    apply_theme(app, prefs().get("theme"))


def current_theme() -> str:
    """The theme last applied: "light" or "dark"."""
    return _current


def colour(name: str) -> str:
    """A colour of the current theme, e.g. colour("muted"), for code that paints by itself."""
    return theme_tokens(_current).get(name) or theme_tokens("light").get(name, "#000000")


class ThemeColours(Mapping[str, str]):
    """A name -> colour table read from the current theme at each lookup (``{"failed": "state-failed"}``).

    For tables of colours code looks up by key: they follow a theme switch without being rebuilt.
    """

    def __init__(self, tokens: dict[str, str]):
        self._tokens = dict(tokens)

    def __getitem__(self, key: str) -> str:
        return colour(self._tokens[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)


ICON_INK = "#4a5563"  # the stroke colour the line icons are drawn in: the theme's "subtle"


class _ThemedSvg(QIconEngine):
    """Draws a line icon in a colour of the current theme at paint time, so a theme switch recolours it."""

    def __init__(self, svg: str, ink: str = "subtle"):
        super().__init__()
        self._svg = svg
        self._ink = ink  # a theme token

    def paint(self, painter: QPainter, rect: QRect, _mode: QIcon.Mode, _state: QIcon.State) -> None:
        svg = self._svg.replace(ICON_INK, colour(self._ink))
        QSvgRenderer(QByteArray(svg.encode("utf-8"))).render(painter, QRectF(rect))

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        pixmap = QPixmap(size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        self.paint(painter, pixmap.rect(), mode, state)
        painter.end()
        return pixmap

    def clone(self) -> QIconEngine:
        return _ThemedSvg(self._svg, self._ink)


def icon(name: str, ink: str = "subtle") -> QIcon:
    """The icon ``name``; a line icon is drawn in the theme colour ``ink``.

    On a primary button pass ``ink="primary-text"``: the icon then has the button's text colour,
    not a grey that is hard to see on the button's orange.
    """
    path = RESOURCES / "icons" / f"{name}.svg"
    try:
        svg = path.read_text(encoding="utf-8")
    except OSError:
        return QIcon()
    # Line icons (drawn in ICON_INK) follow the theme; anything else (the logo) is used as drawn.
    return QIcon(_ThemedSvg(svg, ink)) if ICON_INK in svg else QIcon(str(path))


def set_role(widget: QWidget, role: str) -> QWidget:
    widget.setProperty("role", role)
    return widget


def set_state(widget: QWidget, state: str) -> None:
    """Change the ``state`` property and make the stylesheet notice."""
    if widget.property("state") == state:
        return
    widget.setProperty("state", state)
    widget.style().unpolish(widget)
    widget.style().polish(widget)
    for child in widget.findChildren(QWidget):
        child.style().unpolish(child)
        child.style().polish(child)
