"""Export: package a model for a Jetson or a server (the wizard is not built yet).

What works today: the Variants view (Compare › Variants) sends the model chosen
for export here (``set_variant``), and the page shows which run it is and where
its model file lies, so nobody mistakes the choice for an export that happened.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from app.jobs_model import display_name
from app.pages.variants.data import technique_label
from app.widgets.common import FactsView, card, label
from app.widgets.placeholder import PlaceholderPage

# Where each kind of job leaves its model (docs/compression.md), inside the run's model/ folder.
MODEL_FILES = {
    "compress.quantize": "model.onnx",
    "compress.qat": "model.onnx",
    "compress.prune": "model.pt (and model.onnx)",
    "compress.lora_merge": "weights.safetensors",
}


def model_file(record: dict[str, Any]) -> str:
    """Where the run's model is: the job's reported path, else its model/ folder and the file its kind writes."""
    result = record.get("result") or {}
    if isinstance(result, dict) and result.get("path"):
        return str(result["path"])
    spec = record.get("spec") or {}
    name = MODEL_FILES.get(str(record.get("kind")))
    if name is None and spec.get("distill"):
        name = "weights.safetensors (the student; ember_model.json names its blocks)"
    folder = PurePath(record["run_dir"]) / "model" if record.get("run_dir") else PurePath("model")
    return f"{folder}/{name}" if name else f"{folder}/ (the fine-tune's saved model)"


class ExportPage(PlaceholderPage):
    def __init__(self, engine, parent=None):
        super().__init__(
            "Export",
            "Turn a model into something you can deploy: ONNX (optionally int8) for ONNX "
            "Runtime on a CPU or a Jetson, or a checkpoint for a GPU server. The export is "
            "checked against the original model before it is called done.",
            [
                "Pick a run or variant and a target (Jetson, CPU server, GPU server).",
                "Export, verify that the outputs match, and measure latency.",
                "Copy the result to one of your hosts, with instructions to run it there.",
            ],
            parent,
        )
        self._client = engine.client
        self.variant_id: str | None = None
        self.variant_record: dict[str, Any] | None = None
        frame, box = card(self)
        box.addWidget(label("Chosen model", "h2"))
        self.variant_note = label("", "muted", wrap=True)
        box.addWidget(self.variant_note)
        self.variant_facts = FactsView()
        box.addWidget(self.variant_facts)
        self.variant_card = frame
        frame.hide()
        self.layout().insertWidget(self.layout().count() - 1, frame)  # above the closing stretch

    def set_variant(self, run_id: str, record: dict[str, Any] | None = None) -> None:
        """Show ``run_id`` (chosen on Compare › Variants) as the model to export."""
        self.variant_id = run_id
        self.variant_record = dict(record or {"id": run_id})
        self._show()
        if self._client.is_connected and not self.variant_record.get("result"):
            # The record from the variants list has no result; jobs.get has the model's path.
            self._client.request("jobs.get", {"id": run_id}, self._on_record, lambda _err: None)

    def _on_record(self, record: dict[str, Any]) -> None:
        if record.get("id") == self.variant_id:
            self.variant_record = record
            self._show()

    def _show(self) -> None:
        record = self.variant_record or {}
        kind = str(record.get("kind") or "")
        self.variant_facts.set_facts([
            ("Run", f"{display_name(record)} ({record.get('id')})" if record.get("name") else str(record.get("id"))),
            ("Variant", "the fine-tune itself (not compressed)"
             if kind == "train.finetune" and not (record.get("spec") or {}).get("distill")
             else technique_label(record) if kind else "—"),
            ("State", str(record.get("state") or "—")),
            ("Model file", model_file(record)),
        ])
        self.variant_note.setText("Chosen on Compare › Variants. The export wizard is not built yet, so "
                                  "nothing has been exported: this is the model it will start from.")
        self.variant_card.show()
