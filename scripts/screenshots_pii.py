"""Screenshot of the Data step's Personal data card after a real PII scan, driven in-process against a real engine.

Run by scripts/screenshots_pii.sh. Writes into the folder given (docs/images):

  data-pii.png   New fine-tune › Data: a customer-ticket CSV with planted personal data, scanned (Presidio),
                 each column and type with its count and masked examples, a scrub mode chosen per type
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from screenshots import open_window, pump, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_first_run import shoot  # noqa: E402

from tests.fixtures.planted_pii import write_csv  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
DATA = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/ember-demo-pii/data") / "customer-tickets.csv"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    write_csv(DATA, 400)
    app, window = open_window()
    page = window.show_page("new_finetune")
    step = page.data_step
    page.go_to(page.steps.index(step))
    step.custom_radio.setChecked(True)
    step.path_edit.setText(str(DATA))
    box = step.pii_box
    box.scan_button.click()
    wait(app, lambda: box.table.isVisible() or "failed" in box.status.text(), 300, "the scan")
    for entity, mode in {"EMAIL_ADDRESS": "fake", "CREDIT_CARD": "hash", "PHONE_NUMBER": "mask"}.items():
        box.set_mode(entity, mode)
    pump(app, 2)
    area = box.parentWidget()
    while area is not None and not hasattr(area, "ensureWidgetVisible"):
        area = area.parentWidget()
    if area is not None:
        area.ensureWidgetVisible(box.table)
    shoot(app, window, "data-pii.png")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
