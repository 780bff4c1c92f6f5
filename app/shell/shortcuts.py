"""Keyboard shortcuts for the main actions, and the dialog that lists them (Ctrl+/).

Every shortcut is a QAction on the main window with a window context, so it
works wherever the focus is in the window and nowhere else. ``SHORTCUTS`` is
what the dialog lists: the ones bound here, then the keys Qt and other parts of
the window already give (Tab, Esc for the tour, Ctrl+Tab in tabs), so the list
is complete and nothing here clashes with them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLineEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.models.pages import PAGES
from app.shell.accessibility import reachable
from app.shell.help import show_page_help
from engine.api.job_terms import FINETUNE

PAGE_KEYS = 9  # Ctrl+1 … Ctrl+9
FILTER_WORDS = ("filter", "search", "find")
REFRESH_METHODS = ("reload", "refresh", "refresh_status")  # a page's "ask the engine again", in that order
MESSAGE_MS = 4000

# (keys, what they do): bound by install_shortcuts, in the order the dialog lists them.
BOUND: list[tuple[str, str]] = [
    *((f"Ctrl+{n}", f"Go to {entry.title}") for n, entry in enumerate(PAGES[:PAGE_KEYS], start=1)),
    ("Ctrl+N", "New fine-tune"),
    ("Ctrl+Shift+C", "Compress the selected finished fine-tune (Runs, Monitor), or open Compress"),
    ("Ctrl+E", "Export the selected run or variant (Runs, Monitor, Compare › Variants), or open Export"),
    ("F5", "Refresh the current page from the engine"),
    ("Ctrl+F", "Find: go to the current page's filter or search field"),
    ("F1", "Help: the manual at the part about the current page"),
    ("Ctrl+/", "Show these keyboard shortcuts"),
    ("Ctrl+Q", "Close the window (jobs and the engine keep running)"),
]
# Given by Qt or by other parts of the window; listed so the dialog is the whole story.
BUILT_IN: list[tuple[str, str]] = [
    ("Tab, Shift+Tab", "Next or previous control"),
    ("Up, Down", "Move in the sidebar, a list or a table"),
    ("Space, Enter", "Press the focused button or tick the focused box"),
    ("Ctrl+Tab, Ctrl+Shift+Tab", "Next or previous tab (Compare, run details)"),
    ("Esc", "Close a dialog or end the guided tour"),
]
# The dialog gives Ctrl+1 … Ctrl+9 one row, so the whole list fits on a small screen.
PAGE_ROW = (f"Ctrl+1 … Ctrl+{min(len(PAGES), PAGE_KEYS)}", "Go to a page, in sidebar order: " + ", ".join(
    f"{n} {entry.title}" for n, entry in enumerate(PAGES[:PAGE_KEYS], start=1)))
SHORTCUTS: list[tuple[str, str]] = [PAGE_ROW, *BOUND[min(len(PAGES), PAGE_KEYS):], *BUILT_IN]
SCREEN_MARGIN = 80  # px of the screen's height the dialog leaves free (title bar, panels)


# -- what the current page is about ---------------------------------------------------------

def current_key(window: Any) -> str:
    return PAGES[max(window.sidebar.currentRow(), 0)].key


def current_page(window: Any) -> QWidget:
    return window.page(current_key(window))


def selected_run(window: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(id, record or None) of the run the current page has selected or shows; (None, None) if none."""
    key, page = current_key(window), current_page(window)
    if key == "runs" and hasattr(page, "selected_job"):
        job = page.selected_job()
        return (job.get("id"), job) if job else (None, None)
    if key == "monitor" and hasattr(page, "job_id"):
        job_id = page.job_id  # a property
        return (job_id, page.job() or None) if job_id else (None, None)
    if key == "compare":
        variants = getattr(page, "variants", None)
        if variants is not None and page.tabs.currentWidget() is variants:
            return variants.selected_id(), None
    return None, None


def _status(window: Any, text: str) -> None:
    window.statusBar().showMessage(text, MESSAGE_MS)


def _focus_first(page: QWidget) -> None:
    """Focus the first control of ``page`` in Tab order (so the keyboard continues from there)."""
    widget = page.nextInFocusChain()
    for _ in range(2000):
        if widget is page or widget is None:
            return
        if page.isAncestorOf(widget) and reachable(widget):
            widget.setFocus(Qt.FocusReason.ShortcutFocusReason)
            return
        widget = widget.nextInFocusChain()


# -- the actions ------------------------------------------------------------------------------

def go_to_page(window: Any, key: str) -> None:
    window.show_page(key)
    window.sidebar.setFocus(Qt.FocusReason.ShortcutFocusReason)  # where you are; Tab enters the page


def new_finetune(window: Any) -> None:
    _focus_first(window.show_page("new_finetune"))


def compress_selected(window: Any) -> None:
    job_id, record = selected_run(window)
    if job_id and record and record.get("kind") == FINETUNE and record.get("state") == "succeeded":
        window.nav.show("compress", source=job_id)
    else:
        window.show_page("compress")
        if job_id:
            _status(window, "Only a finished fine-tune can be compressed: choose one on the Source step.")
    _focus_first(current_page(window))


def export_selected(window: Any) -> None:
    job_id, record = selected_run(window)
    if job_id and (record is None or record.get("state") == "succeeded"):
        window.nav.show("export", job_id=job_id, record=record)
    else:
        window.show_page("export")
        if job_id:
            _status(window, "Only a finished run can be exported: choose one on the Source step.")
    _focus_first(current_page(window))


def refresh_page(window: Any) -> None:
    page = current_page(window)
    method = next((getattr(page, name) for name in REFRESH_METHODS if callable(getattr(page, name, None))), None)
    title = PAGES[window.sidebar.currentRow()].title
    if method is None:
        _status(window, f"{title} has nothing to refresh.")
    elif not window.engine.client.is_connected:
        _status(window, "Not connected to the engine: pages refresh by themselves once it is back.")
    else:
        method()
        _status(window, f"{title} refreshed.")


def filter_field(page: QWidget) -> QLineEdit | None:
    """The first shown filter or search field of ``page``, in Tab order."""
    widget = page.nextInFocusChain()
    for _ in range(2000):
        if widget is page or widget is None:
            return None
        if isinstance(widget, QLineEdit) and page.isAncestorOf(widget) and reachable(widget):
            words = f"{widget.placeholderText()} {widget.objectName()} {widget.accessibleName()}".lower()
            if any(word in words for word in FILTER_WORDS):
                return widget
        widget = widget.nextInFocusChain()
    return None


def focus_filter(window: Any) -> None:
    field = filter_field(current_page(window))
    if field is None:
        _status(window, "This page has no filter or search field.")
        return
    field.setFocus(Qt.FocusReason.ShortcutFocusReason)
    field.selectAll()


def show_shortcuts(window: Any) -> QDialog:
    dialog = getattr(window, "shortcuts_dialog", None)
    if dialog is None:
        dialog = window.shortcuts_dialog = ShortcutsDialog(window)
    dialog.show()
    dialog.fit_rows()
    dialog.raise_()
    dialog.activateWindow()
    return dialog


def native_keys(keys: str) -> str:
    """``keys`` in the platform's own spelling (⌘ on a Mac); a range like "Ctrl+1 … Ctrl+9" as written."""
    if "…" in keys:
        return keys
    return ", ".join(QKeySequence(k.strip()).toString(QKeySequence.SequenceFormat.NativeText) or k.strip()
                     for k in keys.split(","))


class ShortcutsTable(QTableWidget):
    """A table whose size hint holds every row, so its dialog opens with none cut off."""

    def full_height(self) -> int:
        return self.horizontalHeader().sizeHint().height() + self.verticalHeader().length() + 2 * self.frameWidth()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(super().sizeHint().width(), self.full_height())


class ShortcutsDialog(QDialog):
    """SHORTCUTS in a two-column table; Esc or Close closes it."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.table = ShortcutsTable(len(SHORTCUTS), 2)
        self.table.setAccessibleName("Keyboard shortcuts")
        self.table.setHorizontalHeaderLabels(["Keys", "Action"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setTabKeyNavigation(False)
        self.table.setShowGrid(False)
        self.table.setWordWrap(True)
        for row, (keys, text) in enumerate(SHORTCUTS):
            self.table.setItem(row, 0, QTableWidgetItem(native_keys(keys)))
            self.table.setItem(row, 1, QTableWidgetItem(text))
        head = self.table.horizontalHeader()
        head.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        head.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        # Rows follow their wrapped text whatever the width, so a narrower dialog never cuts one.
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        self.resize(760, 480)

    def fit_rows(self) -> None:
        """As tall as every row needs (within the screen, which scrolls the rest), at the current width."""
        self.layout().activate()
        screen = self.screen().availableGeometry().height()
        self.resize(self.width(), min(self.sizeHint().height(), screen - SCREEN_MARGIN))


def install_shortcuts(window: Any) -> dict[str, QAction]:
    """Bind BOUND on ``window`` (a MainWindow); returns the actions by their keys, also kept as window.shortcut_actions."""
    handlers: list[tuple[str, Callable[[], Any]]] = [
        *((f"Ctrl+{n}", lambda *_, key=entry.key: go_to_page(window, key))
          for n, entry in enumerate(PAGES[:PAGE_KEYS], start=1)),
        ("Ctrl+N", lambda: new_finetune(window)),
        ("Ctrl+Shift+C", lambda: compress_selected(window)),
        ("Ctrl+E", lambda: export_selected(window)),
        ("F5", lambda: refresh_page(window)),
        ("Ctrl+F", lambda: focus_filter(window)),
        ("F1", lambda: show_page_help(window)),
        ("Ctrl+/", lambda: show_shortcuts(window)),
        ("Ctrl+Q", lambda: window.close()),
    ]
    assert [keys for keys, _ in handlers] == [keys for keys, _ in BOUND]
    actions: dict[str, QAction] = {}
    for (keys, handler), (_keys, text) in zip(handlers, BOUND, strict=True):
        action = QAction(text, window)
        action.setShortcuts([QKeySequence(k.strip()) for k in keys.split(",")])
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(handler)
        window.addAction(action)
        actions[keys] = action
    window.shortcut_actions = actions
    return actions
