"""Step 5: the export job as it runs: progress, one row per format, compatibility, the device's figures.

Everything here is filled from the job's own events (``run/<id>/progress``,
``export``, ``compat``, ``device``, ``result``, ``error``; replayed from the start,
then live) and its record (``jobs`` topic, ``jobs.get``, whose ``result`` is result.json).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.pages.export.plan import export_folder, format_folder
from app.pages.export.results import (
    FINDING_COLUMNS,
    FORMAT_COLUMNS,
    LLM_COLUMNS,
    SEVERITY_COLOURS,
    VERDICT_COLOURS,
    compat_summary,
    device_line,
    device_rows,
    finding_rows,
    format_row,
    format_tooltip,
    is_llm,
    llm_note,
    llm_rows,
    parity_note,
)
from app.widgets.common import FactsView, card, label
from app.widgets.jobs_table import STATE_COLOURS
from app.widgets.open_folder import FolderFallback, open_folder
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, show_text, step_header
from engine.api.job_terms import ACTIVE_STATES, FINAL_STATES

MAX_DEVICE_LINES = 5000


def _table(columns: tuple[str, ...], stretch: int) -> QTableWidget:
    """A read-only table whose column ``stretch`` takes the spare width (a path, a message)."""
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(list(columns))
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setAlternatingRowColors(True)
    head = table.horizontalHeader()
    head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    head.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table


def _fit_height(table: QTableWidget) -> None:
    """Tall enough for its rows, so the page scrolls instead of the table."""
    rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
    table.setFixedHeight(table.horizontalHeader().height() + rows + 2 * table.frameWidth() + 4)


class RunStep(Step):
    title = "Run"
    stop_requested = Signal(str)
    another_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.job_id: str | None = None
        self.state = ""
        self.record: dict[str, Any] = {}
        self.result: dict[str, Any] = {}
        self.formats: dict[str, dict[str, Any]] = {}  # format -> its entry, as the events said
        self.device_lines: list[str] = []
        self._wants_host = False
        outer = step_column(self, step_header("Run", "The export runs in the engine: closing this window does not stop "
                                                     "it. Each format appears below as soon as it has been checked."))

        frame, box = card()
        head = QHBoxLayout()
        self.name_label = label("Nothing started yet: press Start on the Review step.", "h2", wrap=True)
        head.addWidget(self.name_label, 1)
        self.state_label = label("")
        head.addWidget(self.state_label)
        box.addLayout(head)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        box.addWidget(self.progress)
        self.stage_label = label("", "muted", wrap=True)
        box.addWidget(self.stage_label)
        self.error_label = label("", "error", wrap=True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setStyleSheet("font-size: 14px; font-weight: 600;")
        self.error_label.hide()
        box.addWidget(self.error_label)
        self.hint_label = label("", wrap=True)
        self.hint_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hint_label.hide()
        box.addWidget(self.hint_label)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setProperty("role", "danger")
        self.stop_button.setToolTip("Stop the export (what is written so far stays in its folder)")
        self.stop_button.clicked.connect(lambda: self.job_id and self.stop_requested.emit(self.job_id))
        self.open_button = QPushButton("Open folder")
        self.open_button.clicked.connect(self.open_folder)
        self.another_button = QPushButton("Export another")
        self.another_button.setToolTip("Back to the start of the wizard, for another model or other formats")
        self.another_button.clicked.connect(self.another_requested.emit)
        for button in (self.stop_button, self.open_button, self.another_button):
            buttons.addWidget(button)
        box.addLayout(buttons)
        self.folder_fallback = FolderFallback()  # the path and Copy, where no file manager opens
        box.addWidget(self.folder_fallback)
        outer.addWidget(frame)

        frame, box = card()
        box.addWidget(label("Formats", "h2"))
        self.results_table = _table(FORMAT_COLUMNS, FORMAT_COLUMNS.index("File"))
        self.results_table.itemSelectionChanged.connect(self._update_buttons)
        box.addWidget(self.results_table)
        self.parity_label = label("", "muted", wrap=True)  # why a row says "reported", on screen
        self.parity_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.parity_label.hide()
        box.addWidget(self.parity_label)
        self.results_empty = label("No format is done yet.", "muted")
        box.addWidget(self.results_empty)
        outer.addWidget(frame)

        self.compat_card, box = card()
        box.addWidget(label("TensorRT compatibility", "h2"))
        self.compat_label = label("", "muted", wrap=True)
        box.addWidget(self.compat_label)
        self.findings_table = _table(FINDING_COLUMNS, FINDING_COLUMNS.index("Message"))
        self.findings_table.setWordWrap(True)
        box.addWidget(self.findings_table)
        outer.addWidget(self.compat_card)

        self.device_card, box = card()
        box.addWidget(label("On the device", "h2"))
        self.device_facts = FactsView()
        box.addWidget(self.device_facts)
        self.device_log = QPlainTextEdit()
        self.device_log.setObjectName("log")
        self.device_log.setReadOnly(True)
        self.device_log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.device_log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.device_log.setPlaceholderText("The Jetson's upload, build and benchmark output appears here.")
        self.device_log.setMinimumHeight(180)
        box.addWidget(self.device_log)
        outer.addWidget(self.device_card)
        outer.addStretch(1)
        self.reset()

    # -- a new job ---------------------------------------------------------------------------

    def reset(self) -> None:
        self.job_id, self.state, self.record, self.result = None, "", {}, {}
        self.formats = {}
        self.device_lines = []
        self._wants_host = False
        self.name_label.setText("Nothing started yet: press Start on the Review step.")
        self.state_label.setText("")
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        show_text(self.stage_label, "")
        self._show_error(None)
        self.results_table.setRowCount(0)
        _fit_height(self.results_table)
        self.results_empty.show()
        show_text(self.parity_label, "")
        self.folder_fallback.hide()
        self.compat_card.hide()
        self.device_facts.set_facts([])
        self.device_log.clear()
        self.device_card.hide()
        self._update_buttons()

    def begin(self, name: str, spec: dict[str, Any]) -> None:
        """Start was pressed: show the job as starting."""
        self.reset()
        self._wants_host = bool(spec.get("host"))
        self.name_label.setText(f"{name}  →  {', '.join(spec.get('formats') or [])}")
        self._set_state("starting")
        self.progress.setRange(0, 0)
        self.device_card.setVisible(self._wants_host)
        self.device_facts.hide()

    def refused(self, message: str) -> None:
        self._set_state("not started")
        self.progress.setRange(0, 1000)
        self._show_error({"message": message})

    # -- the record and the events -----------------------------------------------------------

    def set_record(self, record: dict[str, Any]) -> None:
        self.record = {**self.record, **record}
        self.job_id = record.get("id") or self.job_id
        self._set_state(str(record.get("state") or "queued"))
        if isinstance(record.get("result"), dict):
            self.set_result(record["result"])
        if self.state == "failed":
            self._show_error(record.get("error") or {"message": "The export failed; see the run's log."})
        elif self.state in ("stopped", "cancelled"):
            show_text(self.stage_label, f"The export was {self.state}.")

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "progress":
            fraction = data.get("fraction")
            if isinstance(fraction, (int, float)) and self.state not in FINAL_STATES:
                self.progress.setRange(0, 1000)
                self.progress.setValue(int(1000 * max(0.0, min(1.0, float(fraction)))))
            text = " · ".join(str(data[k]) for k in ("stage", "message") if data.get(k))
            if text:
                show_text(self.stage_label, text)
        elif kind == "export" and data.get("format"):
            entry = {k: v for k, v in data.items() if k not in ("kind", "t", "format")}
            self.set_format(str(data["format"]), entry)
        elif kind == "device":
            self.add_device_line(device_line(data))
        elif kind == "compat":  # before the result: a failed check ends the job without one
            self._render_compat({k: v for k, v in data.items() if k not in ("kind", "t")})
        elif kind == "result":
            self.set_result({k: v for k, v in data.items() if k not in ("kind", "t")})
        elif kind == "error" and data.get("message"):
            self._show_error(data)
        elif kind == "status" and data.get("state") == "running" and self.state in ("starting", "queued"):
            self._set_state("running")  # the job says so before the record does

    def set_format(self, name: str, entry: dict[str, Any]) -> None:
        self.formats[name] = entry
        self._render_formats()

    def set_result(self, result: dict[str, Any]) -> None:
        self.result = result
        for name, entry in (result.get("formats") or {}).items():
            if isinstance(entry, dict):
                self.formats[name] = entry
        self._render_formats()
        self._render_compat(result.get("compat"))
        device = result.get("device")
        rows = device_rows(device if isinstance(device, dict) else None)
        self.device_facts.set_facts(rows)
        self.device_facts.setVisible(bool(rows))
        if rows:
            self.device_card.show()

    def add_device_line(self, line: str) -> None:
        self.device_lines.append(line)
        if len(self.device_lines) > MAX_DEVICE_LINES:
            del self.device_lines[: len(self.device_lines) - MAX_DEVICE_LINES]
        self.device_log.appendPlainText(line)
        self.device_card.show()

    # -- rendering ---------------------------------------------------------------------------

    def _render_formats(self) -> None:
        table = self.results_table
        llm = any(is_llm(e) for e in self.formats.values())
        columns = LLM_COLUMNS if llm else FORMAT_COLUMNS
        table.setColumnCount(len(columns))
        table.setHorizontalHeaderLabels(list(columns))
        rows = [(cells, format_tooltip(entry)) for name, entry in self.formats.items()
                for cells in (llm_rows(name, entry) if is_llm(entry) else [format_row(name, entry)])]
        table.setRowCount(len(rows))
        for row, (cells, tip) in enumerate(rows):
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                if column == len(cells) - 1 and text in VERDICT_COLOURS:
                    item.setForeground(QColor(VERDICT_COLOURS[text]))
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                table.setItem(row, column, item)
        table.resizeRowsToContents()
        _fit_height(table)
        self.results_empty.setVisible(not self.formats)
        show_text(self.parity_label, "\n".join(filter(None, [parity_note(self.formats), llm_note(self.formats)])))
        self._update_buttons()

    def _render_compat(self, compat: Any) -> None:
        if not isinstance(compat, dict):
            self.compat_card.hide()
            return
        self.compat_card.show()
        self.compat_label.setText(compat_summary(compat))
        rows = finding_rows(compat)
        table = self.findings_table
        table.setRowCount(len(rows))
        for r, cells in enumerate(rows):
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if c == 0:
                    item.setForeground(QColor(SEVERITY_COLOURS.get(text, "#5a6472")))
                table.setItem(r, c, item)
        table.setVisible(bool(rows))
        table.resizeRowsToContents()
        _fit_height(table)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.state_label.setText(state)
        colour = STATE_COLOURS.get(state)
        self.state_label.setStyleSheet(f"color: {colour}; font-weight: 600;" if colour else "font-weight: 600;")
        if state == "succeeded":
            self.progress.setRange(0, 1000)
            self.progress.setValue(1000)
        elif state in FINAL_STATES and self.progress.maximum() == 0:
            self.progress.setRange(0, 1000)
        self._update_buttons()

    def _show_error(self, error: dict[str, Any] | None) -> None:
        message = str((error or {}).get("message") or "")
        hint = str((error or {}).get("hint") or "")
        show_text(self.error_label, message)
        show_text(self.hint_label, f"What to do: {hint}" if hint else "")

    def _update_buttons(self) -> None:
        self.stop_button.setEnabled(bool(self.job_id) and self.state in ACTIVE_STATES)
        fmt = self.selected_format()
        self.open_button.setEnabled(bool(self.target_folder()))
        self.open_button.setToolTip(f"Open the run's export/{fmt + '/' if fmt else ''} folder"
                                    + ("; select a row to open another format's folder"
                                       if len(self.formats) > 1 else ""))
        self.another_button.setEnabled(self.state in FINAL_STATES or self.state in ("", "not started"))

    def folder(self) -> str:
        """The run's export/ folder ('' before the engine said where the run lies)."""
        return export_folder(self.record)

    def selected_format(self) -> str:
        """The format of the selected row, else the one format written besides ONNX (which the others start
        from), else ONNX alone; '' when that leaves several."""
        rows = {i.row() for i in self.results_table.selectedItems()}
        if len(rows) == 1:
            item = self.results_table.item(rows.pop(), 0)
            if item is not None:
                return item.text()
        made = [f for f in self.formats if f != "onnx"] or list(self.formats)
        return made[0] if len(made) == 1 else ""

    def target_folder(self) -> str:
        """What Open folder opens: the selected (or only) format's own folder, else export/."""
        fmt = self.selected_format()
        return format_folder(self.record, fmt) if fmt else self.folder()

    def open_folder(self) -> bool:
        return open_folder(self.target_folder(), self.folder_fallback)

    def format_cells(self) -> dict[str, list[str]]:
        """format -> the texts of its row (tests and screenshots read it)."""
        table = self.results_table
        return {table.item(r, 0).text(): [table.item(r, c).text() for c in range(table.columnCount())]
                for r in range(table.rowCount()) if table.item(r, 0) is not None}
