"""The built-in digits CNN exported to ONNX, as the export tests start from it (no training: parity needs none)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def export_digits(home: Path, opset: int = 17) -> dict[str, Any]:
    """Export to ``home/export/model.onnx`` with EMBER_HOME at ``home``; returns path, report, data and a batch."""
    old = os.environ.get("EMBER_HOME")
    os.environ["EMBER_HOME"] = str(home)
    try:
        from engine.api.train_spec import TrainSpec
        from engine.compress.onnx_export import export_onnx
        from engine.tasks import get_task

        spec = TrainSpec.model_validate({"task": "image_classification", "method": {"kind": "full"}, "device": "cpu"})
        task = get_task(spec.task)
        data = task.load_data(spec)
        model = task.build_model(spec, data).eval()
        batch = data.collate([data.val[i] for i in range(4)])
        path = home / "export" / "model.onnx"
        report = export_onnx(model, "image_classification", batch, path, opset=opset)
        return {"path": path, "report": report, "data": data, "batch": batch}
    finally:
        if old is None:
            os.environ.pop("EMBER_HOME", None)
        else:
            os.environ["EMBER_HOME"] = old
