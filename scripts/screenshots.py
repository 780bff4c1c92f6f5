"""Screenshots of the real app, driven in-process against a real engine and real runs.

Run by scripts/screenshots.sh under Xvfb, from a neutral folder, so no machine path
shows in the pictures. Writes docs/images/*.png:

  main-window.png       Runs: the run history
  wizard-1-task.png ... wizard-6-review.png   each step of New fine-tune
  monitor.png           Monitor, mid-run
  compare.png           two finished runs compared
  settings.png          Settings
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from app.state.style import apply_stylesheet, icon
from engine.api.job_terms import FINAL_STATES
from engine.api.paths import resolve
from engine.cli.client import BlockingClient

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
TINY = {"task": "text_classification", "method": {"kind": "lora", "lora_r": 8}, "batch_size": 16,
        "data": {"max_length": 48}, "max_steps": 40, "eval_every": 10, "checkpoint_every": 40,
        "optim": {"lr": 0.003}}
LONG = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 32, "max_steps": 2000,
        "eval_every": 100, "checkpoint_every": 500, "optim": {"lr": 0.002, "schedule": "cosine", "warmup_steps": 20}}
STEPS = ("task", "model", "data", "method", "training", "review")


def pump(app: QApplication, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def wait(app: QApplication, predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        app.processEvents()
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit(f"screenshots: timed out waiting for {what}")


def scroll_area_of(widget):
    """The QScrollArea a widget sits in (a wizard step's), or None."""
    from PySide6.QtWidgets import QScrollArea

    area = widget.parent()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parent()
    return area


def shoot(app: QApplication, window: MainWindow, name: str) -> None:
    pump(app, 0.6)  # one more redraw of the charts' clock and any late reply
    window.grab().save(str(OUT / name))
    print(f"  {OUT / name}")


def make_runs() -> tuple[list[str], str]:
    """Two finished fine-tunes that differ in LoRA rank, and one long run to watch."""
    paths = resolve()
    with BlockingClient.connect(paths, client="screenshots", timeout=60) as c:
        done = []
        for rank, name in ((8, "tickets-lora-r8"), (2, "tickets-lora-r2")):
            spec = {**TINY, "method": {"kind": "lora", "lora_r": rank}}
            done.append(c.call("jobs.start", kind="train.finetune", spec=spec, name=name)["id"])
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            states = [c.call("jobs.get", id=i)["state"] for i in done]
            if all(s in FINAL_STATES for s in states):
                break
            time.sleep(1)
        long_run = c.call("jobs.start", kind="train.finetune", spec=LONG, name="digits-cnn-full")["id"]
    return done, long_run


def open_window() -> tuple[QApplication, MainWindow]:
    """The app as a user opens it, at the size the pictures are taken, connected to the engine."""
    app = QApplication(["ember"])
    app.setApplicationName("Ember Studio")
    app.setWindowIcon(icon("ember"))
    apply_stylesheet(app)
    window = MainWindow()
    window.resize(1180, 760)
    window.show()
    window.engine.start()
    wait(app, lambda: window.engine.client.is_connected, 60, "the engine")
    return app, window


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    finished, long_run = make_runs()
    app, window = open_window()

    runs = window.show_page("runs")
    wait(app, lambda: runs.model.rowCount() >= 3, 30, "the run list")
    shoot(app, window, "main-window.png")

    wizard = window.show_page("new_finetune")
    for i, step in enumerate(STEPS):
        wizard.go_to(i)
        if step == "model":
            wait(app, lambda: not wizard.busy(), 180, "the model check")
        if step == "data":
            wait(app, lambda: not wizard.busy(), 120, "the data preview")
        if step == "training":
            wait(app, lambda: wizard.training_step.fit.verdict != "", 180, "the fit estimate")
        if step == "review":
            wait(app, wizard.launch_button.isEnabled, 180, "the final check")
        shoot(app, window, f"wizard-{i + 1}-{step}.png")

    monitor = window.show_page("monitor")
    monitor.show_run(long_run)
    wait(app, lambda: monitor.loss_chart.count("train loss") >= 150, 600, "the run to get going")
    shoot(app, window, "monitor.png")
    monitor.cancel_run(ask=False)

    window.nav.show("compare", job_ids=finished)
    pump(app, 4)
    shoot(app, window, "compare.png")

    window.show_page("settings")
    pump(app, 3)
    shoot(app, window, "settings.png")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
