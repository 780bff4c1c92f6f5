"""The table of jobs behind the Runs page: engine job records, newest first."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor

from app import format as fmt

COLUMNS = ("ID", "Kind", "Name", "State", "Created", "Duration")
STATE_COLUMN = COLUMNS.index("State")
DURATION_COLUMN = COLUMNS.index("Duration")
ACTIVE_STATES = ("queued", "running", "stopping")

# Same meaning as the status dot: green done, blue busy, amber winding down, red failed.
STATE_COLOURS = {
    "queued": "#5a6472",
    "running": "#1864ab",
    "stopping": "#a35f00",
    "succeeded": "#2b8a3e",
    "failed": "#c92a2a",
    "cancelled": "#5a6472",
}

Index = QModelIndex | QPersistentModelIndex


class JobsModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._jobs: list[dict[str, Any]] = []

    # -- reading ---------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self._jobs)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        job = self._jobs[index.row()]
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(job, column)
        if role == Qt.ItemDataRole.ForegroundRole and column == STATE_COLUMN:
            return QColor(STATE_COLOURS.get(job.get("state", ""), "#1f2328"))
        if role == Qt.ItemDataRole.ToolTipRole:
            error = job.get("error") or {}
            if error:
                return "\n".join(filter(None, [error.get("message"), error.get("hint")]))
            return job.get("id")
        return None

    @staticmethod
    def _text(job: dict[str, Any], column: int) -> str:
        if column == 0:
            return str(job.get("id", ""))
        if column == 1:
            return str(job.get("kind", ""))
        if column == 2:
            return str(job.get("name") or "")
        if column == 3:
            return str(job.get("state", ""))
        if column == 4:
            return fmt.timestamp(job.get("created_at"))
        return fmt.job_duration(job)

    def job(self, row: int) -> dict[str, Any] | None:
        return self._jobs[row] if 0 <= row < len(self._jobs) else None

    def row_of(self, job_id: str) -> int:
        for row, job in enumerate(self._jobs):
            if job.get("id") == job_id:
                return row
        return -1

    def has_active(self) -> bool:
        return any(job.get("state") in ACTIVE_STATES for job in self._jobs)

    # -- changing --------------------------------------------------------------------

    def set_jobs(self, jobs: list[dict[str, Any]]) -> None:
        self.beginResetModel()
        self._jobs = [dict(job) for job in jobs]
        self.endResetModel()

    def upsert(self, job: dict[str, Any]) -> int:
        """Merge a (possibly partial) job record in; new jobs go on top. Returns its row."""
        row = self.row_of(job.get("id", ""))
        if row < 0:
            self.beginInsertRows(QModelIndex(), 0, 0)
            self._jobs.insert(0, dict(job))
            self.endInsertRows()
            return 0
        self._jobs[row].update(job)
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))
        return row

    def refresh_durations(self) -> None:
        """Let running jobs' durations tick without touching anything else."""
        for row, job in enumerate(self._jobs):
            if job.get("state") in ("running", "stopping"):
                index = self.index(row, DURATION_COLUMN)
                self.dataChanged.emit(index, index)
