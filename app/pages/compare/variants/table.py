"""The variants table: one row per model (the parent first), sortable by value."""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QColor, QFont

from app.models.variants import DEPLOY_TARGETS, Row, device_text
from app.text import format as fmt
from app.widgets.jobs_table import STATE_COLOURS

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
NONE = "—"
# key, header, tooltip
COLUMNS = (
    ("technique", "Variant", "The technique; the parent is the run every variant was made from"),
    ("name", "Run", "The job's name (its id in the tooltip)"),
    ("state", "State", ""),
    ("metric", "Accuracy", "On the held-out examples the variant's job scored"),
    ("delta", "Δ vs parent", "Variant minus parent, both measured in the variant's own job "
                             "(same examples, threads and runtime): accuracy in points"),
    ("agreement", "Agreement", "Share of examples where the variant's top-1 equals the parent's"),
    ("em", "Exact match", "Language models: greedy answers equal to the data's answers (after normalising case, "
                          "punctuation and articles)"),
    ("rouge", "ROUGE-L", "Language models: longest common word sequence with the data's answers (F-measure)"),
    ("b1", "p50 b1 (ms)", "Median latency of one example"),
    ("bn", "p50 bN (ms)", "Median latency of a batch of N examples"),
    ("ttft", "First token", "Language models: time from the prompt to the first generated token (median), one "
                            "request at a time, in the file's own runtime"),
    ("speedup", "Speed-up", "Parent latency / variant latency at batch N, both measured in the variant's own job"),
    ("size", "Size", "The model file(s)"),
    ("compression", "Compression", "Parent size / variant size"),
    ("params", "Params", ""),
    ("peak", "Peak memory", "Resident memory the model added while running"),
    ("device", "On device", "Language models: tokens/s and time to first token of the GGUF file on the Jetson "
                            "(llama.cpp's llama-bench). Classifiers: median latency and throughput of the TensorRT "
                            "engine built and benchmarked on a "
                            "Jetson by an export of this model (Export page)"),
)
COLUMN = {key: i for i, (key, _h, _t) in enumerate(COLUMNS)}
Index = QModelIndex | QPersistentModelIndex
RECOMMENDED = QColor("#e6f4ea")
PARETO_MARK = "◆ "
OFF_TARGET = " ✱"  # a latency measured somewhere other than where the model will run (see the tooltip)


def _fixed(value: float | None, digits: int, suffix: str = "") -> str:
    return NONE if value is None else f"{value:.{digits}f}{suffix}"


def _count(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return NONE
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(int(value))


class VariantsModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[Row] = []
        self.front: set[str] = set()
        self.recommended: str | None = None

    def set_rows(self, rows: list[Row]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def set_marks(self, front: list[str], recommended: str | None) -> None:
        self.front, self.recommended = set(front), recommended
        if self.rows:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self.rows) - 1, len(COLUMNS) - 1))

    def row_of(self, job_id: str) -> int:
        return next((i for i, r in enumerate(self.rows) if r.job_id == job_id), -1)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 - Qt API
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 - Qt API
        return 0 if parent.isValid() else len(COLUMNS)

    def per_token(self) -> bool:
        """A language model's table: latency columns are milliseconds per generated token."""
        return any(r.per_token for r in self.rows)

    def metric_header(self) -> str:
        name = next((r.metric_name for r in self.rows if r.metric is not None), "accuracy")
        return name.capitalize()

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 - Qt API
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        key, header, tip = COLUMNS[section]
        if role == Qt.ItemDataRole.DisplayRole:
            if key == "metric":
                return self.metric_header()
            if key in ("b1", "bn") and self.per_token():
                batch = next((r.batch_n for r in self.rows if r.batch_n), None)
                return "ms/token b1" if key == "b1" else f"ms/token b{batch or 'N'}"
            if key == "bn":
                batch = next((r.batch_n for r in self.rows if r.batch_n), None)
                return f"p50 b{batch} (ms)" if batch else header
            return header
        if role == Qt.ItemDataRole.ToolTipRole:
            if key == "delta" and self.metric_header() == "Perplexity":
                return tip.replace("accuracy in points", "perplexity (lower is better)")
            if key in ("b1", "bn") and self.per_token():
                return ("Milliseconds per generated token (1 / tokens per second), greedy, one request at a time, "
                        "in the file's own runtime" if key == "b1" else
                        "Milliseconds per generated token (1 / tokens per second of all requests together) with N "
                        "requests at once, batched in the file's own runtime: lower than b1 when batching pays")
            if key == "peak" and self.per_token():
                return ("Language models: peak resident memory of the fresh process that ran the file (its runtime "
                        "and the model)")
            if key == "agreement" and self.per_token():
                return "Language models: share of the source model's greedy tokens matched before the first difference"
            return tip or None
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        key = COLUMNS[index.column()][0]
        if role == Qt.ItemDataRole.DisplayRole:
            return self.text(row, key)
        if role == SORT_ROLE:
            return self.sort_value(row, key)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.tooltip(row, key)
        if role == Qt.ItemDataRole.FontRole and (row.is_parent or row.job_id == self.recommended):
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.BackgroundRole and row.job_id == self.recommended:
            return RECOMMENDED
        if role == Qt.ItemDataRole.ForegroundRole and key in ("b1", "bn", "speedup") and self.off_target(row):
            return QColor("#868e96")
        if role == Qt.ItemDataRole.ForegroundRole and key == "state":
            colour = STATE_COLOURS.get(row.state)
            return QColor(colour) if colour else None
        if role == Qt.ItemDataRole.ForegroundRole and key == "delta" and row.drop() is not None:
            return QColor("#2b8a3e") if row.drop() <= 0 else QColor("#c92a2a")
        if role == Qt.ItemDataRole.TextAlignmentRole and key not in ("technique", "name", "state"):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.UserRole:
            return row.job_id
        return None

    def text(self, row: Row, key: str) -> str:
        if key == "technique":
            mark = PARETO_MARK if row.job_id in self.front else ""
            return mark + ("parent" if row.is_parent else row.technique)
        if key == "name":
            return row.name
        if key == "state":
            return row.state or NONE
        if key == "metric":
            return _fixed(row.metric, 2 if row.metric_name == "perplexity" else 4)
        if key == "delta":
            if row.is_parent:
                return NONE
            if row.delta is None:
                return NONE
            return f"{row.delta:+.2f}" + (" pts" if row.higher_is_better else "")
        if key == "agreement":
            return _fixed(row.agreement * 100 if row.agreement is not None else None, 1, "%")
        if key in ("em", "rouge"):
            value = row.quality.get("exact_match" if key == "em" else "rouge_l")
            return _fixed(value * 100 if value is not None else None, 1, "%")
        if key in ("b1", "bn", "speedup"):
            value = _fixed(row.b1_ms if key == "b1" else row.bn_ms, 2) if key != "speedup" \
                else _fixed(row.speedup, 2, "×")
            return value + (OFF_TARGET if self.off_target(row) and value != NONE else "")
        if key == "ttft":
            return _fixed(row.ttft_s * 1000 if row.ttft_s is not None else None, 0, " ms")
        if key == "compression":
            return _fixed(row.compression, 2, "×")
        if key == "size":
            return fmt.size(row.size_bytes) if row.size_bytes is not None else NONE
        if key == "params":
            return _count(row.params)
        if key == "peak":
            return fmt.size(row.peak_bytes) if row.peak_bytes is not None else NONE
        if key == "device":
            return device_text(row.device) or NONE
        return ""

    def sort_value(self, row: Row, key: str) -> Any:
        values = {"technique": row.technique if not row.is_parent else "", "name": row.name.lower(),
                  "state": row.state, "metric": row.metric, "delta": 0.0 if row.is_parent else row.delta,
                  "agreement": row.agreement, "em": row.quality.get("exact_match"),
                  "rouge": row.quality.get("rouge_l"), "b1": row.b1_ms, "bn": row.bn_ms, "ttft": row.ttft_s,
                  "speedup": row.speedup,
                  "size": row.size_bytes, "compression": row.compression, "params": row.params,
                  "peak": row.peak_bytes,
                  "device": ((row.device or {}).get("latency_ms") or {}).get("median")
                  or (row.device or {}).get("tokens_per_s")}
        return values.get(key)

    @staticmethod
    def off_target(row: Row) -> bool:
        """Measured somewhere other than where the user will run it (the Compare page's Deploy on)."""
        return row.b1_ms is not None and not row.measured_on(row.deploy)

    def tooltip(self, row: Row, key: str) -> str | None:
        if key == "name":
            return row.job_id
        if key in ("b1", "bn", "speedup") and self.off_target(row):
            return row.latency_note() or (f"Measured with {row.measured_with or 'ONNX Runtime on a CPU'}, "
                                          f"not on {DEPLOY_TARGETS.get(row.deploy, row.deploy)}.")
        if key == "technique" and row.runtime:
            path = (row.entry or {}).get("path")
            return f"Measured in {row.runtime}" + (f": {path}" if path else "") + \
                (" (on the Pareto front)" if row.job_id in self.front else "")
        if key == "technique" and row.job_id in self.front:
            return "On the Pareto front: no other model is both faster and better"
        if key == "state" and row.error:
            return row.error
        if key == "device" and row.device and row.device.get("runtime") == "llama.cpp":
            d = row.device
            return (f"{d.get('host')}: llama.cpp ({d.get('backends') or '?'}{', ' + d['gpu_info'] if d.get('gpu_info') else ''}), "
                    f"JetPack {d.get('jetpack') or '?'}, GGUF {d.get('gguf_type')}: {d.get('gen_tokens')} tokens generated "
                    f"at {d.get('tokens_per_s')} tok/s, a {d.get('prompt_tokens')}-token prompt read at "
                    f"{d.get('prompt_tokens_per_s')} tok/s (llama-bench; export job {d.get('job') or '?'})")
        if key == "device" and row.device:
            d = row.device
            lat = d.get("latency_ms") or {}
            return (f"{d.get('host')}: TensorRT {d.get('tensorrt') or '?'}, JetPack {d.get('jetpack') or '?'}, "
                    f"{d.get('precision')}, batch {d.get('batch')}; p99 {lat.get('p99')} ms "
                    f"(export job {d.get('job')})")
        if key in ("delta", "speedup", "compression") and not row.is_parent and row.parent_entry:
            return ("Against the parent as measured in this variant's own job (same examples, threads "
                    "and runtime), not the parent row's figures")
        return None


class VariantsSort(QSortFilterProxyModel):
    """Sorts by SORT_ROLE values; rows without a value go last in either direction."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)

    def lessThan(self, left: Index, right: Index) -> bool:  # noqa: N802 - Qt API
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        missing_a = a is None or (isinstance(a, float) and math.isnan(a))
        missing_b = b is None or (isinstance(b, float) and math.isnan(b))
        if missing_a or missing_b:
            ascending = self.sortOrder() == Qt.SortOrder.AscendingOrder
            if missing_a and missing_b:
                return False
            return missing_b if ascending else missing_a
        if isinstance(a, str) or isinstance(b, str):
            return str(a) < str(b)
        return a < b
