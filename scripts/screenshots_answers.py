"""A screenshot of the Monitor's generated answers, driven in-process against a real engine and a real run.

Run by scripts/screenshots_answers.sh under Xvfb. Writes into the folder given (docs/images):

  monitor-answers.png   Monitor on a finished causal-LM fine-tune (SmolLM2 on short-answers): the generation scores on the Evaluation
                        chart and the table of the last evaluation's prompts, references and answers
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.models.spec_tools import FIRST_CHAT
from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_first_run import finish, shoot  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
# Welcome's "Tune and chat" start: SmolLM2 LoRA-tuned on short-answers (a few minutes on a CPU).
SPEC = {**FIRST_CHAT, "checkpoint_every": 1000}
NAME = "smollm2-short-answers"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        # A finished run of a kept demo folder is shown again (the .sh's "keep"): the fine-tune takes minutes.
        done = [j["id"] for j in c.call("jobs.list", state="succeeded")["jobs"] if j.get("name") == NAME]
        run = done[0] if done else c.call("jobs.start", kind="train.finetune", spec=SPEC, name=NAME)["id"]
        finish(c, run)
    app, window = open_window()
    window.resize(1180, 900)
    monitor = window.show_page("monitor")
    monitor.show_run(run)
    wait(app, lambda: monitor.samples.step == SPEC["max_steps"], 120, "the last evaluation's answers")
    pump(app, 1)
    scroll = monitor.content.verticalScrollBar()
    scroll.setValue(scroll.maximum())  # the table sits below the charts
    shoot(app, window, "monitor-answers.png")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
