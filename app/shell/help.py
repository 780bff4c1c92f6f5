"""Help: where the manual is, which part of it each page opens, and the Help menu.

The manual is the Markdown in the repository's ``docs/``. It ships inside the package as
``app/resources/docs`` (in a checkout a link to ``docs/``; in a wheel real files; the
one-folder build copies ``docs/`` there), so help opens without a network in every kind of
install. ``app.text.manual.docs_dir()`` is the one place that finds it; the viewer (widgets/help_viewer.py)
shows it, and the About dialog (widgets/about_dialog.py) lives behind the same menu.

Text elsewhere in the window that says "see docs/x.md" becomes a link with ``doc_label``.
"""

from __future__ import annotations

import html
import re
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QWidget

from app.models.pages import PAGES
from app.state.style import set_role
from app.text.manual import HOME_DOC, TROUBLESHOOTING_DOC

# F1 on a page opens this part of the manual (page keys of app/models/pages.py).
PAGE_DOCS = {
    "welcome": "first-run.md#welcome",
    "runs": "gui.md#pages",
    "new_finetune": "first-run.md#the-new-fine-tune-wizard",
    "monitor": "first-run.md#watching-it-monitor",
    "compress": "compression.md",
    "compare": "first-run.md#choosing-compare--variants",
    "playground": "playground.md",
    "export": "export.md",
    "models": "hub.md",
    "hosts": "remote-hosts.md",
    "settings": "settings.md",
}
LINK_SCHEME = "help:"  # href of a link that opens the viewer: "help:custom-models.md#section"
DOC_MENTION = re.compile(r"docs/([\w.-]+\.md)(#[\w-]+)?")


def page_doc(key: str) -> str:
    """The part of the manual about page ``key`` ("file.md" or "file.md#heading")."""
    return PAGE_DOCS.get(key, HOME_DOC)


# -- opening it ----------------------------------------------------------------------------

def help_viewer(window: QWidget) -> Any:
    """The window's one help viewer, made on first use."""
    viewer = getattr(window, "help_viewer", None)
    if viewer is None:
        from app.widgets.help_viewer import HelpViewer

        viewer = window.help_viewer = HelpViewer(window)
    return viewer


def open_doc(widget: QWidget, target: str = HOME_DOC) -> Any:
    """Show the viewer of ``widget``'s window at ``target`` ("file.md#heading"); returns the viewer."""
    if target.startswith(LINK_SCHEME):
        target = target[len(LINK_SCHEME):]
    viewer = help_viewer(widget.window())
    viewer.open_doc(target)
    viewer.show()
    viewer.raise_()
    viewer.activateWindow()
    return viewer


def show_page_help(window: Any) -> Any:
    """F1: the manual at the part about the page on screen."""
    key = PAGES[max(window.sidebar.currentRow(), 0)].key
    return open_doc(window, page_doc(key))


def show_about(window: Any) -> Any:
    dialog = getattr(window, "about_dialog", None)
    if dialog is None:
        from app.widgets.about_dialog import AboutDialog

        dialog = window.about_dialog = AboutDialog(window)
    dialog.refresh()
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()
    return dialog


def install_help_menu(window: Any) -> dict[str, QAction]:
    """The menu bar's Help menu; returns its actions by name (also kept as window.help_actions).

    "Help for this page" and "Keyboard shortcuts" are the shortcut actions of app/shell/shortcuts.py,
    so the menu shows their keys and a key press and a click do the same thing.
    """
    menu = window.menuBar().addMenu("&Help")
    actions: dict[str, QAction] = {}

    def add(name: str, handler: Any) -> None:
        action = menu.addAction(name)
        action.triggered.connect(handler)
        actions[name] = action

    add("Documentation", lambda: open_doc(window, HOME_DOC))
    for keys, name in (("F1", "Help for this page"), ("Ctrl+/", "Keyboard shortcuts")):
        action = window.shortcut_actions[keys]
        action.setText(name)  # the menu's wording; the shortcuts list keeps its own sentence
        menu.addAction(action)
        actions[name] = action
    add("Troubleshooting", lambda: open_doc(window, TROUBLESHOOTING_DOC))
    menu.addSeparator()
    add("About Ember Studio", lambda: show_about(window))
    window.help_actions = actions
    return actions


# -- links in messages -----------------------------------------------------------------------

def linkify(text: str) -> str:
    """``text`` as rich text in which each "docs/x.md" is a link that opens the viewer there."""
    parts, last = [], 0
    for match in DOC_MENTION.finditer(text):
        parts.append(html.escape(text[last:match.start()]))
        target = match.group(1) + (match.group(2) or "")
        parts.append(f'<a href="{LINK_SCHEME}{target}">{html.escape(match.group(0))}</a>')
        last = match.end()
    parts.append(html.escape(text[last:]))
    return "".join(parts)


def doc_label(text: str, role: str = "", wrap: bool = True) -> QLabel:
    """A label like widgets.common.label whose "docs/x.md" mentions open the help viewer."""
    widget = QLabel(linkify(text))
    widget.setTextFormat(Qt.TextFormat.RichText)
    if role:
        set_role(widget, role)
    widget.setWordWrap(wrap)
    widget.linkActivated.connect(lambda href: open_doc(widget, href))
    widget.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                   | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
    return widget
