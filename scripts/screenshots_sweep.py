"""Screenshot of a sweep on Compare, driven in-process against a real engine and a real Optuna sweep.

Run by scripts/screenshots_sweep.sh under Xvfb. Writes into the folder given (docs/images):

  compare-sweep.png   Compare › Sweeps: 8 trials of the built-in text model varying the learning rate
                      (log range) and the LoRA rank, as parallel coordinates, the best drawn thick,
                      pruned trials dashed; the trials' table under it
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_first_run import shoot  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
BASE = {"task": "text_classification", "method": {"kind": "lora"}, "batch_size": 8, "max_steps": 12,
        "data": {"max_length": 32}, "eval_every": 3, "checkpoint_every": 100, "memory_every": 100,
        "device": "cpu", "generate_eval": {"prompts": 0}}
SWEEP = {"base": BASE, "method": "optuna", "trials": 8, "parallel": 2, "prune": True, "seed": 0,
         "metric": "loss", "mode": "min",
         "params": [{"path": "optim.lr", "low": 1e-5, "high": 1e-2, "log": True},
                    {"path": "method.lora_r", "values": [4, 8, 16]}]}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        sweep = c.call("jobs.start", kind="train.sweep", spec=SWEEP, name="lr-and-rank")["id"]
    app, window = open_window()
    compare = window.show_page("compare")
    compare.navigate(sweep=sweep)
    view = compare.sweeps
    wait(app, lambda: (view.record.get("state") in ("succeeded", "failed")), 900, "the sweep to finish")
    view.reload()
    pump(app, 3)
    shoot(app, window, "compare-sweep.png")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
