"""Screenshots of the Export wizard, with a one-click deploy to a "Jetson" over SSH.

No Jetson exists where these pictures are taken: the host is a real OpenSSH server
on 127.0.0.1 (tests/sshd.py) whose Python has, beside it, the test STAND-IN for
NVIDIA's trtexec (tests/fixtures/fake_trtexec). The export, the parity checks, the
bundle, SSH, SFTP and the streaming are real; the device's build log and its
latency and throughput come from the stand-in, and the README says so beside the
picture. Run by scripts/screenshots_export.sh under Xvfb. Writes
docs/images/export-2-formats.png, export-3-target.png, export-5-run.png, export-5-device.png and
variants-device.png.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from engine.api.job_terms import FINAL_STATES

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
from screenshots import open_window, pump, shoot, wait  # noqa: E402 - the shared helpers of the other screenshots

import engine  # noqa: E402
from engine.api.paths import resolve  # noqa: E402
from engine.cli.client import BlockingClient  # noqa: E402
from tests.sshd import host_venv, make_sshd  # noqa: E402 - needs the repo root on sys.path

WORK = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ember-demo-export/jetson")
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/images")
FAKE_TRTEXEC = ROOT / "tests" / "fixtures" / "fake_trtexec"
PARENT = {"task": "text_classification", "method": {"kind": "full"}, "batch_size": 16,
          "data": {"max_length": 64}, "max_steps": 60, "eval_every": 30, "optim": {"lr": 1e-4}}


def jetson_python() -> Path:
    """A venv standing in for the Jetson's Python, with the trtexec stand-in in its bin folder."""
    python = host_venv(WORK / "venv", engine.__version__)
    trtexec = python.parent / "trtexec"
    trtexec.write_text(f"#!{python}\n" + FAKE_TRTEXEC.read_text().split("\n", 1)[1])
    trtexec.chmod(0o755)
    return python


def finish(c: BlockingClient, job_id: str) -> dict:
    import time

    while (job := c.call("jobs.get", id=job_id))["state"] not in FINAL_STATES:
        time.sleep(1)
    if job["state"] != "succeeded":
        raise SystemExit(f"job {job_id} ended {job['state']}: {job.get('error')}")
    return job


def main() -> int:
    import screenshots

    screenshots.OUT = OUT
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    python = jetson_python()
    server = make_sshd(WORK / "sshd").start()
    try:
        app, window = open_window()  # starts the engine
        client = BlockingClient.connect(resolve(), client="screenshots", timeout=300)
        client.call("hosts.add", host={**server.host("orin-nano"), "python": str(python),
                                       "workdir": str(WORK / "work"), "role": "jetson"})
        client.call("hosts.trust", name="orin-nano", fingerprint=server.fingerprint)
        client.call("hosts.probe", name="orin-nano")
        parent = finish(client, client.call("jobs.start", kind="train.finetune", spec=PARENT,
                                            name="tickets-minilm")["id"])
        window.nav.show("export", job_id=parent["id"], record=parent)
        page = window.page("export")
        wait(app, lambda: page.source() is not None and page.source()["id"] == parent["id"], 30, "the source")
        for key, check in page.format_checks.items():
            check.setChecked(key in ("onnx", "ort", "torchscript", "pt2", "triton", "jetson"))
        pump(app, 1)
        shoot(app, window, "export-2-formats.png")
        page.go_to(2)
        hosts = page.target_step.fields["host"]
        wait(app, lambda: hosts.findData("orin-nano") >= 0, 30, "the Jetson host in the list")
        hosts.setCurrentIndex(hosts.findData("orin-nano"))
        page.target_step.fields["benchmark_s"].setValue(3)
        pump(app, 1)
        shoot(app, window, "export-3-target.png")
        page.go_to(3)
        pump(app, 0.5)
        page.run_button.click()
        run = page.run_step
        wait(app, lambda: run.state in FINAL_STATES, 900, "the export")
        pump(app, 2)
        shoot(app, window, "export-5-run.png")
        from PySide6.QtWidgets import QScrollArea

        area = run.device_card.parent()
        while area is not None and not isinstance(area, QScrollArea):
            area = area.parent()
        if area is not None:
            area.ensureWidgetVisible(run.device_card, 0, 0)
        shoot(app, window, "export-5-device.png")

        # An fp16 variant deployed the same way, so Compare › Variants has a figure on each row.
        variant = finish(client, client.call("jobs.start", kind="compress.quantize", name="tickets-fp16", spec={
            "source_run": parent["id"], "mode": "fp16", "eval": {"samples": 64, "repeats": 10}})["id"])
        finish(client, client.call("jobs.start", kind="export.model", name="tickets-fp16-orin", spec={
            "source_run": variant["id"], "formats": ["jetson"], "target": "orin_nano", "host": "orin-nano",
            "precision": "fp16", "benchmark_s": 3})["id"])
        window.nav.show("compare", variants_of=parent["id"])
        view = window.page("compare").variants
        wait(app, lambda: view.model.rowCount() >= 2, 30, "the variants")
        pump(app, 2)
        view.table.horizontalScrollBar().setValue(view.table.horizontalScrollBar().maximum())
        shoot(app, window, "variants-device.png")
        client.close()
        window.close()
    finally:
        server.stop()
        asyncio.set_event_loop(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
