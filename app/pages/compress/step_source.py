"""Step 1: the finished fine-tune to compress (the parent of every variant)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

from app.models.jobs import best_text, display_name
from app.pages.compress.techniques import source_facts
from app.text import format as fmt
from app.widgets.common import card
from app.widgets.run_picker import RunPicker, RunRow
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import Step, step_header

COLUMNS = ("Run", "Task", "Model", "Method", "Best metric", "Finished")


def run_row(record: dict[str, Any]) -> RunRow:
    info = source_facts(record)
    ended = record.get("ended_at") or record.get("created_at")
    cells = (display_name(record), str(info.get("task") or "").replace("_", " "),
             str(info.get("model") or "—"), str(info.get("method") or "—"),
             best_text(info.get("best")), fmt.timestamp(ended))
    sort = {5: fmt.to_epoch(ended) or 0.0}
    best = (info.get("best") or {}).get("value")
    if isinstance(best, (int, float)):  # no value: the row sorts by its text
        sort[4] = float(best)
    return RunRow(cells, sort)


class SourceStep(RunPicker, Step):
    title = "Source run"
    new_finetune_requested = Signal()  # the empty list's "Start a fine-tune"; the page navigates

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Which run to compress?",
                                              "Every finished fine-tune is listed. Each technique you pick next "
                                              "makes one variant of it, measured side by side with it."))
        frame, box = card()
        self.build_run_list(box, COLUMNS, run_row, "Compress works on a finished fine-tune. Train one on New "
                            "fine-tune; it is listed here once it has succeeded.", min_height=260,
                            empty_title="No finished fine-tune to compress",
                            empty_action=("Start a fine-tune", self.new_finetune_requested.emit))
        box.addWidget(self.general_message)
        outer.addWidget(frame)
        outer.addStretch(1)

    def blocking(self) -> list[str]:
        return [] if self.source_id() else ["choose a source run"]
