"""Variants: a parent run and every compressed variant of it, measured side by side.

``show_parent(run_id)`` asks the engine for ``compress.variants`` and shows a
sortable table, latency against the metric with the Pareto front, the selected
variant against the parent class by class, and a recommendation for the limits
the user sets. A ``jobs`` event for a child of the shown parent re-reads the
list, so a variant that finishes appears without a manual refresh.
"""

from __future__ import annotations

import csv
from typing import Any

from PySide6.QtCore import QItemSelectionModel, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QScrollArea,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.models.jobs import display_name
from app.models.variants import (
    DEPLOY_TARGETS,
    LATENCY_BASES,
    Row,
    build_rows,
    csv_records,
    pareto_front,
    recommend,
    set_deploy,
)
from app.pages.compare.variants.per_class import PerClassView
from app.pages.compare.variants.scatter import VariantsScatter
from app.pages.compare.variants.table import COLUMN, VariantsModel, VariantsSort
from app.state.navigation import Navigator
from app.widgets.common import card, label
from app.widgets.empty_state import empty_state
from app.widgets.wizard_parts import error_text
from engine.api.job_terms import FINETUNE
from engine.api.protocol import METHOD_NOT_FOUND

REFRESH_DELAY_MS = 250  # a burst of job events (start, running, succeeded) costs one request
LIST_LIMIT = 1000
MAX_TABLE_ROWS = 10


class VariantsView(QWidget):
    export_requested = Signal(str)  # run id of the variant to export

    def __init__(self, engine: Any, nav: Navigator | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # to Compress and Export (app/state/navigation.py)
        self._client = engine.client
        self.jobs = engine.jobs  # the window's JobsState: every record, kept current
        self.parent_id: str | None = None
        self.reply: dict[str, Any] | None = None
        self._rows: list[Row] = []
        self._front: list[str] = []
        self._recommended: Row | None = None
        self.loading = False

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 8, 0, 0)
        outer.setSpacing(10)
        top = QHBoxLayout()
        top.addWidget(label("Parent run", "h2"))
        self.parent_combo = QComboBox()
        self.parent_combo.setMinimumWidth(280)
        self.parent_combo.setToolTip("A finished fine-tune; its compressed variants are listed")
        self.parent_combo.activated.connect(self._on_combo)
        top.addWidget(self.parent_combo)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        top.addWidget(self.refresh_button)
        self.status = label("", "muted", wrap=True)
        top.addWidget(self.status, 1)
        outer.addLayout(top)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        self.model = VariantsModel(self)
        self.proxy = VariantsSort(self)
        self.proxy.setSourceModel(self.model)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        head = self.table.horizontalHeader()
        head.setHighlightSections(False)
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # the engine's order until a header is clicked
        self.table.setSortingEnabled(True)
        self.table.selectionModel().currentRowChanged.connect(lambda *_: self._on_selection())
        self.table.doubleClicked.connect(lambda _i: self.export_selected())

        self.scatter = VariantsScatter()
        self.scatter.point_clicked.connect(self.select_run)

        limits, box = card()
        box.addWidget(label("Pick a variant", "h2"))
        box.addWidget(label("The smallest file that meets both limits is recommended. Leave a limit at "
                            "“no limit” to ignore it.", "muted", wrap=True))
        form = QFormLayout()
        self.deploy_combo = QComboBox()
        for key, text in DEPLOY_TARGETS.items():
            self.deploy_combo.addItem(text, key)
        self.deploy_combo.setToolTip("Where the model will run: latencies count only where they were measured "
                                     "there (a TensorRT-form int8 variant timed on this CPU does not count for "
                                     "a CPU; a Jetson counts its on-device figures)")
        form.addRow("Deploy on", self.deploy_combo)
        self.latency_limit = QDoubleSpinBox()
        self.latency_limit.setRange(0, 1_000_000)
        self.latency_limit.setDecimals(2)
        self.latency_limit.setSingleStep(0.5)
        self.latency_limit.setSpecialValueText("no limit")
        self.latency_limit.setSuffix(" ms")
        form.addRow("Latency under", self.latency_limit)
        self.basis_combo = QComboBox()
        for key, text in LATENCY_BASES.items():
            self.basis_combo.addItem(f"p50 at {text}", key)
        self.basis_combo.setToolTip("Which latency the limit, the chart and the Pareto front use")
        form.addRow("Measured", self.basis_combo)
        self.drop_limit = QDoubleSpinBox()
        self.drop_limit.setRange(0, 100)
        self.drop_limit.setDecimals(2)
        self.drop_limit.setSingleStep(0.25)
        self.drop_limit.setSpecialValueText("no limit")
        self.drop_label = label("Accuracy drop under")
        form.addRow(self.drop_label, self.drop_limit)
        box.addLayout(form)
        self.recommendation = label("", wrap=True)
        self.recommendation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.addWidget(self.recommendation)
        box.addSpacing(6)
        self.export_variant_button = QPushButton("Export this variant…")
        self.export_variant_button.setProperty("role", "primary")
        self.export_variant_button.setToolTip("Open Export with the selected variant (double-click a row "
                                              "does the same)")
        self.export_variant_button.clicked.connect(self.export_selected)
        self.png_button = QPushButton("Export chart PNG…")
        self.png_button.clicked.connect(self._save_png_dialog)
        self.csv_button = QPushButton("Export table CSV…")
        self.csv_button.clicked.connect(self._save_csv_dialog)
        for button in (self.export_variant_button, self.png_button, self.csv_button):
            box.addWidget(button)
        self.saved_note = label("", "muted", wrap=True)
        self.saved_note.hide()
        box.addWidget(self.saved_note)
        box.addStretch(1)
        limits.setMaximumWidth(360)
        for widget in (self.latency_limit, self.drop_limit):
            widget.valueChanged.connect(self._recompute)
        self.basis_combo.currentIndexChanged.connect(self._recompute)
        self.deploy_combo.currentIndexChanged.connect(self._on_deploy)

        self.per_class = PerClassView()

        body = QWidget()
        body.setObjectName("pageBody")
        column = QVBoxLayout(body)
        column.setContentsMargins(0, 0, 8, 0)
        column.setSpacing(12)
        column.addWidget(self.table)
        middle = QHBoxLayout()
        middle.addWidget(self.scatter, 1)
        middle.addWidget(limits)
        column.addLayout(middle)
        column.addWidget(self.per_class)
        scroll = QScrollArea()
        scroll.setObjectName("pageScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(body)
        self.body = scroll
        self.empty = empty_state(
            "No parent run chosen", "Pick a finished fine-tune above, or press “Compare variants” on Compress, "
            "to see its compressed variants side by side.", "Open Compress",
            self.nav.action("compress"), icon_name="compare")
        # A parent without variants yet: say how to make some rather than show a one-row table.
        self.no_variants = empty_state(
            "No variants yet", "This run has no compressed variants: make smaller, faster ones on Compress "
            "and they appear here as they finish.", "Compress this run", self._compress_parent,
            icon_name="compress")
        outer.addWidget(self.empty, 1)
        outer.addWidget(self.no_variants, 1)
        outer.addWidget(self.body, 1)
        self.body.hide()
        self.no_variants.hide()

        self._refresh_timer = QTimer(self, singleShot=True, interval=REFRESH_DELAY_MS)
        self._refresh_timer.timeout.connect(self.refresh)
        self.jobs.jobs_reset.connect(self.reload)
        self._client.connected.connect(lambda *_: self.refresh())  # what changed while disconnected
        self.jobs.job_changed.connect(self._on_job_event)
        self.jobs.job_removed.connect(self._on_job_removed)
        if self.jobs.loaded:
            self.reload()
        self._update_actions()

    # -- what is shown ----------------------------------------------------------------------

    def show_parent(self, job_id: str) -> None:
        """Show ``run_id`` and its variants (read from the engine now)."""
        if job_id != self.parent_id:
            self.parent_id = job_id
            self.reply = None
            self._set_rows([])
        self._select_in_combo(job_id)
        self.empty.hide()
        self._show_body()
        self.refresh()

    def _show_body(self) -> None:
        """The table and chart, or the "no variants yet" state once the parent is known to have none."""
        none_yet = bool(self._rows) and not any(not r.is_parent for r in self._rows)
        self.no_variants.setVisible(none_yet)
        self.body.setVisible(not none_yet)

    def _compress_parent(self) -> None:
        if self.parent_id:
            self.nav.show("compress", source=self.parent_id)

    def refresh(self) -> None:
        if not self.parent_id:
            return
        self.loading = True
        self.status.setText("Reading the variants…")
        parent_id = self.parent_id
        self._client.request("compress.variants", {"id": parent_id},
                             lambda reply: self._on_variants(parent_id, reply),
                             lambda err: self._on_error(parent_id, err))

    def rows(self) -> list[Row]:
        return list(self._rows)

    def front(self) -> list[str]:
        """Run ids on the Pareto front (for the latency basis chosen), fastest first."""
        return list(self._front)

    def recommended_id(self) -> str | None:
        return self._recommended.job_id if self._recommended else None

    def basis(self) -> str:
        return self.basis_combo.currentData() or "b1"

    def deploy(self) -> str:
        return self.deploy_combo.currentData() or "cpu"

    def set_deploy(self, key: str) -> None:
        self.deploy_combo.setCurrentIndex(max(0, self.deploy_combo.findData(key)))

    def _on_deploy(self) -> None:
        set_deploy(self._rows, self.deploy())
        self.model.set_rows(self._rows)
        self._recompute()

    def set_limits(self, max_latency_ms: float | None, max_drop: float | None, basis: str | None = None) -> None:
        """The constraint box's values (None: no limit)."""
        if basis:
            self.basis_combo.setCurrentIndex(max(0, self.basis_combo.findData(basis)))
        self.latency_limit.setValue(max_latency_ms or 0.0)
        self.drop_limit.setValue(max_drop or 0.0)
        self._recompute()

    # -- replies ----------------------------------------------------------------------------

    def _on_variants(self, parent_id: str, reply: dict[str, Any]) -> None:
        if parent_id != self.parent_id:
            return  # a reply for the parent shown before
        self.loading = False
        self.message.hide()
        self.reply = reply
        parent = reply.get("parent") or {}
        if parent.get("id"):
            self._name_in_combo(parent["id"], display_name(parent))
        self._set_rows(build_rows(reply))

    def _on_error(self, parent_id: str, err: Any) -> None:
        if parent_id != self.parent_id:
            return
        self.loading = False
        self.status.setText("")
        if getattr(err, "code", None) == METHOD_NOT_FOUND:
            text = "This engine cannot list variants yet (no compress.variants): update the engine and restart it."
        else:
            text = f"Could not read the variants of {parent_id}: {error_text(err)}"
        self.message.setText(text)
        self.message.show()

    def _set_rows(self, rows: list[Row]) -> None:
        selected = self.selected_id()
        self._rows = rows
        set_deploy(rows, self.deploy())
        self.model.set_rows(rows)
        llm = self.model.per_token()
        for key in ("em", "rouge", "ttft"):  # a language model's answer scores and first token; a classifier has none
            self.table.setColumnHidden(COLUMN[key], not llm)
        self.latency_limit.setSuffix(" ms/token" if llm else " ms")
        batch = next((r.batch_n for r in rows if r.batch_n), None)
        for i, key in enumerate(("b1", "bN")):  # a language model's latency is per token: one request, or N at once
            text = (("one request at a time" if key == "b1" else f"{batch or 'N'} requests at once") if llm
                    else f"p50 at {LATENCY_BASES[key]}")
            self.basis_combo.setItemText(i, text)
        self._fit_table()
        metric = next((r for r in rows if r.metric is not None), None)
        higher = metric.higher_is_better if metric else True
        self.drop_label.setText("Accuracy drop under" if higher else "Perplexity rise under")
        self.drop_limit.setSuffix(" points" if higher else "")
        variants = [r for r in rows if not r.is_parent]
        if rows:
            states: dict[str, int] = {}
            for r in variants:
                states[r.state] = states.get(r.state, 0) + 1
            counts = ", ".join(f"{n} {s}" for s, n in states.items())
            self.status.setText(f"{len(variants)} variant{'s' if len(variants) != 1 else ''}"
                                + (f": {counts}" if counts else " yet: make some on Compress"))
        self._recompute()
        if selected and not self.select_run(selected):
            self.per_class.show_row(None)
        if self.parent_id:
            self._show_body()
        self._update_actions()

    def _fit_table(self) -> None:
        """Tall enough for every row up to MAX_TABLE_ROWS, so the page scrolls rather than the table."""
        shown = min(max(len(self._rows), 2), MAX_TABLE_ROWS)
        row_height = self.table.verticalHeader().defaultSectionSize()
        height = self.table.horizontalHeader().sizeHint().height() + shown * row_height
        self.table.setFixedHeight(height + self.table.horizontalScrollBar().sizeHint().height() + 6)

    def _recompute(self) -> None:
        basis = self.basis()
        self._front = pareto_front(self._rows, basis)
        if any(not r.is_parent for r in self._rows):
            limit_ms = self.latency_limit.value() or None
            limit_drop = self.drop_limit.value() or None
            self._recommended, text = recommend(self._rows, limit_ms, limit_drop, basis)
        else:
            self._recommended, text = None, ""
        self.recommendation.setText(text)
        self.recommendation.setStyleSheet("font-weight: 600; color: #2b8a3e;" if self._recommended
                                          else "color: #5a6472;")
        self.model.set_marks(self._front, self.recommended_id())
        self.scatter.set_rows(self._rows, basis, self._front, self.recommended_id())

    # -- selection and actions --------------------------------------------------------------

    def selected_row(self) -> Row | None:
        index = self.table.selectionModel().currentIndex()
        if not index.isValid():
            return None
        source = self.proxy.mapToSource(index)
        return self.model.rows[source.row()] if 0 <= source.row() < len(self.model.rows) else None

    def selected_id(self) -> str | None:
        row = self.selected_row()
        return row.job_id if row else None

    def select_run(self, job_id: str) -> bool:
        row = self.model.row_of(job_id)
        if row < 0:
            return False
        index = self.proxy.mapFromSource(self.model.index(row, 0))
        self.table.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        self.table.scrollTo(index)
        return True

    def _on_selection(self) -> None:
        self.per_class.show_row(self.selected_row())
        self._update_actions()

    def _update_actions(self) -> None:
        row = self.selected_row()
        exported = row is not None and bool(row.runtime) and not row.is_parent  # a file an export wrote
        exportable = row is not None and row.state == "succeeded" and not exported
        self.export_variant_button.setEnabled(exportable)
        self.export_variant_button.setToolTip(
            "Open Export with the selected model" if exportable
            else f"An exported file ({(row.entry or {}).get('path')}): serve it, or export the parent again"
            if exported and row is not None else "Select a finished variant (or the parent) in the table first")
        has_rows = bool(self._rows)
        self.csv_button.setEnabled(has_rows)
        self.png_button.setEnabled(bool(self.scatter.points()))

    def export_selected(self) -> None:
        """Send the selected model to the Export page."""
        row = self.selected_row()
        if row is None or row.state != "succeeded" or (row.runtime and not row.is_parent):
            return
        self.export_requested.emit(row.job_id)
        self.nav.show("export", job_id=row.job_id, record=row.record)

    def save_png(self, path: str, width: int = 1600) -> None:
        self.scatter.save_png(path, width)

    def save_csv(self, path: str) -> None:
        """Every row with raw figures, in the order the table shows them."""
        order = [self.proxy.mapToSource(self.proxy.index(i, 0)).row() for i in range(self.proxy.rowCount())]
        rows = [self.model.rows[i] for i in order]
        with open(path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(csv_records(rows, self._front, self.recommended_id()))

    def _save_png_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the chart", f"variants-{self.parent_id}.png",
                                              "PNG image (*.png)", options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self._saved(lambda: self.save_png(path), path)

    def _save_csv_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the table", f"variants-{self.parent_id}.csv",
                                              "CSV (*.csv)", options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self._saved(lambda: self.save_csv(path), path)

    def _saved(self, write, path: str) -> None:
        try:
            write()
            self.saved_note.setText(f"Saved {path}.")
        except OSError as exc:
            self.saved_note.setText(f"Could not save {path}: {exc}")
        self.saved_note.show()

    # -- the parent picker and events -------------------------------------------------------

    def reload(self) -> None:
        """The job list was read again: name every finished fine-tune in the picker."""
        for job in self.jobs.by_kind(FINETUNE, ("succeeded",))[:LIST_LIMIT]:
            self._name_in_combo(job["id"], display_name(job))
        if self.parent_id:
            self._select_in_combo(self.parent_id)
        else:
            self.parent_combo.setCurrentIndex(-1)
            self.parent_combo.setPlaceholderText("choose a finished fine-tune")

    def _name_in_combo(self, job_id: str, name: str) -> None:
        text = name if name == job_id else f"{name}  ({job_id})"
        i = self.parent_combo.findData(job_id)
        if i < 0:
            self.parent_combo.addItem(text, job_id)
        else:
            self.parent_combo.setItemText(i, text)

    def _select_in_combo(self, job_id: str) -> None:
        if self.parent_combo.findData(job_id) < 0:
            self._name_in_combo(job_id, job_id)
        self.parent_combo.setCurrentIndex(self.parent_combo.findData(job_id))

    def _on_combo(self, index: int) -> None:
        job_id = self.parent_combo.itemData(index)
        if job_id and job_id != self.parent_id:
            self.show_parent(job_id)

    def _on_job_removed(self, job_id: str) -> None:
        if self.parent_id and job_id in {r.job_id for r in self._rows}:
            self._refresh_timer.start()

    def _on_job_event(self, data: dict[str, Any]) -> None:
        job_id = data["id"]
        if data.get("kind") == FINETUNE and data.get("state") == "succeeded":
            self._name_in_combo(job_id, display_name(data))
        if not self.parent_id:
            return
        shown = {r.job_id for r in self._rows}
        if data.get("parent_id") == self.parent_id or job_id in shown:
            self._refresh_timer.start()
