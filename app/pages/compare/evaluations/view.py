"""Evaluations: one table for "did fine-tuning help, did int4 hurt" (hosted by Compare).

``show_run(run_id)`` asks the engine for ``evaluations.list`` and shows one row per model of the run's
family: the base model, the fine-tune and each variant, with the answer scores of its newest evaluation on
the chosen data (exact match, token F1, ROUGE-L, BLEU, chrF; accuracy and macro F1 for a classifier) and
each lm-eval task's figure (engine/api/evaluations.py builds the rows). "Evaluate…" starts an evaluate.model
job for the selected row, and one for the base model when it has no result on that data yet. A ``jobs``
event of an evaluation re-reads the table, so results appear as they finish.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.models.jobs import display_name, variant_word
from app.pages.compare.evaluations.dialog import EvaluateDialog
from app.state.navigation import Navigator
from app.widgets.common import label
from app.widgets.empty_state import empty_state
from app.widgets.wizard_parts import error_text
from engine.api import evaluations as ev
from engine.api.job_terms import EVALUATE, FINETUNE, SUCCEEDED
from engine.api.protocol import METHOD_NOT_FOUND

REFRESH_DELAY_MS = 250  # a burst of job events costs one request


class EvaluationsView(QWidget):
    def __init__(self, engine: Any, nav: Navigator | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)
        self._client = engine.client
        self.jobs = engine.jobs  # the window's JobsState
        self.job_id: str | None = None
        self.reply: dict[str, Any] | None = None
        self.columns: list[str] = []
        self._rows: list[ev.Row] = []
        self.started: list[dict[str, Any]] = []  # the jobs the last Evaluate… started

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 8, 0, 0)
        outer.setSpacing(10)
        top = QHBoxLayout()
        top.addWidget(label("Run", "h2"))
        self.run_combo = QComboBox()
        self.run_combo.setMinimumWidth(220)
        self.run_combo.setToolTip("A finished fine-tune: its base model, itself and its variants are the rows")
        self.run_combo.activated.connect(lambda _i: self._pick_run())
        top.addWidget(self.run_combo)
        top.addWidget(label("Data"))
        self.data_combo = QComboBox()
        self.data_combo.setMinimumWidth(180)
        self.data_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.data_combo.setMaximumWidth(320)  # a long file name must not widen the window past 1024 px
        self.data_combo.setToolTip("Answer scores are compared only on the same rows")
        self.data_combo.activated.connect(lambda _i: self._render())
        top.addWidget(self.data_combo)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        top.addWidget(self.refresh_button)
        self.evaluate_button = QPushButton("Evaluate…")
        self.evaluate_button.setProperty("role", "primary")
        self.evaluate_button.setToolTip("Score the selected model (and the base model when it has no result)")
        self.evaluate_button.clicked.connect(self.evaluate_selected)
        top.addWidget(self.evaluate_button)
        top.addStretch(1)
        outer.addLayout(top)
        self.status = label("", "muted", wrap=True)
        outer.addWidget(self.status)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        self.table = QTableWidget(0, 1)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        head = self.table.horizontalHeader()
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        head.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        head.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._update_actions)
        self.note = label("", "muted", wrap=True)
        self.body = QWidget()
        column = QVBoxLayout(self.body)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.table, 1)
        column.addWidget(self.note)
        self.empty = empty_state("No run chosen", "Pick a finished fine-tune above to see its base model, itself "
                                 "and its variants scored side by side.", "Open Runs", self.nav.action("runs"),
                                 icon_name="compare")
        outer.addWidget(self.empty, 1)
        outer.addWidget(self.body, 1)
        self.body.hide()

        self._refresh_timer = QTimer(self, singleShot=True, interval=REFRESH_DELAY_MS)
        self._refresh_timer.timeout.connect(self.refresh)
        self.jobs.jobs_reset.connect(self._fill_runs)
        self.jobs.job_changed.connect(self._on_job_event)
        self._client.connected.connect(lambda *_: self.refresh())
        if self.jobs.loaded:
            self._fill_runs()
        self._update_actions()

    # -- which run ---------------------------------------------------------------------------

    def _fill_runs(self) -> None:
        runs = self.jobs.by_kind(FINETUNE, [SUCCEEDED])
        ids = [job["id"] for job in runs]
        if self.job_id and self.job_id not in ids and self.jobs.get(self.job_id):
            runs.insert(0, self.jobs.get(self.job_id))
        self.run_combo.blockSignals(True)
        self.run_combo.clear()
        for job in runs:
            self.run_combo.addItem(display_name(job), job["id"])
        self.run_combo.setCurrentIndex(self.run_combo.findData(self.job_id) if self.job_id else -1)
        self.run_combo.blockSignals(False)

    def _pick_run(self) -> None:
        job_id = self.run_combo.currentData()
        if job_id:
            self.show_run(job_id)

    def show_run(self, job_id: str) -> None:
        """Show ``run_id``'s family (read from the engine now)."""
        if job_id != self.job_id:
            self.job_id, self.reply, self._rows = job_id, None, []
            self.data_combo.clear()
        if self.run_combo.findData(job_id) < 0:
            self._fill_runs()
        self.run_combo.setCurrentIndex(self.run_combo.findData(job_id))
        self.empty.hide()
        self.body.show()
        self.refresh()

    def refresh(self) -> None:
        if not self.job_id:
            return
        self.status.setText("Reading the evaluations…")
        job_id = self.job_id
        self._client.request("evaluations.list", {"id": job_id}, lambda reply: self._on_reply(job_id, reply),
                             lambda err: self._on_error(job_id, err))

    def _on_job_event(self, data: dict[str, Any]) -> None:
        if data.get("kind") == EVALUATE and self.job_id:
            self._refresh_timer.start()
        elif data.get("kind") == FINETUNE and data.get("state") == SUCCEEDED:
            self._fill_runs()

    # -- replies -----------------------------------------------------------------------------

    def _on_reply(self, job_id: str, reply: dict[str, Any]) -> None:
        if job_id != self.job_id:
            return  # a reply for the run shown before
        self.message.hide()
        self.reply = reply
        current = self.data_combo.currentData()
        self.data_combo.blockSignals(True)
        self.data_combo.clear()
        for key, words in ev.data_choices(reply):
            self.data_combo.addItem(words, key)
        if self.data_combo.count() == 0:
            self.data_combo.addItem("nothing scored yet", "")
        self.data_combo.setCurrentIndex(max(0, self.data_combo.findData(current)) if current else 0)
        self.data_combo.blockSignals(False)
        self._render()

    def _on_error(self, job_id: str, err: Any) -> None:
        if job_id != self.job_id:
            return
        self.status.setText("")
        if getattr(err, "code", None) == METHOD_NOT_FOUND:
            text = "This engine cannot list evaluations yet (no evaluations.list): update the engine and restart it."
        else:
            text = f"Could not read the evaluations of {job_id}: {error_text(err)}"
        self.message.setText(text)
        self.message.show()

    # -- drawing -----------------------------------------------------------------------------

    def data_key(self) -> str:
        return self.data_combo.currentData() or ""

    def rows(self) -> list[ev.Row]:
        return list(self._rows)

    def _render(self) -> None:
        selected = self.selected_row()
        self.columns, self._rows = ev.build(self.reply or {}, self.data_key())
        self.table.clear()
        self.table.setColumnCount(1 + len(self.columns))
        # An lm-eval column's task above its metric: the headings stay narrow.
        self.table.setHorizontalHeaderLabels(["Model"] + [ev.heading(c).replace(" ", "\n", 1) if c in self._lm_columns()
                                                          else ev.heading(c) for c in self.columns])
        self.table.setRowCount(len(self._rows))
        for r, row in enumerate(self._rows):
            name = QTableWidgetItem(self._row_label(row) + (" · evaluating…" if row.active else ""))
            name.setToolTip(f"{ev.ROLE_WORDS.get(row.role, row.role)}: {row.model}")
            self.table.setItem(r, 0, name)
            for c, column in enumerate(self.columns, start=1):
                item = QTableWidgetItem(ev.cell_text(row.cells.get(column), row.stderr.get(column)))
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if column in row.jobs:
                    item.setToolTip(f"{ev.heading(column)} from evaluation {row.jobs[column]}")
                self.table.setItem(r, c, item)
        pick = selected.role if selected else "run"
        index = next((i for i, row in enumerate(self._rows) if row.role == pick and
                      (selected is None or row.model == selected.model)), None)
        if index is None:
            index = next((i for i, row in enumerate(self._rows) if row.role == "run"), 0)
        if self._rows:
            self.table.selectRow(index)
        words = self.data_combo.currentText() if self.data_key() else ""
        running = sum(r.active for r in self._rows)
        self.status.setText((f"Answer scores on {words}. " if words else "No evaluation yet: press Evaluate…. ")
                            + (f"{running} evaluating now." if running else ""))
        self.note.setText("Scores are on 0..1, higher is better; each lm-eval column is the newest result of "
                          "that task (± its standard error). Hover a cell for the evaluation it came from.")
        self._update_actions()

    def _lm_columns(self) -> set[str]:
        return set(self.columns) - set(ev.GENERATION_METRICS) - set(ev.CLASSIFIER_METRICS)

    def _row_label(self, row: ev.Row) -> str:
        """The model's name and what it is: 'tickets (fine-tune)', 'tickets-int8 (int8)'."""
        if row.role == "base":
            return row.label  # already says "(base model)"
        job = next((item.get("job") for item in (self.reply or {}).get("rows") or []
                    if item.get("model") == row.model), None) or {}
        word = variant_word(job) if row.role == "variant" else None
        return f"{row.label} ({word or ev.ROLE_WORDS.get(row.role, row.role)})"

    def selected_row(self) -> ev.Row | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows or rows[0].row() >= len(self._rows):
            return None
        return self._rows[rows[0].row()]

    def select_model(self, model: dict[str, Any]) -> None:
        for i, row in enumerate(self._rows):
            if row.model == model:
                self.table.selectRow(i)

    def _update_actions(self) -> None:
        self.evaluate_button.setEnabled(self.selected_row() is not None and self._client.is_connected)

    # -- starting evaluations ----------------------------------------------------------------

    def evaluate_selected(self) -> None:
        """Ask what to score the selected model on, then start its job (and the base model's)."""
        row = self.selected_row()
        if row is None or self.reply is None:
            return
        dialog = self.make_dialog(row)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.start(row, **dialog.values())

    def make_dialog(self, row: ev.Row) -> EvaluateDialog:
        root = str((self.reply or {}).get("root") or self.job_id)
        base = next((r for r in self._rows if r.role == "base"), None)
        key = f"validation:{root}"
        missing = base is not None and row is not base and not base.has(key)
        return EvaluateDialog(row.label, self._run_label(), str((self.reply or {}).get("task") or "causal_lm"),
                              missing, self)

    def _run_label(self) -> str:
        return next((r.label for r in self._rows if r.role == "run"), str(self.job_id))

    def start(self, row: ev.Row, data: str | None = None, limit: int = 100, max_new_tokens: int = 64,
              lm_eval: dict[str, Any] | None = None, with_base: bool = True) -> list[dict[str, Any]]:
        """Start the evaluation of ``row`` (and of the base model when it has no result on that data)."""
        root = str((self.reply or {}).get("root") or self.job_id)
        common: dict[str, Any] = {"limit": limit, "max_new_tokens": max_new_tokens}
        if data:
            common["data"] = data
        if lm_eval:
            common["lm_eval"] = lm_eval
        key = f"data:{data}" if data else f"validation:{root}"
        specs = [self._spec(row, common, root)]
        base = next((r for r in self._rows if r.role == "base"), None)
        if with_base and base is not None and row is not base and not base.has(key):
            specs.append(self._spec(base, common, root))
        self.started = []
        self.message.hide()
        for spec in specs:
            self._client.request("jobs.start", {"kind": EVALUATE, "spec": spec, "name": ev.job_name(spec["model"])},
                                 self._on_started, self._on_start_error)
        return specs

    @staticmethod
    def _spec(row: ev.Row, common: dict[str, Any], root: str) -> dict[str, Any]:
        spec = {"model": dict(row.model), **common}
        if row.role == "base" and "data" not in common:
            spec["validation_of"] = root  # a base model has no validation data of its own: the run's
        return spec

    def _on_started(self, job: dict[str, Any]) -> None:
        self.started.append(job)
        self.status.setText(f"Started {len(self.started)} evaluation{'s' if len(self.started) > 1 else ''}; "
                            "the table fills in as they finish.")
        self._refresh_timer.start()

    def _on_start_error(self, err: Any) -> None:
        self.message.setText(f"Could not start the evaluation: {error_text(err)}")
        self.message.show()
