"""Screenshots of the Compress wizard and the Variants view, on real runs.

Needs an EMBER_HOME where benchmarks/compress_bench.py left its runs (``--keep``):
a fine-tuned MiniLM and its variants. Run by scripts/screenshots_compress.sh under
Xvfb. Writes docs/images/compress-*.png and variants.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, shoot, wait  # noqa: E402 - the shared helpers of the other screenshots

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")


def parent_run() -> str:
    with BlockingClient.connect(resolve(), client="screenshots", timeout=60) as c:
        runs = c.call("jobs.list", kind="train.finetune", limit=50)["jobs"]
    parents = [r for r in runs if not r.get("parent_id") and r["state"] == "succeeded"]
    if not parents:
        raise SystemExit("no finished fine-tune in this EMBER_HOME: run benchmarks/compress_bench.py --keep first")
    return parents[-1]["id"]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    app, window = open_window()  # starts the engine
    pid = parent_run()

    wizard = window.show_page("compress")
    wait(app, lambda: pid in wizard.source_step.source_ids(), 30, "the source list")
    window.nav.show("compress", source=pid)
    wizard.go_to(0)
    pump(app, 1)
    shoot(app, window, "compress-1-source.png")
    wizard.go_to(1)
    for key in ("dynamic_int8", "static_int8", "prune", "distill"):
        wizard.technique_checks[key].setChecked(True)
    pump(app, 1)
    shoot(app, window, "compress-2-techniques.png")
    wizard.go_to(2)
    pump(app, 1)
    shoot(app, window, "compress-3-settings.png")
    wizard.go_to(3)
    pump(app, 1)
    shoot(app, window, "compress-4-review.png")
    # A chain: the preset ticks distillation, pruning and dynamic int8 and chains them.
    wizard.go_to(1)
    wizard.apply_preset("smallest within 1 point")
    pump(app, 1)
    from PySide6.QtWidgets import QScrollArea

    area = wizard.techniques_step.chain_check.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if area is not None:  # the chain's card is below the techniques
        area.verticalScrollBar().setValue(area.verticalScrollBar().maximum())
    pump(app, 1)
    shoot(app, window, "compress-chain.png")
    wizard.go_to(3)
    pump(app, 1)
    shoot(app, window, "compress-chain-review.png")

    window.nav.show("compare", variants_of=pid)
    view = window.page("compare").variants
    wait(app, lambda: len(view.rows()) > 2, 30, "the variants")
    others = [r for r in view.rows() if not r.is_parent and r.metric is not None]
    chains = [r for r in others if r.technique.startswith("chain")]
    if others:
        view.select_run((chains or others)[0].job_id)
    pump(app, 3)
    shoot(app, window, "variants.png")
    # The latency columns: a TensorRT-form or fp16 variant timed on this CPU is marked as not on its target.
    from app.pages.compare.variants.table import COLUMN

    view.table.horizontalScrollBar().setValue(view.table.columnViewportPosition(COLUMN["metric"]))
    pump(app, 2)
    shoot(app, window, "variants-targets.png")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
