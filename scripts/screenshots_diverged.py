"""A screenshot of the Monitor on a run that diverged: a real fine-tune of the built-in tickets at a learning
rate far too high, stopped by the engine's divergence rule with its message and hint in the banner.

Run by scripts/screenshots_diverged.sh under Xvfb. Writes monitor-diverged.png into docs/images.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
from screenshots import open_window, shoot, wait  # noqa: E402 - the shared helpers of the other screenshots

from engine.api.paths import resolve  # noqa: E402
from engine.cli.client import BlockingClient  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
CLIMB = {"task": "text_classification", "method": {"kind": "full"}, "max_steps": 60, "eval_every": 20,
         "batch_size": 16, "data": {"max_length": 48}, "optim": {"lr": 10.0}}


def main() -> int:
    import screenshots

    screenshots.OUT = OUT
    OUT.mkdir(parents=True, exist_ok=True)
    app, window = open_window()  # starts the engine
    with BlockingClient.connect(resolve(), client="screenshots", timeout=120) as c:
        run = c.call("jobs.start", kind="train.finetune", spec=CLIMB, name="tickets-lr-10")["id"]
    monitor = window.show_page("monitor")
    monitor.show_run(run)
    wait(app, lambda: monitor.banner.isVisible() and monitor.banner.kind == "diverged", 600, "the divergence")
    wait(app, lambda: monitor.state_label.text() == "failed", 120, "the run to end")
    shoot(app, window, "monitor-diverged.png")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
