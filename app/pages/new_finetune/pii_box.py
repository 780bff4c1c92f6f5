"""The Data step's Personal data card: scan the chosen file or image folder for personal data (a pii.scan
job), show what was found per column and type with masked examples, and scrub it into a copy (a
pii.scrub job, one mode per type) that the fine-tune then trains on.

Both are ordinary jobs (Runs lists them; the engine's data policy reads their results), followed here
by polling ``jobs.get`` until they end.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.widgets.choice_delegate import ChoiceDelegate
from app.widgets.common import card, label, say
from app.widgets.wizard_parts import error_text
from engine.api.job_terms import FINAL_STATES, PII_SCAN, PII_SCRUB, SUCCEEDED
from engine.api.pii_spec import MODE_WORDS, SCRUB_MODES

POLL_MS = 700
DEFAULT_MODE = "tag"
MAX_ROWS_SHOWN = 12


def findings_rows(result: dict[str, Any], key: str = "findings") -> list[tuple[str, str, int, str]]:
    """(column, type, count, masked examples) of a scan's (or a scrub's) result, most found first."""
    rows = [(col["column"], entity, n, ", ".join((col.get("examples") or {}).get(entity) or []))
            for col in (result.get(key) or {}).get("columns") or [] for entity, n in col["entities"].items()]
    return sorted(rows, key=lambda r: (-r[2], r[0], r[1]))


def summary_text(result: dict[str, Any], key: str = "findings") -> str:
    found = result.get(key) or {}
    ner = result.get("ner") or {}
    names = (f"people, places and organisations looked for with {ner.get('model')}" if ner.get("ran")
             else "people, places and organisations not looked for: no named-entity model is installed")
    skipped = f"; {result['skipped_rows']} unreadable lines not scanned" if result.get("skipped_rows") else ""
    verb = "replaced" if key == "replaced" else "found"
    return (f"{found.get('total', 0)} findings {verb} in {result.get('rows', 0)} rows "
            f"({result.get('rows_per_s') or '-'} rows/s){skipped}. Presidio {result.get('presidio') or ''}: "
            f"{len(result.get('recognizers') or [])} recognizers; {names}.")


class PiiBox(QWidget):
    """``use_copy(path)`` when the user picks the scrubbed copy to train on."""

    use_copy = Signal(str)

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._path = ""
        self._job: str | None = None
        self._kind = ""
        self.result: dict[str, Any] = {}
        self.copy_path = ""
        self.frame, box = card(self)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.frame)
        box.addWidget(label("Personal data", "h2"))
        box.addWidget(label("Look for e-mail addresses, phone numbers, card and bank numbers, IP addresses, "
                            "national ids (and image GPS and serial numbers) before training, and train on a "
                            "scrubbed copy. The original file is never changed.", "muted", wrap=True))
        row = QHBoxLayout()
        self.scan_button = QPushButton("Scan for personal data")
        self.scan_button.setToolTip("Runs a PII scan job (Presidio) on this file or folder: ember pii scan")
        self.scan_button.clicked.connect(self.scan)
        row.addWidget(self.scan_button)
        row.addStretch(1)
        box.addLayout(row)
        self.status = label("", "muted", wrap=True)
        self.status.hide()
        box.addWidget(self.status)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["Column", "Type", "Found", "Examples (masked)", "Scrub as"])
        self.table.verticalHeader().hide()
        # Only the mode column is editable, with a drop-down (app/widgets/choice_delegate.py).
        self.table.setEditTriggers(QTableWidget.EditTrigger.DoubleClicked | QTableWidget.EditTrigger.SelectedClicked)
        self.table.setItemDelegateForColumn(4, ChoiceDelegate(SCRUB_MODES, parent=self.table))
        self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.setAccessibleName("Personal data found")
        self.table.hide()
        box.addWidget(self.table)
        actions = QHBoxLayout()
        self.scrub_button = QPushButton("Scrub into a copy")
        self.scrub_button.setToolTip("Runs a Scrub job: a copy with each finding replaced as chosen per type")
        self.scrub_button.clicked.connect(self.scrub)
        self.use_button = QPushButton("Train on the scrubbed copy")
        self.use_button.clicked.connect(lambda: self.use_copy.emit(self.copy_path))
        for b in (self.scrub_button, self.use_button):
            b.hide()
            actions.addWidget(b)
        actions.addStretch(1)
        box.addLayout(actions)
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)

    # -- what is scanned ----------------------------------------------------------------

    def set_path(self, path: str) -> None:
        """The data the card is about; a new path clears what was found for the old one."""
        path = path.strip()
        if path == self._path:
            return
        source, self._path = self._path, path
        self.scan_button.setEnabled(bool(path) and self._job is None)
        if self._job:
            return
        if path and path == self.copy_path:  # the user took the copy: say so, keep nothing to act on
            self.table.hide()
            self.scrub_button.hide()
            self.use_button.hide()
            self._say(f"Training on the scrubbed copy of {source}.")
            return
        self._clear()

    def _clear(self) -> None:
        self.result, self.copy_path = {}, ""
        self.table.setRowCount(0)
        for w in (self.table, self.scrub_button, self.use_button, self.status):
            w.hide()

    def modes(self) -> dict[str, str]:
        """The mode chosen per entity type in the table."""
        return {self.table.item(r, 1).text(): self.table.item(r, 4).text() for r in range(self.table.rowCount())
                if self.table.item(r, 4) is not None and self.table.item(r, 4).text() in SCRUB_MODES}

    def set_mode(self, entity: str, mode: str) -> None:
        for r in range(self.table.rowCount()):
            if self.table.item(r, 1).text() == entity:
                self.table.item(r, 4).setText(mode)

    # -- jobs -------------------------------------------------------------------------------

    def scan(self) -> None:
        self._start(PII_SCAN, {"path": self._path}, f"Scanning {self._path}…")

    def scrub(self) -> None:
        self._start(PII_SCRUB, {"path": self._path, "modes": self.modes(), "default_mode": DEFAULT_MODE},
                    "Writing the scrubbed copy…")

    def _start(self, kind: str, spec: dict[str, Any], text: str) -> None:
        self._kind = kind
        self.scan_button.setEnabled(False)
        self.scrub_button.setEnabled(False)
        self._say(text)
        name = f"{'scan' if kind == PII_SCAN else 'scrub'} {self._path.rsplit('/', 1)[-1]}"
        self._client.request("jobs.start", {"kind": kind, "spec": spec, "name": name}, self._started, self._failed)

    def _started(self, job: dict[str, Any]) -> None:
        self._job = job["id"]
        self._timer.start()

    def _poll(self) -> None:
        if self._job:
            self._client.request("jobs.get", {"id": self._job}, self._progress, self._failed)

    def _progress(self, job: dict[str, Any]) -> None:
        if job.get("state") not in FINAL_STATES:
            done = (job.get("progress") or {}).get("done")
            if done:
                self._say(f"{'Scanning' if self._kind == PII_SCAN else 'Scrubbing'}: {done:,} rows…")
            return
        self._timer.stop()
        self._job = None
        self.scan_button.setEnabled(bool(self._path))
        self.scrub_button.setEnabled(True)
        if job["state"] != SUCCEEDED:
            err = job.get("error") or {}
            self._say(f"The {'scan' if self._kind == PII_SCAN else 'scrub'} {job['state']}: "
                      f"{err.get('message') or 'see its log on the Runs page'}", error=True)
            return
        result = job.get("result") or {}
        if self._kind == PII_SCAN:
            self.show_scan(result)
        else:
            self.show_scrub(result)

    def _failed(self, err: Any) -> None:
        self._timer.stop()
        self._job = None
        self.scan_button.setEnabled(bool(self._path))
        self.scrub_button.setEnabled(bool(self.result))
        self._say(error_text(err), error=True)

    def _say(self, text: str, error: bool = False) -> None:
        say(self.status, text, error)

    # -- results ----------------------------------------------------------------------------

    def show_scan(self, result: dict[str, Any]) -> None:
        self.result, self.copy_path = result, ""
        rows = findings_rows(result)
        self.table.setRowCount(len(rows))
        for r, (column, entity, n, examples) in enumerate(rows):
            for c, value in enumerate((column, entity, f"{n:,}", examples)):
                item = QTableWidgetItem(value)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                if c == 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
            mode = QTableWidgetItem(DEFAULT_MODE)
            mode.setFlags(mode.flags() | Qt.ItemFlag.ItemIsEditable)
            mode.setToolTip("Double-click to change.\n" + "\n".join(MODE_WORDS.values()))
            self.table.setItem(r, 4, mode)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        shown = min(len(rows), MAX_ROWS_SHOWN)  # every type at once, up to a dozen, without a scroll bar
        self.table.setFixedHeight(self.table.horizontalHeader().height() + 4
                                  + sum(self.table.rowHeight(r) for r in range(shown)))
        self.table.setVisible(bool(rows))
        self.scrub_button.setVisible(bool(rows))
        self.use_button.hide()
        text = summary_text(result)
        self._say(text if rows else f"Nothing found. {text}")

    def show_scrub(self, result: dict[str, Any]) -> None:
        self.copy_path = (result.get("output") or {}).get("path") or ""
        self._say(f"Scrubbed copy written: {self.copy_path}. {summary_text(result, 'replaced')}")
        self.use_button.setVisible(bool(self.copy_path))
