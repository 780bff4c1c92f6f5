"""Keyboard users reach every control, and screen readers can name each one, on every page.

One window with a real engine; each page of the sidebar is shown in turn and checked
as a user would meet it: Tab from the sidebar must visit every shown, enabled control of
the page before coming back round, and each control must have an accessible name.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QRadioButton

from app.models.pages import PAGES
from app.shell.accessibility import accessible_name, control_of, controls, name_controls, reachable
from tests.app.conftest import wait_connected

MAX_TABS = 400  # more presses than any page has controls: a trap never comes back round


def tab_round(window) -> list:
    """The controls Tab visits from the sidebar until it is back on the sidebar (or MAX_TABS)."""
    window.sidebar.setFocus(Qt.FocusReason.TabFocusReason)
    seen = []
    for _ in range(MAX_TABS):
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        control = control_of(QApplication.focusWidget())
        if control is window.sidebar:
            return seen
        seen.append(control)
    raise AssertionError(f"Tab never came back to the sidebar after {MAX_TABS} presses; last: "
                         f"{[type(c).__name__ + ' ' + accessible_name(c) for c in seen[-5:]]}")


def radio_group(widget):
    """What an exclusive radio button shares with its mates: Tab enters the group, arrows move in it."""
    if isinstance(widget, QRadioButton) and widget.autoExclusive():
        return widget.group() or widget.parentWidget()
    return None


def describe(widgets) -> list[str]:
    return sorted(f"{type(w).__name__} {accessible_name(w)!r} {w.objectName()}" for w in widgets)


def test_every_page_is_reachable_by_keyboard_and_named(qtbot, make_window):
    window = make_window(start=True)
    wait_connected(qtbot, window)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    assert window.sidebar.focusPolicy() & Qt.FocusPolicy.TabFocus, "the sidebar must take Tab focus"
    for entry in PAGES:
        page = window.show_page(entry.key)
        qtbot.wait(300)  # the page's first replies arrive and fill it in; then it is named again
        shown = [c for c in controls(page) if reachable(c)]
        assert shown, f"{entry.title}: no control at all?"

        unnamed = [c for c in controls(window) if reachable(c) and not accessible_name(c)]
        assert not unnamed, f"{entry.title}: controls without an accessible name: {describe(unnamed)}"

        visited = tab_round(window)
        groups = {radio_group(c) for c in visited} - {None}
        missed = {c for c in set(shown) - set(visited) if radio_group(c) not in groups}
        assert not missed, f"{entry.title}: Tab from the sidebar never reaches {describe(missed)}"
        assert window.page(entry.key) is page


def test_name_controls_reports_what_it_cannot_name(qtbot):
    from PySide6.QtWidgets import (
        QFormLayout,
        QLineEdit,
        QListWidget,
        QPushButton,
        QVBoxLayout,
        QWidget,
    )

    root = QWidget()
    qtbot.addWidget(root)
    column = QVBoxLayout(root)
    anonymous = QListWidget()  # first, alone: no label before it, no tooltip, no placeholder
    column.addWidget(anonymous)
    form = QFormLayout()
    labelled = QLineEdit()
    form.addRow("Learning rate", labelled)
    column.addLayout(form)
    hinted = QLineEdit()
    hinted.setPlaceholderText("Search the log")
    tipped = QPushButton("⋯")
    tipped.setToolTip("<b>Export</b> and view options")
    for widget in (hinted, tipped):
        column.addWidget(widget)

    assert name_controls(root) == [anonymous]
    assert labelled.accessibleName() == "Learning rate"
    assert hinted.accessibleName() == "Search the log"
    assert tipped.accessibleName() == "Export and view options"
    assert tipped.accessibleDescription() == "Export and view options"
