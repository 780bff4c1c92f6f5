"""Compare: fine-tuning runs side by side, curves overlaid and specs diffed.

Runs arrive from the Runs page (``set_runs``) or are ticked in the picker on
the left (finished fine-tunes, kept current by the ``jobs`` topic). For each
run the page reads its record (``jobs.get``) and its metrics (``jobs.metrics``),
then draws train loss, eval loss and the task's metric against step, one
colour per run, a summary row per run and the specs side by side.

A second tab, Variants (``app/pages/compare/variants``), shows one parent run and its
compressed variants measured side by side (``show_variants``); a third, Evaluations
(``app/pages/compare/evaluations``), the evaluate.model scores of a run, its variants and its
base model in one table (``show_evaluations``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QListWidget,
    QListWidgetItem,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_process import EngineProcess
from app.models.jobs import best_text, display_name, peak_text, summary
from app.pages.compare.evaluations import EvaluationsView
from app.pages.compare.sweep_view import SweepView
from app.pages.compare.variants import VariantsView
from app.state.navigation import Navigator
from app.text import format as fmt
from app.widgets.common import label
from app.widgets.empty_state import empty_state
from app.widgets.overlay_chart import OverlayChart, run_colour
from app.widgets.spec_diff import SpecDiff
from engine.api.job_terms import FINAL_STATES, FINETUNE

LIST_LIMIT = 1000
MAX_POINTS = 5000  # per curve: far more than a chart can show, well under a frame
# The task's headline metric, in order of preference: classification, then language models.
TASK_METRICS = ("accuracy", "perplexity", "macro_f1", "f1_macro")
SUMMARY_COLUMNS = ("Run", "State", "Best metric", "Duration", "Peak memory")
NO_RUNS_TICKED = ("Tick two or more finished fine-tunes in the list, or select them on Runs and "
                  "press Compare.")
ONE_RUN_TICKED = "One run ticked: tick one more in the list to compare them."


def _swatch(colour: str) -> QIcon:
    pixmap = QPixmap(12, 12)
    pixmap.fill(QColor(colour))
    return QIcon(pixmap)


def series(rows: list[dict[str, Any]], kind: str, name: str) -> tuple[list[float], list[float]]:
    points = sorted((r["step"], r["value"]) for r in rows
                    if r.get("kind") == kind and r.get("name") == name)
    return [float(s) for s, _ in points], [float(v) for _, v in points]


class ComparePage(QWidget):
    title = "Compare"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client
        self._ids: list[str] = []
        self._records: dict[str, dict[str, Any]] = {}
        self._metrics: dict[str, list[dict[str, Any]]] = {}
        self._candidates: dict[str, dict[str, Any]] = {}  # finished fine-tunes for the picker

        outer = QVBoxLayout(self)
        outer.setContentsMargins(28, 24, 28, 20)
        outer.setSpacing(10)
        outer.addWidget(label("Compare", "h1"))
        # Two tabs: fine-tuning runs side by side, and a parent with its compressed variants.
        runs_tab = QWidget()
        runs_layout = QVBoxLayout(runs_tab)
        runs_layout.setContentsMargins(0, 8, 0, 0)
        runs_layout.setSpacing(10)
        runs_layout.addWidget(label(
            "Select two or more runs on the Runs page and press Compare, or tick finished "
            "fine-tunes in the list. Their curves are overlaid and their specs set side by "
            "side, with what differs highlighted.", "muted", wrap=True))

        picker_box = QWidget()
        picker_layout = QVBoxLayout(picker_box)
        picker_layout.setContentsMargins(0, 0, 0, 0)
        picker_layout.addWidget(label("Runs", "h2"))
        self.picker = QListWidget()
        self.picker.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.picker.setSpacing(2)
        self.picker.itemChanged.connect(self._on_picker_changed)
        picker_layout.addWidget(self.picker, 1)
        self.picker_note = label("No finished fine-tunes yet.", "muted", wrap=True)
        picker_layout.addWidget(self.picker_note)

        self.summary_table = QTableWidget(0, len(SUMMARY_COLUMNS))
        self.summary_table.setHorizontalHeaderLabels(list(SUMMARY_COLUMNS))
        self.summary_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.summary_table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.summary_table.verticalHeader().hide()
        self.summary_table.setShowGrid(False)
        head = self.summary_table.horizontalHeader()
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setStretchLastSection(True)
        self.charts = {"train_loss": OverlayChart("Train loss", "loss"),
                       "eval_loss": OverlayChart("Eval loss", "loss"),
                       "metric": OverlayChart("Eval accuracy", "accuracy")}
        charts_row = QHBoxLayout()
        for chart in self.charts.values():
            charts_row.addWidget(chart, 1)
        self.spec_diff = SpecDiff()
        self.spec_diff.setMinimumHeight(260)

        content = QWidget()
        content.setObjectName("pageBody")
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(0, 0, 8, 0)
        content_layout.setSpacing(12)
        content_layout.addWidget(self.summary_table)
        content_layout.addLayout(charts_row)
        content_layout.addWidget(self.spec_diff, 1)
        scroll = QScrollArea()
        scroll.setObjectName("pageScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(content)

        self.empty = empty_state("Nothing to compare yet", NO_RUNS_TICKED, "Open Runs",
                                 self.nav.action("runs"), icon_name="compare")
        self.body = QStackedWidget()
        self.body.addWidget(self.empty)
        self.body.addWidget(scroll)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(picker_box)
        splitter.addWidget(self.body)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([240, 900])
        splitter.setChildrenCollapsible(False)
        runs_layout.addWidget(splitter, 1)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        runs_layout.addWidget(self.message)

        self.variants = VariantsView(engine, self.nav)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(runs_tab, "Runs")
        self.tabs.addTab(self.variants, "Variants")
        self.tabs.setTabToolTip(1, "A parent run and its compressed variants: accuracy, latency, size")
        self.evaluations = EvaluationsView(engine, self.nav)
        self.tabs.addTab(self.evaluations, "Evaluations")
        self.tabs.setTabToolTip(2, "The base model, a run and its variants scored on the same data and benchmarks")
        self.sweeps = SweepView(engine, self.nav)
        self.tabs.addTab(self.sweeps, "Sweeps")
        self.tabs.setTabToolTip(3, "A sweep's trials: each setting against the metric, the best marked")
        outer.addWidget(self.tabs, 1)

        self.jobs = engine.jobs  # the window's JobsState: every record, kept current
        self.jobs.jobs_reset.connect(self.reload)
        self.jobs.job_changed.connect(self._on_job_event)
        self.jobs.job_removed.connect(self._on_job_removed)
        self.jobs.load_failed.connect(self._show_error)
        if self.jobs.loaded:
            self.reload()
        self._render()

    # -- which runs -------------------------------------------------------------------------

    def navigate(self, job_ids: list[str] | None = None, variants_of: str | None = None,
                 evaluations_of: str | None = None, sweep: str | None = None, deploy: str | None = None) -> None:
        """Opened from another page: compare ``job_ids``, show the variants of ``variants_of`` (for
        ``deploy``, where they will run), the evaluations of ``evaluations_of``, or the trials of ``sweep``."""
        if deploy:
            self.variants.set_deploy(deploy)
        if sweep:
            self.tabs.setCurrentWidget(self.sweeps)
            self.sweeps.fill_sweeps()
            self.sweeps.show_sweep(sweep)
        if job_ids is not None:
            self.set_runs(job_ids)
        if variants_of:
            self.show_variants(variants_of)
        if evaluations_of:
            self.show_evaluations(evaluations_of)

    def job_ids(self) -> list[str]:
        return list(self._ids)

    def show_variants(self, parent_id: str) -> None:
        """Open the Variants tab on ``parent_id`` and its compressed variants."""
        self.tabs.setCurrentWidget(self.variants)
        self.variants.show_parent(parent_id)

    def show_evaluations(self, job_id: str) -> None:
        """Open the Evaluations tab on ``run_id``'s family: base model, the run, its variants."""
        self.tabs.setCurrentWidget(self.evaluations)
        self.evaluations.show_run(job_id)

    def set_runs(self, ids: list[str]) -> None:
        """Compare exactly ``ids`` (in this order)."""
        self.tabs.setCurrentIndex(0)
        self._ids = list(dict.fromkeys(ids))
        for job_id in self._ids:
            self._load(job_id)
        self._fill_picker()
        self._render()

    def reload(self) -> None:
        """The job list was read again: refill the picker and re-read the runs compared."""
        self.message.hide()
        self._candidates = {job["id"]: job for job in self.jobs.by_kind(FINETUNE)[:LIST_LIMIT]}
        self._fill_picker()
        for job_id in self._ids:
            self._load(job_id)

    def _on_job_removed(self, job_id: str) -> None:
        self._candidates.pop(job_id, None)
        if job_id in self._ids:
            self._ids.remove(job_id)
            self._render()
        self._fill_picker()

    def _on_job_event(self, data: dict[str, Any]) -> None:
        job_id = data["id"]
        if data.get("kind") != FINETUNE:
            return
        old_state = (self._candidates.get(job_id) or {}).get("state")
        self._candidates[job_id] = data
        if data.get("state") != old_state:
            self._fill_picker()
            if job_id in self._ids:
                self._load(job_id)  # finished since it was added: read its final metrics

    def _fill_picker(self) -> None:
        jobs = [job for job in self._candidates.values()
                if job.get("state") in FINAL_STATES or job["id"] in self._ids]
        jobs += [self._records[i] for i in self._ids if i not in self._candidates and i in self._records]
        jobs.sort(key=lambda j: fmt.to_epoch(j.get("created_at")) or 0, reverse=True)
        self.picker.blockSignals(True)
        shown = [self.picker.item(i).data(Qt.ItemDataRole.UserRole)
                 for i in range(self.picker.count())]
        if shown == [job["id"] for job in jobs]:
            # Same runs: update ticks and colours in place (this may run inside itemChanged).
            for i, job in enumerate(jobs):
                self._style_item(self.picker.item(i), job)
            self.picker.blockSignals(False)
            return
        self.picker.clear()
        for job in jobs:
            item = QListWidgetItem(self.picker)
            item.setData(Qt.ItemDataRole.UserRole, job["id"])
            item.setToolTip(job["id"])
            item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable)
            self._style_item(item, job)
        self.picker.blockSignals(False)
        self.picker_note.setVisible(not jobs)

    def _style_item(self, item: QListWidgetItem, job: dict[str, Any]) -> None:
        item.setText(f"{display_name(job)}\n{job.get('state')} · "
                     f"{fmt.timestamp(job.get('created_at'))}")
        checked = job["id"] in self._ids
        item.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
        # The run's colour in the charts; a blank swatch keeps the names lined up.
        colour = run_colour(self._ids.index(job["id"])) if checked else "transparent"
        item.setIcon(_swatch(colour))

    def _on_picker_changed(self, item: QListWidgetItem) -> None:
        job_id = item.data(Qt.ItemDataRole.UserRole)
        checked = item.checkState() == Qt.CheckState.Checked
        if checked and job_id not in self._ids:
            self.set_runs([*self._ids, job_id])
        elif not checked and job_id in self._ids:
            self.set_runs([i for i in self._ids if i != job_id])

    # -- data --------------------------------------------------------------------------------

    def _load(self, job_id: str) -> None:
        if not self._client.is_connected:
            return

        def got_record(reply: dict[str, Any]) -> None:
            self._records[job_id] = reply
            if job_id in self._ids:
                self._render()

        def got_metrics(kind: str, reply: dict[str, Any]) -> None:
            rows = [r for r in self._metrics.get(job_id, []) if r.get("kind") != kind]
            self._metrics[job_id] = rows + list(reply.get("metrics") or [])
            if job_id in self._ids:
                self._render()

        def failed(err) -> None:
            if job_id in self._ids:
                self._show_error(f"{job_id}: {err}")

        self._client.request("jobs.get", {"id": job_id}, got_record, failed)
        # Only what is drawn: train loss, and the evaluations (few rows). A long run's series come
        # thinned to MAX_POINTS by the engine, which an overlay chart cannot tell apart.
        for kind, names in (("train", ["loss"]), ("eval", None)):
            params = {"id": job_id, "kind": kind, "max_points": MAX_POINTS}
            if names:
                params["names"] = names
            self._client.request("jobs.metrics", params,
                                 lambda reply, kind=kind: got_metrics(kind, reply), failed)

    def _task_metric(self) -> str | None:
        names = {r.get("name") for i in self._ids for r in self._metrics.get(i, [])
                 if r.get("kind") == "eval"}
        return next((m for m in TASK_METRICS if m in names), None)

    # -- drawing -----------------------------------------------------------------------------

    def _render(self) -> None:
        # Comparing needs two runs; one alone is what Monitor shows.
        self.body.setCurrentIndex(1 if len(self._ids) >= 2 else 0)
        self.empty.set_text(ONE_RUN_TICKED if len(self._ids) == 1 else NO_RUNS_TICKED)
        names = [display_name(self._records.get(i) or self._candidates.get(i) or {"id": i})
                 for i in self._ids]
        colours = [run_colour(n) for n in range(len(self._ids))]
        metric = self._task_metric() or "accuracy"
        self.charts["metric"].set_title(f"Eval {metric.replace('_', ' ')}", metric)
        plots = (("train_loss", "train", "loss", "No training steps recorded yet."),
                 ("eval_loss", "eval", "loss", "No evaluation recorded yet."),
                 ("metric", "eval", metric, f"No run recorded eval {metric}."))
        for key, kind, name, empty_text in plots:
            self.charts[key].set_series(
                [(names[n], colours[n], *series(self._metrics.get(i, []), kind, name))
                 for n, i in enumerate(self._ids)], empty_text)
        self._fill_summary(names, colours)
        self.spec_diff.set_specs(names, [(self._records.get(i) or {}).get("spec") or {}
                                         for i in self._ids], colours)

    def _fill_summary(self, names: list[str], colours: list[str]) -> None:
        self.summary_table.setRowCount(len(self._ids))
        for row, job_id in enumerate(self._ids):
            job = self._records.get(job_id) or self._candidates.get(job_id) or {"id": job_id}
            info = summary(job)
            if not info.get("best"):
                info["best"] = self._best_from_metrics(job_id)
            cells = [names[row], str(job.get("state") or "loading…"), best_text(info.get("best")),
                     fmt.job_duration(job),
                     peak_text(info.get("estimated_peak"), info.get("measured_peak"))]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(job_id if col == 0 else text)
                if col == 0:
                    item.setIcon(_swatch(colours[row]))
                self.summary_table.setItem(row, col, item)
        height = self.summary_table.horizontalHeader().height() + 4
        height += sum(self.summary_table.rowHeight(r) for r in range(len(self._ids)))
        self.summary_table.setFixedHeight(max(height, 60))

    def _best_from_metrics(self, job_id: str) -> dict[str, Any] | None:
        """The best eval value of the task's metric, for a record without a ``summary``."""
        metric = self._task_metric()
        points = [r for r in self._metrics.get(job_id, [])
                  if r.get("kind") == "eval" and r.get("name") == metric]
        if not points:
            return None
        pick = min if metric == "perplexity" else max
        best = pick(points, key=lambda r: r["value"])
        return {"metric": metric, "value": best["value"], "step": best["step"]}

    def _show_error(self, err) -> None:
        self.message.setText(str(err))
        self.message.setVisible(True)
