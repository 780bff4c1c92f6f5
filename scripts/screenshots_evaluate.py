"""A screenshot of Compare's Evaluations tab, driven in-process against a real engine, real runs and real scores.

Run by scripts/screenshots_evaluate.sh under Xvfb. Writes into the folder given (docs/images):

  evaluate-table.png   SmolLM2 (the base model), its LoRA fine-tune on the built-in short answers and the
                       LoRA-merged variant of that fine-tune, scored on the fine-tune's validation data and
                       on the two lm-eval tasks defined by YAML files in tests/data/lm_eval_tasks

The evaluations are started as the Evaluate… button starts them (the base model's too). Runs and
evaluations of an earlier call in the same EMBER_HOME (same names, finished) are used again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.api.job_terms import LORA_MERGE, SUCCEEDED
from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_first_run import finish  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
TASKS = Path(__file__).resolve().parent.parent / "tests" / "data" / "lm_eval_tasks"
LM = {"task": "causal_lm", "model": {"builtin": "smollm2-135m-instruct"}, "data": {"builtin": "short-answers"},
      "method": {"kind": "lora"}, "batch_size": 8, "max_steps": 60, "eval_every": 60, "checkpoint_every": 1000,
      "optim": {"lr": 0.002}, "generate_eval": {"prompts": 4, "max_new_tokens": 24}}
EVALUATE = {"limit": 0, "max_new_tokens": 24,
            "lm_eval": {"tasks": ["ember_short_qa", "ember_pick_word"], "include_path": str(TASKS)}}


def run_named(c: BlockingClient, name: str, kind: str, spec: dict) -> str:
    """The finished job called ``name`` (an earlier call's), else a new one, waited for."""
    for job in c.call("jobs.list", limit=500)["jobs"]:
        if job.get("name") == name and job["state"] == SUCCEEDED:
            return job["id"]
    job_id = c.call("jobs.start", kind=kind, spec=spec, name=name)["id"]
    if finish(c, job_id, timeout=3600) != SUCCEEDED:
        raise SystemExit(f"screenshots: {name} did not succeed: {c.call('jobs.get', id=job_id).get('error')}")
    return job_id


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        lm = run_named(c, "answers-lora", "train.finetune", LM)
        run_named(c, "answers-lora-merged", LORA_MERGE, {"source_run": lm})

    app, window = open_window()
    window.resize(1390, 540)
    compare = window.show_page("compare")
    compare.show_evaluations(lm)
    view = compare.evaluations
    wait(app, lambda: [r.role for r in view.rows()] == ["base", "run", "variant"], 60, "the run's family")
    for role in ("run", "variant"):  # Evaluate… on the run starts the base model's evaluation too
        row = next(r for r in view.rows() if r.role == role)
        if not row.has(f"validation:{lm}"):
            view.start(row, **EVALUATE)
            wait(app, lambda: len(view.started) >= 1, 60, "the evaluation to start")
            wait(app, lambda role=role: next(r for r in view.rows() if r.role == role).active, 60, "the table")
    wait(app, lambda: all(r.cells.get("exact_match") is not None and not r.active for r in view.rows()), 3600,
         "every evaluation")
    view.select_model({"run": lm})
    view.table.setFocus()
    pump(app, 1)
    window.grab().save(str(OUT / "evaluate-table.png"))
    print(f"  {OUT / 'evaluate-table.png'}")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
