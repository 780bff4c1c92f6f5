"""Screenshots of the first-run experience, driven in-process against a real engine and real jobs.

Run by scripts/screenshots_first_run.sh under Xvfb. Writes into the folder given (docs/images):

  welcome.png         Welcome: the three starting points and the recent runs
  tour.png            the guided tour on its second step
  theme-light.png     Monitor on a finished run, light theme
  theme-dark.png      the same, dark theme
  notifications.png   the notification centre after a failed and a finished job (dark theme)
  activity.png        the status bar's running-jobs popup with progress, ETA, Stop and Cancel
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from app.state.prefs import prefs
from app.state.style import apply_theme, icon
from engine.api.job_terms import FINAL_STATES
from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import pump, wait  # noqa: E402 - the shared helpers of the other screenshots

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
TINY = {"task": "text_classification", "method": {"kind": "lora", "lora_r": 8}, "batch_size": 16,
        "data": {"max_length": 48}, "max_steps": 40, "eval_every": 10, "checkpoint_every": 40,
        "optim": {"lr": 0.003}}
BROKEN = {"task": "text_classification", "method": {"kind": "lora"},
          "data": {"builtin": None, "path": "my-tickets/train.csv"}, "max_steps": 10}
LONG = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 32, "max_steps": 3000,
        "eval_every": 200, "checkpoint_every": 1000}


def shoot(app: QApplication, window: MainWindow, name: str, screen: bool = False) -> None:
    """The window, or with ``screen`` the screen area under it (popups are separate windows)."""
    pump(app, 0.8)
    if screen:
        geo = window.frameGeometry()
        picture = app.primaryScreen().grabWindow(0, geo.x(), geo.y(), geo.width(), geo.height())
    else:
        picture = window.grab()
    picture.save(str(OUT / name))
    print(f"  {OUT / name}")


def finish(c: BlockingClient, job_id: str, timeout: float = 900) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = c.call("jobs.get", id=job_id)["state"]
        if state in FINAL_STATES:
            return state
        time.sleep(1)
    raise SystemExit(f"screenshots: job {job_id} did not finish")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        first = c.call("jobs.start", kind="train.finetune", spec=TINY, name="tickets-lora")["id"]
        finish(c, first)

    app = QApplication(["ember"])
    app.setApplicationName("Ember Studio")
    app.setWindowIcon(icon("ember"))
    apply_theme(app, "light")
    window = MainWindow()
    window.resize(1180, 760)
    window.move(0, 0)
    window.show()
    window.engine.start()
    wait(app, lambda: window.engine.client.is_connected, 60, "the engine")

    welcome = window.show_page("welcome")
    wait(app, lambda: welcome.recent_list.count() >= 1, 30, "the recent runs")
    shoot(app, window, "welcome.png")

    from app.widgets.tour import tour_for

    tour = tour_for(window)
    tour.start()
    tour.next()
    shoot(app, window, "tour.png")
    tour.finish()

    window.nav.show("monitor", job_id=first)
    monitor = window.page("monitor")
    wait(app, lambda: monitor.loss_chart.count("train loss") >= 40, 60, "the run's history")
    shoot(app, window, "theme-light.png")
    prefs().set("theme", "dark")
    apply_theme(app, "dark")
    window.nav.show("monitor", job_id=first)  # charts take the theme's colours when they are made
    pump(app, 2)
    shoot(app, window, "theme-dark.png")

    # Live job endings become entries: one that fails (a data file that is not there) and one that runs on.
    window.show_page("runs")
    client = window.engine.client
    client.request("jobs.start", {"kind": "train.finetune", "spec": BROKEN, "name": "my-tickets"})
    client.request("jobs.start", {"kind": "train.finetune", "spec": LONG, "name": "digits-cnn"})
    wait(app, lambda: any(e.level == "error" for e in window.notifications.entries), 120, "the failed job's entry")
    # A short fine-tune that succeeds (a machine probe is a system job: it sends no notification).
    quick = {**TINY, "max_steps": 10, "eval_every": 5, "checkpoint_every": 10}
    client.request("jobs.start", {"kind": "train.finetune", "spec": quick, "name": "tickets-quick"})
    wait(app, lambda: any(e.level == "success" for e in window.notifications.entries), 300, "the finished job's entry")
    wait(app, lambda: window.activity.tracker.running(), 60, "the running job")
    pump(app, 8)
    window.bell.show_panel()
    shoot(app, window, "notifications.png", screen=True)
    window.bell.panel.hide()
    window.activity.show_popup()
    pump(app, 2)
    shoot(app, window, "activity.png", screen=True)
    window.activity.popup.hide()
    for job in window.activity.tracker.running():
        window.activity.tracker.cancel(job.id)
    pump(app, 2)
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
