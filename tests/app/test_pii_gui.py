"""The Data step's Personal data card against a real engine: Scan runs a pii.scan job and shows every
planted type with masked examples only; Scrub writes the copy with the modes chosen per type; Train on the
scrubbed copy puts the copy in the form."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox

from app.pages.new_finetune.pii_box import findings_rows, summary_text
from tests.app.conftest import wait_connected
from tests.fixtures.planted_pii import PLANTED, expected, write_csv

pytestmark = [pytest.mark.timeout(240)]
JOB_MS = 120_000


def test_scan_then_scrub_from_the_data_step(qtbot, make_window, tmp_path):
    data = write_csv(tmp_path / "tickets.csv", 20)
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    page = window.page("new_finetune")
    step = page.data_step
    box = step.pii_box
    page.go_to(page.steps.index(step))
    assert not box.isVisible()  # built-in data: nothing to scan
    step.custom_radio.setChecked(True)
    assert box.isVisible() and not box.table.isVisible()
    step.path_edit.setText(str(data))

    box.scan_button.click()
    qtbot.waitUntil(lambda: box.table.isVisible() or "failed" in box.status.text(), timeout=JOB_MS)
    assert box.table.isVisible(), box.status.text()
    shown = {box.table.item(r, 1).text(): int(box.table.item(r, 2).text()) for r in range(box.table.rowCount())}
    assert shown == expected(20)
    cells = " ".join(box.table.item(r, c).text() for r in range(box.table.rowCount()) for c in range(4))
    assert not [v for v in PLANTED.values() if v in cells]  # masked examples only
    assert box.status.text().startswith("10 findings found in 20 rows") and "not looked for" in box.status.text()

    row = next(r for r in range(box.table.rowCount()) if box.table.item(r, 1).text() == "EMAIL_ADDRESS")
    box.table.editItem(box.table.item(row, 4))  # the mode's drop-down, as a double-click opens it
    editor = box.table.findChild(QComboBox)
    assert editor is not None and [editor.itemText(i) for i in range(editor.count())] == ["mask", "tag", "fake", "hash"]
    editor.setCurrentIndex(editor.findText("fake"))
    editor.activated.emit(editor.currentIndex())
    box.table.setCurrentCell(row, 0)  # leaving the cell closes the editor
    qtbot.waitUntil(lambda: box.table.item(row, 4).text() == "fake", timeout=5000)
    assert box.modes()["EMAIL_ADDRESS"] == "fake" and box.modes()["US_SSN"] == "tag"
    box.scrub_button.click()
    qtbot.waitUntil(lambda: box.use_button.isVisible() or "failed" in box.status.text(), timeout=JOB_MS)
    assert box.use_button.isVisible(), box.status.text()
    copy = Path(box.copy_path)
    text = copy.read_text(encoding="utf-8")
    assert "<US_SSN>" in text and PLANTED["EMAIL_ADDRESS"] not in text and "@" in text  # a fake address
    box.use_button.click()
    assert step.path_edit.text() == str(copy)
    assert page.current_spec()["data"]["path"] == str(copy)
    assert box.status.text() == f"Training on the scrubbed copy of {data}."


def test_findings_in_words():
    result = {"rows": 3, "rows_per_s": 120.5, "presidio": "2.2", "recognizers": ["EmailRecognizer"],
              "ner": {"ran": False}, "skipped_rows": 1,
              "findings": {"total": 3, "columns": [
                  {"column": "text", "entities": {"EMAIL_ADDRESS": 1, "URL": 2}, "examples": {"URL": ["h•••"]}}]}}
    assert findings_rows(result) == [("text", "URL", 2, "h•••"), ("text", "EMAIL_ADDRESS", 1, "")]
    assert summary_text(result) == ("3 findings found in 3 rows (120.5 rows/s); 1 unreadable lines not scanned. "
                                    "Presidio 2.2: 1 recognizers; people, places and organisations not looked "
                                    "for: no named-entity model is installed.")
