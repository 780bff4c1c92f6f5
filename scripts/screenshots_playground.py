"""Screenshots of the Playground, driven in-process against a real engine, real runs and real answers.

Run by scripts/screenshots_playground.sh under Xvfb. Writes into the folder given (docs/images):

  playground-chat.png       side by side: a LoRA fine-tune of SmolLM2 on the built-in short answers beside
                            SmolLM2 itself, the same prompts streamed into both columns
  playground-classify.png   a text classifier and its dynamic int8 variant, a bar per class

Runs of an earlier call in the same EMBER_HOME (same names, finished) are used again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_first_run import finish  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
LM = {"task": "causal_lm", "model": {"builtin": "smollm2-135m-instruct"}, "data": {"builtin": "short-answers"},
      "method": {"kind": "lora"}, "batch_size": 8, "max_steps": 60, "eval_every": 60, "checkpoint_every": 1000,
      "optim": {"lr": 0.002}, "generate_eval": {"prompts": 4, "max_new_tokens": 24}}
TICKETS = {"task": "text_classification", "method": {"kind": "full"}, "batch_size": 16, "data": {"max_length": 48},
           "max_steps": 80, "eval_every": 40, "checkpoint_every": 1000, "optim": {"lr": 1e-4}}
INT8 = {"mode": "dynamic", "eval": {"samples": 64, "repeats": 5}}
PROMPTS = ("Introduce yourself.", "What is the capital of Norway?")
TICKET = "I was charged twice for my subscription this month, please refund one of the payments."


def run_named(c: BlockingClient, name: str, kind: str, spec: dict) -> str:
    """The finished job called ``name`` (an earlier call's), else a new one, waited for."""
    for job in c.call("jobs.list", limit=200)["jobs"]:
        if job.get("name") == name and job["state"] == "succeeded":
            return job["id"]
    job_id = c.call("jobs.start", kind=kind, spec=spec, name=name)["id"]
    if finish(c, job_id, timeout=3600) != "succeeded":
        raise SystemExit(f"screenshots: {name} did not succeed: {c.call('jobs.get', id=job_id).get('error')}")
    return job_id


def shoot(app, window, name: str) -> None:
    pump(app, 0.8)
    window.grab().save(str(OUT / name))
    print(f"  {OUT / name}")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        lm = run_named(c, "answers-lora", "train.finetune", LM)
        tickets = run_named(c, "tickets", "train.finetune", TICKETS)
        run_named(c, "tickets-int8", "compress.quantize", {"source_run": tickets, **INT8})

    app, window = open_window()
    window.resize(1280, 820)
    window.nav.try_in_playground(job_id=lm)
    page = window.page("playground")
    wait(app, lambda: page.picker_a.current() is not None and page.picker_a.current().ref == {"run": lm}, 30,
         "the fine-tune in the list")
    page.side_check.setChecked(True)  # beside it: the model it was tuned from
    page.settings.set_settings({"temperature": 0.0, "max_new_tokens": 64})
    # A first question loads both models and warms them up (the first answer after a load is slow); the
    # picture then shows the speed a user sees from the second question on.
    page.prompt.setPlainText("Hi")
    page.send()
    wait(app, lambda: not page.busy(), 600, "the models to load")
    page.chat.new_chat()
    for prompt in PROMPTS:
        page.prompt.setPlainText(prompt)
        page.send()
        wait(app, lambda: not page.busy(), 600, f"the answers to {prompt!r}")
    page.prompt.setPlainText("Write 12 as a word.")
    page.loaded.reload()
    shoot(app, window, "playground-chat.png")

    window.nav.try_in_playground(job_id=tickets)
    view = page.classify_view
    wait(app, lambda: len(view.cards) >= 2, 30, "the classifier and its variant")
    view.text_edit.setPlainText(TICKET)
    view.classify()
    wait(app, lambda: all(card.percents or card.error.isVisible() for card in view.cards), 300, "the probabilities")
    page.loaded.reload()
    shoot(app, window, "playground-classify.png")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
