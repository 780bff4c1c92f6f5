"""Screenshots of a language model's deployment, driven in-process against a real engine and real files.

Run by scripts/screenshots_deploy_llm.sh under Xvfb (or with QT_QPA_PLATFORM=offscreen). Writes into the folder
given (docs/images):

  export-llm-formats.png   the Export wizard's Formats step for a LoRA fine-tune of SmolLM2: merged checkpoint,
                           GGUF and ONNX-GenAI ticked, with their options
  export-llm-run.png       the export finished: each file's perplexity and identical greedy answers, checked in
                           transformers, llama.cpp and ONNX Runtime GenAI
  variants-llm.png         Compare › Variants: the fine-tune and every file, measured in its own runtime
  variants-llm-speed.png   the same table scrolled right: ms per token one at a time and 4 at once, first token,
                           size, compression, memory
  serve-live.png           the Playground serving the fine-tune: URL, live figures and chart, a load test's result

Runs of an earlier call in the same EMBER_HOME (same names, finished) are used again; SHOTS=serve (or export,
compare: a comma-separated list) takes only those pictures.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from engine.api.job_terms import FINAL_STATES
from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_playground import LM, run_named, shoot  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")


def main() -> int:
    import screenshots_playground

    screenshots_playground.OUT = OUT
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        lm = run_named(c, "answers-lora", "train.finetune", LM)
        record = c.call("jobs.get", id=lm)

    shots = set(os.environ.get("SHOTS", "export,compare,serve").split(","))
    app, window = open_window()
    window.resize(1280, 860)
    if "export" in shots:
        export(app, window, lm, record)
    if "compare" in shots:
        window.nav.show("compare", variants_of=lm)
        view = window.page("compare").variants
        wait(app, lambda: view.model.rowCount() >= 6, 60, "the exported files on Compare")
        view.set_limits(40.0, 10.0)
        pump(app, 2)
        shoot(app, window, "variants-llm.png")
        bar = view.table.horizontalScrollBar()  # the speed columns, further right in the same table
        bar.setValue(bar.maximum())
        pump(app, 1)
        shoot(app, window, "variants-llm-speed.png")
        bar.setValue(0)
    if "serve" in shots:
        serve(app, window, lm)
    window.close()
    return 0


def export(app, window, lm: str, record: dict) -> None:
    window.nav.show("export", job_id=lm, record=record)
    page = window.page("export")
    wait(app, lambda: page.source() is not None and page.source()["id"] == lm, 30, "the source")
    for key, check in page.format_checks.items():
        check.setChecked(key in ("hf", "gguf", "onnx_genai"))
    page.formats_step.fields["gguf_types"].set_value(["f16", "q8_0", "q4_k_m"])
    pump(app, 1)
    shoot(app, window, "export-llm-formats.png")
    page.go_to(3)
    pump(app, 0.5)
    page.run_button.click()
    run = page.run_step
    wait(app, lambda: run.state in FINAL_STATES, 1800, "the export")
    pump(app, 2)
    shoot(app, window, "export-llm-run.png")


def serve(app, window, lm: str) -> None:
    window.nav.show("playground")
    playground = window.page("playground")
    wait(app, lambda: playground.picker_a.select({"run": lm}), 60, "the fine-tune in the Playground")
    playground.serve_button.click()
    bar = playground.serve_bar
    wait(app, lambda: bool(bar.url), 300, "the server")
    bar.clients.setValue(4)
    bar.seconds.setValue(20)
    bar.load_button.click()
    wait(app, lambda: bar.load_result.text().startswith("Load test,"), 300, "the load test's result")
    pump(app, 5)  # the next figures after the test
    shoot(app, window, "serve-live.png")
    bar.stop()
    wait(app, lambda: not bar.serving, 120, "the server to stop")


if __name__ == "__main__":
    sys.exit(main())
