"""Screenshots of the README's language-model path on a fresh data folder, taken as a new user clicks it.

Run by scripts/screenshots_first_llm.sh under Xvfb against a real engine, with no built-in model written yet
(EMBER_MODELS_DIR is a new folder). Writes into the folder given (docs/images):

  wizard-first-use.png      Welcome › Tune and chat: the Model step while SmolLM2 is prepared once (a job of its
                            own, with progress), nothing called a problem
  monitor-evaluating.png    Monitor while the run's evaluation generates the held-out answers (n of N)
  playground-endpoint.png   Playground: the tuned run served at a local URL (the serve bar folded) and chatted
                            with through that URL beside the base model, each answer with its tokens/s
  models.png                Models: the built-in models, their state and what can be done with each
  tooltips.png              Monitor: a chart title's explanation (data wait, padding, MFU) from the glossary
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QToolTip

from engine.api.job_terms import FINAL_STATES
from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, scroll_area_of, shoot, wait  # noqa: E402 - the shared helpers

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
QUESTION = "What is the opposite of hot?"
ONLY = os.environ.get("EMBER_SHOTS_ONLY", "")  # "first": the wizard's first use alone; "models": the Models page


def screen(app, window, name: str) -> None:
    """The window with what floats over it (a tooltip is a window of its own)."""
    pump(app, 0.6)
    geo = window.frameGeometry()
    app.primaryScreen().grabWindow(0, geo.x(), geo.y(), geo.width(), geo.height()).save(str(OUT / name))
    print(f"  {OUT / name}")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    app, window = open_window()
    window.resize(1280, 800)

    if ONLY == "models":
        return models_page(app, window)
    welcome = window.show_page("welcome")
    wizard = window.page("new_finetune")
    welcome.chat_button.click()
    model = wizard.model_step
    wizard.go_to(1)
    wait(app, lambda: model.preparing is not None, 120, "the preparation")
    pump(app, 8)  # its progress comes in
    scroll_area_of(model.status).ensureWidgetVisible(model.note, 0, 60)
    shoot(app, window, "wizard-first-use.png")
    if ONLY == "first":  # the first picture alone (it needs a fresh models folder)
        window.close()
        return 0
    wait(app, lambda: model.preparing is None and bool(model.facts), 900, "the built-in model")

    wizard.go_to(len(wizard.steps) - 1)
    wait(app, wizard.launch_button.isEnabled, 600, "the check on Review")
    wizard.launch_button.click()
    wait(app, lambda: wizard.last_job_id is not None, 60, "the launch")
    run = wizard.last_job_id
    monitor = window.show_page("monitor")
    monitor.show_run(run)
    wait(app, lambda: "generating answers" in monitor.eta_label.text(), 1800, "the evaluation's answers")
    wait(app, lambda: "/" in monitor.eta_label.text().rsplit("answers", 1)[-1], 300, "an answer count")
    shoot(app, window, "monitor-evaluating.png")

    label = monitor.charts.step_chart.title_label
    monitor.content.ensureWidgetVisible(label, 0, 200)
    pump(app, 0.3)
    QToolTip.showText(label.mapToGlobal(QPoint(label.width() // 2, label.height())), label.toolTip(), label)
    screen(app, window, "tooltips.png")
    QToolTip.hideText()

    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        deadline = time.monotonic() + 3600
        while c.call("jobs.get", id=run)["state"] not in FINAL_STATES:
            if time.monotonic() > deadline:
                raise SystemExit("screenshots: the fine-tune did not finish")
            pump(app, 2)

    playground = window.show_page("playground")
    playground.navigate(job_id=run)
    pump(app, 2)
    playground.serve()  # the tuned run, on this machine
    bar = playground.serve_bar
    wait(app, lambda: bool(bar.url), 600, "the served URL")
    from app.pages.playground.choices import endpoint_choice

    playground.side_check.setChecked(True)
    playground.picker_a.select({"builtin": "smollm2-135m-instruct"})
    playground.picker_b.add(endpoint_choice(bar.url, "", ""))
    playground.settings.set_settings({"temperature": 0.0, "max_new_tokens": 48})
    playground.prompt.setPlainText(QUESTION)
    playground.send()
    wait(app, lambda: not playground.busy() and bool(playground.column_b.messages), 900, "both answers")
    wait(app, lambda: "tokens/s" in bar.text.text(), 30, "the serve bar's figures")
    shoot(app, window, "playground-endpoint.png")
    bar.stop()
    wait(app, lambda: not bar.serving, 60, "the server to stop")

    return models_page(app, window)


def models_page(app, window) -> int:
    models = window.show_page("models")
    wait(app, lambda: models.builtin_table.rowCount() >= 4, 60, "the built-in models")
    row = [m["name"] for m in models.builtins].index("smollm2-135m-instruct")
    models.builtin_table.selectRow(row)
    if models.prepare_button.isEnabled():  # a folder kept from an earlier pass, its model not written yet
        models.prepare_builtin()
        deadline = time.monotonic() + 600
        while models.builtins[row]["state"] != "ready":
            if time.monotonic() > deadline:
                raise SystemExit("screenshots: the built-in model was not prepared")
            models.reload()
            pump(app, 3)
        models.builtin_table.selectRow(row)
    shoot(app, window, "models.png")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
