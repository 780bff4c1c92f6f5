"""Screenshots of the speed options and the live MFU, driven in-process against a real engine and a real run.

Run by scripts/screenshots_speed.sh under Xvfb. Writes into the folder given (docs/images):

  speed-card.png      New fine-tune › Training for a causal LM: precision auto and the Speed card, packing on
  monitor-speed.png   Monitor on a packed causal-LM fine-tune: MFU and padding on the step-time chart, the
                      latest MFU and TFLOP/s against the peak, and the run's speed choices
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, scroll_area_of, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_first_run import shoot  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
PACKED = {"task": "causal_lm", "method": {"kind": "full"}, "batch_size": 4, "max_steps": 2000,
          "data": {"max_length": 256, "packing": True}, "eval_every": 25, "checkpoint_every": 1000,
          "optim": {"lr": 0.003}}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        run = c.call("jobs.start", kind="train.finetune", spec=PACKED, name="tiny-llama-packed")["id"]
    app, window = open_window()

    wizard = window.show_page("new_finetune")
    wizard.load_spec(PACKED, name="tiny-llama-packed")
    wizard.go_to(4)  # Training
    wait(app, lambda: wizard.training_step.fit.verdict != "", 180, "the fit estimate")
    area = scroll_area_of(wizard.training_step.speed)
    if area is not None:  # the Speed card sits below the fit estimate
        pump(app, 1)
        area.verticalScrollBar().setValue(area.verticalScrollBar().maximum())
    shoot(app, window, "speed-card.png")

    monitor = window.show_page("monitor")
    monitor.show_run(run)
    wait(app, lambda: monitor.loss_chart.count("train loss") >= 60, 600, "the run to get going")
    pump(app, 1)
    shoot(app, window, "monitor-speed.png")
    monitor.cancel_run(ask=False)
    pump(app, 2)
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
