"""Screenshots of what a first user meets on a fresh desktop: the manual, About, the Data step's
column drop-downs, the Training step folded on a narrow window, and the export folder fallback.

Run by scripts/screenshots_first_use.sh under Xvfb against a real engine. Writes docs/images/:

  help.png            Help › Documentation: the manual, offline, in its viewer
  about.png           Help › About Ember Studio: versions and the data folder
  data-columns.png    New fine-tune › Data on a CSV whose columns are msg and category: drop-downs, the guess
  training-narrow.png New fine-tune › Training at 1024 x 700: advanced settings folded, the estimate below
  runs-variants.png   Runs: a quantized variant and an export named by their parent
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from app.shell.help import open_doc, show_about
from engine.api.job_terms import FINAL_STATES
from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, shoot, wait  # noqa: E402 - the shared helpers

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
TINY = {"task": "text_classification", "method": {"kind": "lora", "lora_r": 8}, "batch_size": 16,
        "data": {"max_length": 48}, "max_steps": 30, "eval_every": 10, "checkpoint_every": 30,
        "optim": {"lr": 0.003}}
ROWS = [("the printer on the second floor is jammed again", "hardware"),
        ("I forgot the password to my account", "account"), ("my screen flickers after the update", "hardware"),
        ("please reset the login for my account", "account"), ("the laptop fan is loud all day", "hardware"),
        ("two-factor codes never arrive on my phone", "account")]


def finish(c: BlockingClient, job_id: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.call("jobs.get", id=job_id)["state"] in FINAL_STATES:
            return
        time.sleep(1)
    raise SystemExit(f"screenshots: job {job_id} did not finish")


def make_runs() -> None:
    """A fine-tune, its int8 variant and an export of the variant, named as the wizards name them."""
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        run = c.call("jobs.start", kind="train.finetune", spec=TINY, name="tickets-lora")["id"]
        finish(c, run)
        variant = c.call("jobs.start", kind="compress.quantize", spec={"source_run": run, "mode": "dynamic"},
                         name="tickets-lora-int8")["id"]
        finish(c, variant)
        export = c.call("jobs.start", kind="export.model", spec={"source_run": variant, "formats": ["onnx"]},
                        name="tickets-lora-int8-export")["id"]
        finish(c, export)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    make_runs()
    app, window = open_window()

    runs = window.show_page("runs")
    wait(app, lambda: runs.model.rowCount() >= 3, 30, "the run list")
    shoot(app, window, "runs-variants.png")

    viewer = open_doc(window, "first-run.md")
    viewer.resize(1000, 700)
    pump(app, 1.0)
    viewer.grab().save(str(OUT / "help.png"))
    print(f"  {OUT / 'help.png'}")
    viewer.close()

    about = show_about(window)
    pump(app, 2.0)
    about.grab().save(str(OUT / "about.png"))
    print(f"  {OUT / 'about.png'}")
    about.close()

    data = Path(os.environ["EMBER_HOME"]).parent / "my-tickets.csv"  # in the demo folder, a neutral path
    data.write_text("id,msg,category\n" + "".join(f"{i},{text},{label}\n" for i, (text, label) in
                                                   enumerate(ROWS * 8)), encoding="utf-8")
    wizard = window.show_page("new_finetune")
    wizard.go_to(2)
    step = wizard.data_step
    step.custom_radio.setChecked(True)
    step.path_edit.setText(str(data))
    wait(app, lambda: step.text_column_edit.text() == "msg" and not wizard.busy(), 180, "the column guess")
    wait(app, lambda: bool(step.preview.sizes.text()) and not wizard.busy(), 180, "the data preview")
    step.label_column_edit.showPopup()
    pump(app, 0.5)
    geo = window.frameGeometry()
    app.primaryScreen().grabWindow(0, geo.x(), geo.y(), geo.width(), geo.height()).save(str(OUT / "data-columns.png"))
    print(f"  {OUT / 'data-columns.png'}")
    step.label_column_edit.hidePopup()
    step.builtin_radio.setChecked(True)

    window.resize(1024, 700)
    wizard.go_to(4)
    wait(app, lambda: wizard.training_step.fit.verdict != "", 180, "the fit estimate")
    shoot(app, window, "training-narrow.png")
    window.engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
