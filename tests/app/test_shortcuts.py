"""The keyboard shortcuts of the main window, the dialog that lists them, and the glossary tooltips.

One window with a real engine; keys are pressed on the window as a user would press them.
"""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.models.pages import PAGES
from app.shell.help import page_doc
from app.shell.shortcuts import BOUND, SHORTCUTS, selected_run, show_shortcuts
from app.text.glossary import OPTION_TERMS, TERMS, explain, term_tooltip
from tests.app.conftest import engine_pid, wait_connected

CTRL = Qt.KeyboardModifier.ControlModifier


def current_key(window) -> str:
    return PAGES[window.sidebar.currentRow()].key


def test_glossary_is_one_plain_sentence_per_term():
    for term, text in TERMS.items():
        assert text.endswith(".") and not re.search(r"[.!?]\s", text), f"{term}: not one sentence: {text}"
    assert explain("lora") == explain("LoRA") == TERMS["LoRA"]
    assert term_tooltip("ZeRO-3").startswith("<b>ZeRO-3</b>: ")
    assert all(term in TERMS for terms in OPTION_TERMS.values() for term in terms)
    with pytest.raises(KeyError, match="No glossary entry"):
        explain("warp drive")


def test_shortcuts_and_term_tooltips(qtbot, make_window, gui_home):
    window = make_window(start=True)
    wait_connected(qtbot, window)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)

    # Ctrl+1 … Ctrl+9: the pages in sidebar order, whatever that order is.
    for number in [2, *range(1, min(len(PAGES), 9) + 1)]:
        QTest.keyClick(window, Qt.Key(Qt.Key.Key_0.value + number), CTRL)
        assert current_key(window) == PAGES[number - 1].key, f"Ctrl+{number}"

    QTest.keyClick(window, Qt.Key.Key_N, CTRL)
    assert current_key(window) == "new_finetune"
    wizard = window.page("new_finetune")
    assert wizard.isAncestorOf(window.focusWidget()), "Ctrl+N leaves the focus in the wizard"

    # Term tooltips where the terms appear.
    assert explain("LoRA") in wizard.method_step.method_radios["lora"].toolTip()
    zero = wizard.training_step.zero_combo
    tip = zero.itemData(zero.findData("3"), Qt.ItemDataRole.ToolTipRole)
    assert "<b>ZeRO-3</b>" in tip and explain("ZeRO-3") in tip
    compress = window.page("compress")
    qdq = compress.techniques_step.technique_checks["static_int8"].toolTip()
    assert explain("QDQ") in qdq and explain("static int8") in qdq
    scatter = window.page("compare").variants.scatter
    for widget in (scatter.plot, scatter.title):
        assert explain("Pareto front") in widget.toolTip()
    assert explain("ONNX Runtime") in window.page("export").formats_step.format_checks["ort"].toolTip()

    # Ctrl+/: the dialog lists every shortcut. F1: the manual at the current page's part.
    QTest.keyClick(window, Qt.Key.Key_Slash, CTRL)
    dialog = window.shortcuts_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    listed = [dialog.table.item(row, 1).text() for row in range(dialog.table.rowCount())]
    assert listed == [text for _keys, text in SHORTCUTS]
    assert "2 Runs" in listed[0] and "New fine-tune" in listed
    dialog.close()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    QTest.keyClick(window, Qt.Key.Key_F1)
    qtbot.waitUntil(lambda: getattr(window, "help_viewer", None) is not None and window.help_viewer.isVisible(),
                    timeout=3000)
    assert window.help_viewer.current_doc() == page_doc(current_key(window))
    window.help_viewer.close()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)

    # Ctrl+F finds the page's filter; F5 refreshes the page.
    window.show_page("runs")
    runs = window.page("runs")
    QTest.keyClick(window, Qt.Key.Key_F, CTRL)
    assert window.focusWidget() is runs.filter_edit
    QTest.keyClick(window, Qt.Key.Key_F5)
    assert window.statusBar().currentMessage() == "Runs refreshed."
    window.show_page("compress")
    QTest.keyClick(window, Qt.Key.Key_F, CTRL)
    assert window.statusBar().currentMessage() == "This page has no filter or search field."

    # Ctrl+E / Ctrl+Shift+C with nothing selected open the wizards on their first step.
    window.show_page("runs")
    QTest.keyClick(window, Qt.Key.Key_E, CTRL)
    assert current_key(window) == "export"
    window.show_page("runs")
    QTest.keyClick(window, Qt.Key.Key_C, CTRL | Qt.KeyboardModifier.ShiftModifier)
    assert current_key(window) == "compress"
    # From Monitor with no run shown (Monitor's job_id is a property, not a method).
    window.show_page("monitor")
    assert selected_run(window) == (None, None)
    QTest.keyClick(window, Qt.Key.Key_E, CTRL)
    assert current_key(window) == "export"

    # Ctrl+Q closes the window; the engine goes on.
    pid = engine_pid(gui_home)
    QTest.keyClick(window, Qt.Key.Key_Q, CTRL)
    assert not window.isVisible()
    assert pid is not None and engine_pid(gui_home) == pid


def test_shortcuts_dialog_shows_every_row_whole(qtbot, make_window):
    """The list opens tall enough for all its rows: none is cut at the bottom, nothing to scroll."""
    window = make_window(start=False, page="welcome")
    dialog = show_shortcuts(window)
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    table = dialog.table
    assert table.rowCount() == len(SHORTCUTS) and [keys for keys, _ in SHORTCUTS][-1] == "Esc"
    shown = table.viewport().height()
    for row in range(table.rowCount()):
        top = table.rowViewportPosition(row)
        assert 0 <= top and top + table.rowHeight(row) <= shown, f"row {row} ({table.item(row, 0).text()}) is cut"
        # A wrapped action still fits its row.
        needed = table.sizeHintForRow(row)
        assert table.rowHeight(row) >= needed, f"row {row} is shorter than its text"
    assert not table.verticalScrollBar().isVisible()
    assert table.item(0, 0).text().startswith("Ctrl+1") and "Ctrl+E" in [table.item(r, 0).text()
                                                                       for r in range(table.rowCount())]
    # Every bound key is listed (the nine page keys as one row).
    listed_keys = {table.item(r, 0).text() for r in range(table.rowCount())}
    assert {keys for keys, _ in BOUND if not re.fullmatch(r"Ctrl\+\d", keys)} <= listed_keys
