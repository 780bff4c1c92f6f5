"""The Checkpoints and the Artifacts & lineage tabs of RunDetails: one job's files.

Both tabs show one ``jobs.artifacts`` reply (checkpoints, artifacts, parent and child
runs), fetched when RunDetails shows a job or its state changes, and again shortly
after a checkpoint, artifact or status event of that job.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_client import EngineClient
from app.text import format as fmt
from app.widgets.common import label

FILES_DEBOUNCE_MS = 500
FILE_EVENTS = ("checkpoint", "artifact", "status")


def _table(headers: list[str]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.verticalHeader().hide()
    table.setShowGrid(False)
    table.setAlternatingRowColors(True)
    head = table.horizontalHeader()
    head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    head.setStretchLastSection(True)
    return table


def _checkpoint_note(ckpt: dict[str, Any]) -> str:
    if ckpt.get("complete") is False:
        return "incomplete"  # no manifest: a resume skips it
    return "latest" if ckpt.get("latest") else ""


def _fill(table: QTableWidget, rows: list[list[str]]) -> None:
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            item = QTableWidgetItem(text)
            item.setToolTip(text)
            table.setItem(r, c, item)


class RunOutputs(QObject):
    """The two tabs (``checkpoints_tab``, ``artifacts_tab``) and the ``jobs.artifacts`` reply behind them."""

    run_link_activated = Signal(str)  # a parent/child run was clicked in the lineage
    files_changed = Signal()  # a new listing arrived (the overview reads its peak memory)

    def __init__(self, client: EngineClient, parent: QObject | None = None):
        super().__init__(parent)
        self._client = client
        self._job: dict[str, Any] | None = None
        self.files: dict[str, Any] | None = None  # jobs.artifacts of the shown job
        self.files_error = ""
        self._timer = QTimer(self, singleShot=True, interval=FILES_DEBOUNCE_MS)
        self._timer.timeout.connect(self.fetch)

        self.checkpoints_note = label("", "muted", wrap=True)
        self.checkpoints = _table(["Step", "Size", "Created", "Latest", "Path"])
        self.checkpoints_tab = QWidget()
        ckpt_box = QVBoxLayout(self.checkpoints_tab)
        ckpt_box.addWidget(self.checkpoints_note)
        ckpt_box.addWidget(self.checkpoints, 1)

        self.lineage = label("", wrap=True)
        self.lineage.setTextFormat(Qt.TextFormat.RichText)
        self.lineage.linkActivated.connect(self.run_link_activated.emit)
        self.artifacts_note = label("", "muted", wrap=True)
        self.artifacts = _table(["Type", "Step", "Size", "Written", "Path"])
        self.artifacts_tab = QWidget()
        art_box = QVBoxLayout(self.artifacts_tab)
        art_box.addWidget(self.lineage)
        art_box.addWidget(self.artifacts_note)
        art_box.addWidget(self.artifacts, 1)

    @property
    def job_id(self) -> str | None:
        return self._job.get("id") if self._job else None

    def set_job(self, job: dict[str, Any] | None, new: bool) -> None:
        """Follow ``job`` (the dict RunDetails shows); a new one forgets the old job's files."""
        self._job = job
        if new:
            self.files, self.files_error = None, ""
            self.render()

    def event_seen(self, kind: str) -> None:
        """An event of the shown job: list the files again soon after a checkpoint or artifact."""
        if kind in FILE_EVENTS and self.files is not None:
            self._timer.start()

    def fetch(self) -> None:
        job_id = self.job_id
        if job_id is None or not self._client.is_connected:
            return

        def got(reply: dict[str, Any]) -> None:
            if job_id == self.job_id:
                self.files, self.files_error = reply, ""
                self.render()
                self.files_changed.emit()

        def failed(err) -> None:
            if job_id == self.job_id:
                self.files, self.files_error = None, str(err)
                self.render()

        self._client.request("jobs.artifacts", {"id": job_id}, got, failed)

    def render(self) -> None:
        files = self.files or {}
        checkpoints = sorted(files.get("checkpoints") or [], key=lambda c: c.get("step") or 0)
        _fill(self.checkpoints, [[str(c.get("step", "")), fmt.size(c.get("bytes")),
                                  fmt.timestamp(c.get("created")), _checkpoint_note(c),
                                  str(c.get("path", ""))] for c in checkpoints])
        artifacts = files.get("artifacts") or []
        _fill(self.artifacts, [[str(a.get("type", "")), str(a.get("step", "") or ""),
                                "deleted" if a.get("exists") is False else
                                fmt.size(a["bytes"]) if a.get("bytes") is not None else "—",
                                fmt.timestamp(a.get("t")), str(a.get("path", ""))]
                               for a in artifacts])
        if self.files_error:
            note = f"Could not list this run's files: {self.files_error}"
            self.checkpoints_note.setText(note)
            self.artifacts_note.setText(note)
        elif self.files is None:
            self.checkpoints_note.setText("")
            self.artifacts_note.setText("")
        else:
            self.checkpoints_note.setText(
                f"{len(checkpoints)} checkpoint(s); a stopped or failed run resumes from the "
                "latest intact one." if checkpoints else "This run has written no checkpoints.")
            self.artifacts_note.setText("" if artifacts else "This run has recorded no artifacts.")
        self.show_lineage()

    def show_lineage(self) -> None:
        if self._job is None:
            self.lineage.clear()
            return
        files = self.files or {}
        parent = files.get("parent") or self._job.get("parent_id")
        children = files.get("children") or []

        def link(job_id: str) -> str:
            return f'<a href="{job_id}">{job_id}</a>'

        lines = [f"<b>Parent run:</b> {link(parent) if parent else 'none (started from scratch)'}",
                 "<b>Runs made from this one:</b> "
                 + (", ".join(link(c) for c in children) if children else "none")]
        self.lineage.setText("<br>".join(lines))
