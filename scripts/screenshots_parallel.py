"""Screenshots of the parallelism planner and of a split model's run, driven in-process against a real engine
and a real 2-process run.

Run by scripts/screenshots_parallel.sh under Xvfb. Writes into the folder given (docs/images):

  parallel-planner.png   New fine-tune › Training for a causal LM: tensor and pipeline parallel, and the
                         planner's layouts for 8 GPUs of 80 GB, the recommended one starred
  monitor-parallel.png   Monitor on the built-in tiny Llama split into 2 pipeline stages: the layout and the
                         bubble in the run's facts, each rank's place on the memory chart
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
SPLIT = {"task": "causal_lm", "method": {"kind": "full"}, "batch_size": 8, "max_steps": 3000, "device": "cpu",
         "data": {"max_length": 64}, "eval_every": 50, "checkpoint_every": 1000, "memory_every": 5,
         "generate_eval": {"prompts": 0}, "optim": {"lr": 0.003},
         "distributed": {"strategy": "fsdp", "nproc": 2, "pipeline_parallel": 2, "pipeline_schedule": "1f1b",
                         "pipeline_microbatches": 4}}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        run = c.call("jobs.start", kind="train.finetune", spec=SPLIT, name="tiny-llama-2-stages")["id"]
    app, window = open_window()

    wizard = window.show_page("new_finetune")
    wizard.load_spec(SPLIT, name="tiny-llama-2-stages")
    wizard.go_to(4)  # Training
    wait(app, lambda: wizard.training_step.fit.verdict != "", 180, "the fit estimate")
    planner = wizard.training_step.planner
    planner.gpus_spin.setValue(8)
    planner.memory_spin.setValue(80)
    planner.plan()
    wait(app, lambda: planner.table.rowCount() > 0, 180, "the planner")
    area = scroll_area_of(planner)
    if area is not None:  # the planner sits below the fit estimate
        pump(app, 1)
        area.ensureWidgetVisible(planner.apply_button, 0, 20)
    pump(app, 1)
    shoot(app, window, "parallel-planner.png")

    monitor = window.show_page("monitor")
    monitor.show_run(run)
    wait(app, lambda: monitor.loss_chart.count("train loss") >= 60, 600, "the run to get going")
    pump(app, 1)
    shoot(app, window, "monitor-parallel.png")
    monitor.cancel_run(ask=False)
    pump(app, 2)
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
