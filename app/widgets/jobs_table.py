"""The table of jobs behind the Runs page, the proxy that filters and sorts it, and the state colours.

Each cell's text comes from app/models/jobs.py; every cell also has a sort value (``SORT_ROLE``), so
sorting compares numbers and times, not their text.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap

from app.models.jobs import (
    NONE,
    best_text,
    cluster_text,
    display_name,
    duration_seconds,
    is_system,
    parent_id,
    run_summary,
    run_title,
    state_text,
    strategy_text,
    summary,
)
from app.state.style import ThemeColours, colour
from app.text import format as fmt
from engine.api.job_terms import ACTIVE_STATES, FINAL_STATES, LIVE_STATES

COLUMNS = ("Name", "Task", "Model", "Method", "Strategy", "State", "Best metric", "Duration",
           "Created")
(NAME_COLUMN, TASK_COLUMN, MODEL_COLUMN, METHOD_COLUMN, STRATEGY_COLUMN, STATE_COLUMN,
 BEST_COLUMN, DURATION_COLUMN, CREATED_COLUMN) = range(len(COLUMNS))
SORT_ROLE = Qt.ItemDataRole.UserRole + 1

# Same meaning as the status dot: green done, blue busy, amber winding down, red failed.
# Read from the theme at each lookup (resources/themes/*.json), so they stay readable on dark too.
STATE_COLOURS = ThemeColours({
    "queued": "state-queued",
    "running": "state-running",
    "stopping": "state-stopping",
    "succeeded": "state-succeeded",
    "failed": "state-failed",
    "stopped": "state-stopping",
    "cancelled": "state-queued",
})
# The state filter on the Runs page: label -> states it keeps (None keeps all).
STATE_GROUPS: dict[str, tuple[str, ...] | None] = {
    "All states": None,
    "Active": ACTIVE_STATES,
    "Succeeded": ("succeeded",),
    "Failed": ("failed",),
    "Stopped": ("stopped",),
    "Cancelled": ("cancelled",),
}
_STATE_ORDER = {state: i for i, state in enumerate(ACTIVE_STATES + FINAL_STATES)}

Index = QModelIndex | QPersistentModelIndex


def state_dot(state: str, size: int = 10) -> QIcon:
    """A filled circle in the state's colour (cached: the table asks for it on every paint)."""
    fill = STATE_COLOURS.get(state, "#8a94a0")
    if (state, fill) not in _DOTS:  # keyed by colour too: a theme switch draws new ones
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(fill))
        painter.drawEllipse(1, 1, size - 2, size - 2)
        painter.end()
        _DOTS[state, fill] = QIcon(pixmap)
    return _DOTS[state, fill]


_DOTS: dict[tuple[str, str], QIcon] = {}


# -- the model --------------------------------------------------------------------------------

class JobsModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._jobs: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}  # the same records, by id: parents of variants

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
        if role == SORT_ROLE:
            return self._sort_value(job, column)
        if column == STATE_COLUMN:
            if role == Qt.ItemDataRole.ForegroundRole:
                return QColor(STATE_COLOURS.get(job.get("state", ""), colour("text")))
            if role == Qt.ItemDataRole.DecorationRole:
                return state_dot(job.get("state", ""))
        if role == Qt.ItemDataRole.ToolTipRole:
            error = job.get("error") or {}
            if column == STATE_COLUMN and job.get("cluster") and job.get("state") in LIVE_STATES:
                return cluster_text(job["cluster"])
            if error:
                return "\n".join(filter(None, [error.get("message"), error.get("hint")]))
            title, name = self.title(job), display_name(job)
            about = f"{job.get('id')} ({job.get('kind')})"
            return f"{name}\n{about}" if column == NAME_COLUMN and title != name else about
        return None

    def lookup(self, job_id: str) -> dict[str, Any] | None:
        return self._by_id.get(job_id)

    def title(self, job: dict[str, Any]) -> str:
        """The Name column: 'int8 of <parent>' for a variant named after its parent."""
        return run_title(job, self.lookup)

    def _text(self, job: dict[str, Any], column: int) -> str:
        if column == NAME_COLUMN:
            return self.title(job)
        if column == STATE_COLUMN:
            return state_text(job)
        if column == DURATION_COLUMN:
            return fmt.job_duration(job)
        if column == CREATED_COLUMN:
            return fmt.timestamp(job.get("created_at"))
        info = run_summary(job, self.lookup)
        if column == STRATEGY_COLUMN:
            return strategy_text(info)
        if column == BEST_COLUMN:
            return best_text(info.get("best"))
        key = {TASK_COLUMN: "task", MODEL_COLUMN: "model", METHOD_COLUMN: "method"}[column]
        return str(info.get(key) or NONE)

    def _sort_value(self, job: dict[str, Any], column: int) -> Any:
        """A value of one type per column (None sorts last), so sorting is by meaning."""
        if column == STATE_COLUMN:
            return _STATE_ORDER.get(job.get("state", ""), len(_STATE_ORDER))
        if column == DURATION_COLUMN:
            return duration_seconds(job)
        if column == CREATED_COLUMN:
            return fmt.to_epoch(job.get("created_at"))
        if column == BEST_COLUMN:
            best = summary(job).get("best") or {}
            value = best.get("value")
            return float(value) if isinstance(value, (int, float)) else None
        if column == STRATEGY_COLUMN:
            info = summary(job)
            return f"{info.get('strategy') or '~'} {int(info.get('nproc') or 1):05d}"
        text = self._text(job, column)
        return None if text == NONE else text.lower()

    def job(self, row: int) -> dict[str, Any] | None:
        return self._jobs[row] if 0 <= row < len(self._jobs) else None

    def jobs(self) -> list[dict[str, Any]]:
        return list(self._jobs)

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
        self._by_id = {str(job.get("id")): job for job in self._jobs}
        self.endResetModel()

    def upsert(self, job: dict[str, Any]) -> int:
        """Merge a (possibly partial) job record in; new jobs go on top. Returns its row."""
        row = self.row_of(job.get("id", ""))
        if row < 0:
            self.beginInsertRows(QModelIndex(), 0, 0)
            self._jobs.insert(0, dict(job))
            self._by_id[str(job.get("id"))] = self._jobs[0]
            self.endInsertRows()
            self._children_changed(str(job.get("id")))  # a parent that arrived after its variants
            return 0
        self._jobs[row].update(job)
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))
        self._children_changed(str(job.get("id")))  # their names and columns come from it
        return row

    def _children_changed(self, job_id: str) -> None:
        for row, job in enumerate(self._jobs):
            if parent_id(job) == job_id:
                self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    def remove(self, job_id: str) -> bool:
        row = self.row_of(job_id)
        if row < 0:
            return False
        self.beginRemoveRows(QModelIndex(), row, row)
        del self._jobs[row]
        self._by_id.pop(job_id, None)
        self.endRemoveRows()
        self._children_changed(job_id)
        return True

    def refresh_durations(self) -> None:
        """Let running jobs' durations tick without touching anything else."""
        for row, job in enumerate(self._jobs):
            if job.get("state") in LIVE_STATES:
                index = self.index(row, DURATION_COLUMN)
                self.dataChanged.emit(index, index)


class JobsFilter(QSortFilterProxyModel):
    """Text and state filters over JobsModel; sorts by SORT_ROLE with empty values last."""

    FILTER_COLUMNS = (NAME_COLUMN, TASK_COLUMN, MODEL_COLUMN, METHOD_COLUMN, STATE_COLUMN)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._text = ""
        self._states: tuple[str, ...] | None = None
        self._show_system = False  # a machine probe is the engine's business, not a run
        self.setSortRole(SORT_ROLE)
        self.setDynamicSortFilter(True)

    def set_text(self, text: str) -> None:
        self._refilter(lambda: setattr(self, "_text", text.strip().lower()))

    def set_state_group(self, group: str) -> None:
        self._refilter(lambda: setattr(self, "_states", STATE_GROUPS.get(group)))

    def set_show_system(self, show: bool) -> None:
        self._refilter(lambda: setattr(self, "_show_system", bool(show)))

    def shows_system(self) -> bool:
        return self._show_system

    def _refilter(self, change) -> None:
        if hasattr(self, "endFilterChange"):  # Qt 6.10+; invalidateFilter is deprecated there
            self.beginFilterChange()
            change()
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:
            change()
            self.invalidateFilter()

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:  # noqa: N802
        model = self.sourceModel()
        job = model.job(source_row) if isinstance(model, JobsModel) else None
        if job is None:
            return True
        if not self._show_system and is_system(job):
            return False
        if self._states is not None and job.get("state") not in self._states:
            return False
        if not self._text:
            return True
        haystack = " ".join([str(job.get("id", "")), str(job.get("kind", ""))] + [
            str(model.index(source_row, c).data() or "") for c in self.FILTER_COLUMNS]).lower()
        return all(word in haystack for word in self._text.split())

    def lessThan(self, left: Index, right: Index) -> bool:  # noqa: N802 - Qt override
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        if a is None or b is None:
            # Empty cells go to the bottom whichever way the column is sorted.
            descending = self.sortOrder() == Qt.SortOrder.DescendingOrder
            return (a is not None) != descending if (a is None) != (b is None) else False
        try:
            return a < b
        except TypeError:
            return str(a) < str(b)
