"""Screenshot of the Hosts page with one real host, probed over SSH.

Starts a private OpenSSH server on 127.0.0.1 (tests/sshd.py), adds it through the
Add host form as a person would, trusts the key the dialog shows, and waits for
the probe's facts. Run by scripts/screenshots_hosts.sh under Xvfb. Writes
docs/images/hosts.png and docs/images/wizard-nodes.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
from screenshots import open_window, pump, shoot, wait  # noqa: E402 - the shared helpers of the other screenshots

from engine.api.paths import resolve  # noqa: E402
from engine.cli.client import BlockingClient  # noqa: E402
from tests.sshd import make_sshd  # noqa: E402 - needs the repo root on sys.path

SSHD_DIR = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ember-demo-hosts/sshd")
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/images")


def main() -> int:
    import screenshots

    screenshots.OUT = OUT  # shoot() writes there
    OUT.mkdir(parents=True, exist_ok=True)
    server = make_sshd(SSHD_DIR).start()
    try:
        app, window = open_window()  # starts the engine
        page = window.show_page("hosts")
        wait(app, page.empty_state.isVisible, 30, "the host list")
        dialog = page.add_host()
        dialog.set_values({**server.host("workstation"), "python": sys.executable, "workdir": "~/ember"})
        pump(app, 0.5)
        dialog.submit()
        wait(app, lambda: page.key_dialog is not None and page.key_dialog.isVisible(), 60, "the key question")
        pump(app, 0.5)
        page.key_dialog.trust_button.click()
        card = page.card("workstation")
        wait(app, lambda: card.hardware.value("CPU") != "" and not card.busy_text, 120, "the probe")
        # A second host whose Python has no torch: its card says so, and what to do.
        client = BlockingClient.connect(resolve(), client="screenshots", timeout=120)
        client.call("hosts.add", host={**server.host("gpu-box"), "python": "/usr/bin/python3", "workdir": "~/ember"})
        client.call("hosts.probe", name="gpu-box")
        wait(app, lambda: page.card("gpu-box") is not None and page.card("gpu-box").hardware.value("CPU") != "",
             60, "the second card")
        pump(app, 1)
        shoot(app, window, "hosts.png")

        # The wizard's hardware step, run across this machine and the workstation.
        wizard = window.show_page("new_finetune")
        wizard.go_to(4)
        hardware = wizard.training_step
        hardware.where_combo.setCurrentIndex(hardware.where_combo.findData("nodes"))
        editor = hardware.nodes_editor
        wait(app, lambda: "workstation" in editor.host_names(), 30, "the hosts in the wizard")
        while len(editor.rows) < 2:
            editor.add_node()
        editor.rows[0].host_combo.setCurrentIndex(editor.rows[0].host_combo.findData("local"))
        editor.rows[1].host_combo.setCurrentIndex(editor.rows[1].host_combo.findData("workstation"))
        editor.add_node("gpu-box")
        pump(app, 2)
        shoot(app, window, "wizard-nodes.png")
        client.close()
        window.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
