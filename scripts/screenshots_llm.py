"""Screenshots of the language-model features, driven in-process against a real engine.

Run by scripts/screenshots_llm.sh under Xvfb. Writes into the folder given (docs/images):

  hub-download.png   New fine-tune's Model step: a model picked from the Hub, its download in progress
                     (bytes, speed, ETA). The Hub here is the test suite's stand-in (tests/hub_standin.py) on
                     127.0.0.1 serving the tiny test model as "acme/tiny-chat", slowed down so the download
                     is caught half way; the download itself is the real job.
  monitor-dpo.png    Monitor on a DPO fine-tune (tiny-llama on the built-in tiny-preferences): the loss and
                     the rewards chart (chosen, rejected, margin, accuracy).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
DPO = {"task": "causal_lm", "objective": "dpo", "model": {"builtin": "tiny-llama"}, "method": {"kind": "full"},
       "batch_size": 8, "max_steps": 120, "eval_every": 20, "checkpoint_every": 1000, "optim": {"lr": 0.001},
       "preference": {"beta": 0.1}}


def start_hub() -> object:
    """The stand-in Hub, and the environment that points the engine (started after this) at it."""
    from engine.tasks.causal_lm import make_tiny_model_folder
    from tests.hub_standin import HubStandin

    folder = make_tiny_model_folder(Path(tempfile.mkdtemp()) / "tiny-chat")
    # A bigger weights file than the tiny model's, so the progress bar has somewhere to go.
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes() * 24)
    hub = HubStandin()
    hub.add_folder("acme/tiny-chat", folder, downloads=1234, license="apache-2.0")
    hub.throttle_bps = 2_000_000
    hub.start()
    os.environ.update({"HF_ENDPOINT": hub.url, "HF_HOME": str(Path(os.environ["EMBER_HOME"]) / "hf"),
                       "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"})
    return hub


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    hub = start_hub()
    from engine.api.paths import resolve
    from engine.cli.client import BlockingClient, ensure_engine

    ensure_engine().close()
    from screenshots import open_window, pump, wait
    from screenshots_first_run import finish, shoot

    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        dpo = c.call("jobs.start", kind="train.finetune", spec=DPO, name="tiny-dpo")["id"]
    app, window = open_window()
    window.resize(1180, 900)

    wizard = window.show_page("new_finetune")
    wizard.start_over("causal_lm")
    wizard.go_to(1)
    step = wizard.model_step
    step.hub_radio.setChecked(True)
    step.hub_picker.id_edit.setText("acme/tiny-chat")
    pump(app, 2)
    step.hub_picker.download()
    wait(app, lambda: 15 < step.hub_picker.progress.value() < 80, 120, "the download half way")
    from PySide6.QtWidgets import QScrollArea

    area = step.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if area is not None:
        area.ensureWidgetVisible(step.hub_picker.progress_text, 0, 40)
    pump(app, 0.5)
    shoot(app, window, "hub-download.png")

    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        finish(c, dpo)
    monitor = window.show_page("monitor")
    monitor.show_run(dpo)
    wait(app, lambda: monitor.charts.reward_chart.isVisible(), 60, "the rewards chart")
    pump(app, 2)
    scroll = monitor.content.verticalScrollBar()
    scroll.setValue(monitor.charts.reward_chart.mapTo(monitor.content.widget(), monitor.charts.reward_chart.rect()
                                                      .topLeft()).y() - 40)
    pump(app, 0.5)
    shoot(app, window, "monitor-dpo.png")
    window.close()
    hub.stop()
    time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
