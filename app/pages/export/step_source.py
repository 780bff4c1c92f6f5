"""Step 1: the finished run whose model is exported (a fine-tune or a compression variant)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

from app.models.jobs import display_name, metric_value
from app.models.variants import technique_label
from app.pages.export.plan import FINETUNE, model_file, onnx_only, source_task
from app.text import format as fmt
from app.widgets.common import FactsView, card, label
from app.widgets.run_picker import RunPicker, RunRow
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, show_text, step_header

COLUMNS = ("Run", "Kind", "Variant", "Task", "Accuracy", "Finished")
ACCURACY_COLUMN, FINISHED_COLUMN = 4, 5
ONNX_ONLY_TIP = "An ONNX-only variant: TorchScript and torch.export need its parent's weights."


def variant_text(record: dict[str, Any]) -> str:
    if record.get("kind") == FINETUNE and not (record.get("spec") or {}).get("distill"):
        return "the fine-tune itself"
    return technique_label(record)


def accuracy(record: dict[str, Any]) -> float | None:
    """The variant's accuracy from its result (jobs.get), else a fine-tune's best accuracy."""
    evaluation = (record.get("result") or {}).get("evaluation") or {}
    value = (evaluation.get("variant") or {}).get("accuracy")
    if isinstance(value, (int, float)):
        return float(value)
    best = (record.get("summary") or {}).get("best") or {}
    if best.get("metric") == "accuracy" and isinstance(best.get("value"), (int, float)):
        return float(best["value"])
    return None


class SourceStep(RunPicker, Step):
    title = "Source"
    new_finetune_requested = Signal()  # the empty list's "Start a fine-tune"; the page navigates

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Which model to export?",
                                              "Every finished fine-tune and compression variant is listed. Each "
                                              "format you pick next is checked against this model before it is "
                                              "called done."))
        frame, box = card()
        self.build_run_list(box, COLUMNS, self.run_row, "Export needs a finished run with a model. Fine-tune one "
                            "(or compress it); it is listed here once it has succeeded.", min_height=240,
                            empty_title="No model to export yet",
                            empty_action=("Start a fine-tune", self.new_finetune_requested.emit))
        self.facts = FactsView()
        box.addWidget(self.facts)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)
        self.message_for("source_run")
        box.addWidget(self.field_messages["source_run"])
        box.addWidget(self.general_message)
        outer.addWidget(frame)
        outer.addStretch(1)

    # -- the list ----------------------------------------------------------------------------

    def run_row(self, record: dict[str, Any]) -> RunRow:
        ended = record.get("ended_at") or record.get("created_at")
        value = accuracy(record)
        cells = (display_name(record), str(record.get("kind") or ""), variant_text(record),
                 self.task(record).replace("_", " ") or "—",
                 metric_value(value) if value is not None else "—", fmt.timestamp(ended))
        sort = {ACCURACY_COLUMN: value if value is not None else -1.0, FINISHED_COLUMN: fmt.to_epoch(ended) or 0.0}
        return RunRow(cells, sort, {2: ONNX_ONLY_TIP} if onnx_only(record) else {})

    def task(self, record: dict[str, Any] | None) -> str:
        """The record's task, or that of the run it came from (a variant's record does not say)."""
        for _ in range(8):  # a variant of a variant of ... a fine-tune
            if record is None or source_task(record):
                return source_task(record)
            parent = record.get("parent_id") or (record.get("spec") or {}).get("source_run")
            record = self._records.get(str(parent)) if parent else None
        return ""

    def show_source(self, record: dict[str, Any] | None) -> None:
        """The chosen run's facts: what it is and where its model lies."""
        if record is None:
            self.facts.set_facts([])
            show_text(self.note, "")
            return
        self.facts.set_facts([("Run", f"{display_name(record)} ({record.get('id')})"),
                              ("Variant", variant_text(record)), ("Model file", model_file(record))])
        show_text(self.note, "A quantized variant is an ONNX model: TorchScript and torch.export are not "
                             "offered, and its parity figures (against the fp32 model it came from) are "
                             "reported, not enforced." if onnx_only(record) else "")

    def blocking(self) -> list[str]:
        return [] if self.source_id() else ["choose a run to export"]
