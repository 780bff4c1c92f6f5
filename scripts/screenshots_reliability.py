"""Screenshots of the queue, the audit log, a lineage report and the custom-code confirmation.

A real engine and real jobs: a finished digits fine-tune and its ONNX export (for the lineage
report), then a long run holding the only job slot while three more wait in the queue. Run by
scripts/screenshots_reliability.sh under Xvfb. Writes runs-queue.png, lineage.png,
settings-audit.png and code-confirm.png into docs/images.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engine.api.job_terms import FINAL_STATES

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
from PySide6.QtWidgets import QScrollArea  # noqa: E402
from screenshots import open_window, pump, shoot, wait  # noqa: E402 - the shared helpers of the other screenshots

from engine.api.paths import resolve  # noqa: E402
from engine.cli.client import BlockingClient  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
CODE_DIR = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/ember-demo-reliability/my-models")
DIGITS = {"task": "image_classification", "method": {"kind": "full"}, "max_steps": 30, "eval_every": 15,
          "batch_size": 16, "optim": {"lr": 0.003}}
LONG = {**DIGITS, "max_steps": 5000, "eval_every": 500, "checkpoint_every": 1000}
TICKETS = {"task": "text_classification", "method": {"kind": "lora"}, "max_steps": 200, "data": {"max_length": 64}}
MODEL_FILE = '''"""A small CNN for 32x32 RGB digits, trained by Ember Studio from this file."""
import torch
from torch import nn


def build_model(num_labels: int, image_size: int = 32) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, num_labels),
    )
'''


def finish(c: BlockingClient, job_id: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = c.call("jobs.get", id=job_id)
        if job["state"] in FINAL_STATES:
            return job
        time.sleep(1)
    raise SystemExit(f"screenshots: {job_id} did not finish")


def main() -> int:
    import screenshots

    screenshots.OUT = OUT
    OUT.mkdir(parents=True, exist_ok=True)
    app, window = open_window()  # starts the engine
    c = BlockingClient.connect(resolve(), client="screenshots", timeout=120)
    base = finish(c, c.call("jobs.start", kind="train.finetune", spec=DIGITS, name="digits-baseline")["id"])
    finish(c, c.call("jobs.start", kind="export.model", name="digits-onnx",
                     spec={"source_run": base["id"], "formats": ["onnx"], "parity_samples": 16})["id"])
    c.call("queue.configure", max_concurrent=1)
    c.call("jobs.start", kind="train.finetune", spec=LONG, name="digits-long")
    waiting = [c.call("jobs.start", kind="train.finetune", spec=spec, name=name)["id"]
               for name, spec in (("tickets-lora", TICKETS), ("digits-small-lr", {**DIGITS, "optim": {"lr": 1e-3}}),
                                  ("tickets-lora-r16", {**TICKETS, "method": {"kind": "lora", "lora_r": 16}}))]
    c.call("jobs.prioritize", id=waiting[2], priority=5)
    try:
        c.call("jobs.stop", id="no-such-run")  # a refused request, as the audit log shows it
    except Exception:  # noqa: BLE001 - refused on purpose
        pass

    runs = window.show_page("runs")
    wait(app, lambda: runs.model.rowCount() >= 6, 30, "the run list")
    wait(app, lambda: runs.queue_panel.table.rowCount() == 3, 30, "the queue")
    runs.select_run(waiting[0])
    runs.queue_panel.table.selectRow(1)  # tickets-lora, second in line: the move buttons apply to it
    pump(app, 1)
    shoot(app, window, "runs-queue.png")

    runs.select_run(base["id"])
    pump(app, 0.5)
    runs.lineage_selected()
    dialog = runs.lineage_dialog
    dialog.resize(900, 700)
    wait(app, lambda: "sha256" in dialog.text(), 60, "the lineage report")
    pump(app, 1)
    shoot(app, dialog, "lineage.png")
    dialog.close()

    settings = window.show_page("settings")
    audit = settings.audit_view
    audit.reload()
    wait(app, lambda: len(audit.rows()) >= 6, 30, "the audit log")
    for area in settings.findChildren(QScrollArea):  # the audit log is the last card: scroll to it
        area.ensureWidgetVisible(audit, 0, 0)
    pump(app, 1)
    shoot(app, window, "settings-audit.png")

    from app.pages.new_finetune.code_confirm import CodeConfirmDialog
    from engine.api.custom_code import confirmation

    CODE_DIR.mkdir(parents=True, exist_ok=True)
    code = CODE_DIR / "digits_cnn.py"
    code.write_text(MODEL_FILE, encoding="utf-8")
    confirm = CodeConfirmDialog(confirmation(str(code)), window)
    confirm.show()
    pump(app, 1)
    shoot(app, confirm, "code-confirm.png")
    confirm.close()

    for job in c.call("jobs.list", limit=50)["jobs"]:
        if job["state"] in ("queued", "running"):
            c.call("jobs.cancel", id=job["id"])
    c.close()
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
