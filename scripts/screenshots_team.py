"""Screenshots of a team engine: Settings › Users and Engine › Connect to engine…, against a real engine
listening with TLS (started by scripts/screenshots_team.sh with --listen 127.0.0.1:7443).

  settings-users.png    Settings › Users: users with their roles, projects and token states; the projects
                        with their members, data folders and hosts
  connect-engine.png    Connect to engine: the first connection, the certificate's fingerprint to compare
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.api.paths import resolve
from engine.cli.client import BlockingClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import open_window, pump, wait  # noqa: E402 - the shared helpers of the other screenshots
from screenshots_first_run import shoot  # noqa: E402

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with BlockingClient.connect(resolve(), client="screenshots") as c:
        address = c.call("engine.status")["tls"]["listen"]
        token = c.call("users.add", name="ann", role="operator", projects=["vision"])["token"]
        c.call("users.add", name="ben", role="viewer", projects=["vision", "nlp"], expires_days=90)
        c.call("users.add", name="lead", role="admin", projects=["*"])
        c.call("users.add", name="old-intern", role="operator", projects=["nlp"])
        c.call("users.revoke", name="old-intern")
        c.call("hosts.add", host={"name": "gpu-server", "address": "10.0.0.12", "user": "ember"})
        c.call("projects.set", name="vision", data_folders=["/data/vision"], hosts=["gpu-server"])
        c.call("projects.set", name="nlp", data_folders=["/data/nlp", "/data/support-tickets"])
    app, window = open_window()
    settings = window.show_page("settings")
    users = settings.users_card
    wait(app, lambda: users.table.rowCount() == 4, 60, "the users")
    wait(app, lambda: users.projects_table.rowCount() == 3, 60, "the projects")
    users.table.selectRow(0)
    area = users.parentWidget()
    while area is not None and not hasattr(area, "ensureWidgetVisible"):
        area = area.parentWidget()
    if area is not None:
        area.ensureWidgetVisible(users.save_project_button)
    pump(app, 1)
    shoot(app, window, "settings-users.png")

    window.show_connect_dialog()
    dialog = window.connect_dialog
    dialog.address_edit.setText(address)
    dialog.token_edit.setText(token)
    dialog.connect_button.click()
    wait(app, dialog.accept_button.isVisible, 60, "the certificate")
    dialog.resize(620, dialog.sizeHint().height())
    pump(app, 1)
    dialog.grab().save(str(OUT / "connect-engine.png"))
    print(f"  {OUT / 'connect-engine.png'}")
    dialog.close()
    window.engine.use_local()
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
