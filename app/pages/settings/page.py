"""Settings: facts about the engine and this machine, and the engine's off switch.

"Probe this machine" is an ordinary job (kind ``system.probe``): it shows up in
Runs like any other, its events arrive on ``run/<id>/*``, and its facts are the
job's result. The newest successful probe is shown when the page opens.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from app.connection.engine_client import CONNECTION_LOST, NOT_CONNECTED, Subscription
from app.connection.engine_process import EngineProcess
from app.state.navigation import Navigator
from app.text import format as fmt
from app.text.probe_facts import probe_rows
from app.widgets.common import FactsView, card, label, scrolling_body
from engine.api.job_terms import FINAL_STATES, SYSTEM_PROBE
from engine.api.protocol import RpcError

STATUS_REFRESH_MS = 5000


def store_text(store: dict[str, Any]) -> str:
    """The store's health in a line: checked at start, its last backup, or what recovery did."""
    if store.get("message"):
        return str(store["message"])
    if not store:
        return "—"
    backup = str(store.get("last_backup") or "")
    return "checked at start: ok" + (f"; last backup {backup.rsplit('/', 1)[-1]}" if backup else "")


class SettingsPage(QWidget):
    title = "Settings"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._engine = engine
        self._client = engine.client
        self._probe_id: str | None = None
        self._probe_sub: Subscription | None = None

        outer = scrolling_body(self, spacing=16)
        outer.addWidget(label("Settings", "h1"))
        from app.pages.settings.preferences_card import PreferencesCard

        self.preferences = PreferencesCard()  # theme, data directory, default hardware, units
        outer.addWidget(self.preferences)

        # Engine
        engine_card, box = card()
        row = QHBoxLayout()
        row.addWidget(label("Engine", "h2"), 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh_status)
        self.stop_button = QPushButton("Stop engine")
        self.stop_button.setProperty("role", "danger")
        self.stop_button.setToolTip("Shut the background engine down; running jobs keep running")
        self.stop_button.clicked.connect(engine.stop_engine)
        row.addWidget(self.refresh_button)
        row.addWidget(self.stop_button)
        box.addLayout(row)
        box.addWidget(label("The engine runs in the background and keeps running when you "
                            "close this window. Stopping it does not stop running jobs; they "
                            "are picked up again when it starts.", "muted", wrap=True))
        self.engine_facts = FactsView()
        box.addWidget(self.engine_facts)
        outer.addWidget(engine_card)

        # This machine
        machine_card, box = card()
        row = QHBoxLayout()
        row.addWidget(label("This machine", "h2"), 1)
        self.probe_button = QPushButton("Probe this machine")
        self.probe_button.setProperty("role", "primary")
        self.probe_button.setToolTip("Run a short job that reports the OS, CPU, memory, disk, "
                                     "GPUs and PyTorch found here")
        self.probe_button.clicked.connect(self.probe)
        row.addWidget(self.probe_button)
        box.addLayout(row)
        self.probe_status = label("Not probed yet. A probe takes a few seconds and shows "
                                  "what Ember can use on this machine.", "muted", wrap=True)
        box.addWidget(self.probe_status)
        self.machine_facts = FactsView()
        box.addWidget(self.machine_facts)
        outer.addWidget(machine_card)
        from app.pages.settings.audit_view import AuditView
        from app.pages.settings.users_card import UsersCard

        # Who may use this engine (roles, projects, tokens): for a team engine only, so folded for a single
        # user on this machine, and unfolded once the engine has other users or this window is remote.
        team_card, box = card()
        head = QHBoxLayout()
        head.addWidget(label("Team engine", "h2"), 1)
        self.team_button = QPushButton("Show users and projects")
        self.team_button.setCheckable(True)
        self.team_button.toggled.connect(self.show_team)
        head.addWidget(self.team_button)
        box.addLayout(head)
        box.addWidget(label("Only needed when other people use this engine from their machines (ember engine serve "
                            "--listen, docs/security.md): their users, roles, projects and tokens. Working alone on "
                            "this machine, you need none of it.", "muted", wrap=True))
        self.users_card = UsersCard(engine)  # who may use this engine: roles, projects, tokens
        self.users_card.users_shown.connect(lambda n: n and self.team_button.setChecked(True))
        box.addWidget(self.users_card)
        outer.addWidget(team_card)
        self.show_team(bool(getattr(engine, "remote", None)))

        self.audit_view = AuditView(self._client)  # Audit log: who changed what, with filters and export
        outer.addWidget(self.audit_view)
        outer.addStretch(1)

        self._status_timer = QTimer(self, interval=STATUS_REFRESH_MS)
        self._status_timer.timeout.connect(self.refresh_status)
        self.jobs = engine.jobs  # the window's JobsState: the latest probe, and the new one ending
        self.jobs.jobs_reset.connect(self._load_latest_probe)
        self.jobs.job_changed.connect(self._on_job_event)
        if self.jobs.loaded:
            self._load_latest_probe()
        self._client.connected.connect(self._on_connected)
        self._client.disconnected.connect(self._on_disconnected)
        if self._client.is_connected:
            self._on_connected()
        else:
            self._on_disconnected()

    # -- connection ---------------------------------------------------------------------

    def show_team(self, on: bool) -> None:
        """Unfold (``on``) or fold the team engine's users and projects."""
        self.users_card.setVisible(on)
        if self.team_button.isChecked() != on:
            self.team_button.setChecked(on)
        self.team_button.setText("Hide users and projects" if on else "Show users and projects")

    def _on_connected(self, _hello: Any = None) -> None:
        for button in (self.refresh_button, self.stop_button, self.probe_button):
            button.setEnabled(True)
        self.refresh_status()
        if self._probe_id is not None:
            self._fetch_probe(self._probe_id)  # it may have finished while we were away
        # else the latest probe is shown once the job list is read (_load_latest_probe)

    def _on_disconnected(self) -> None:
        for button in (self.refresh_button, self.stop_button, self.probe_button):
            button.setEnabled(False)
        self.engine_facts.set_facts([("State", f"not connected ({self._engine.state})")])

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        self._status_timer.start()
        self.refresh_status()

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().hideEvent(event)
        self._status_timer.stop()

    # -- engine facts -------------------------------------------------------------------

    def refresh_status(self) -> None:
        if self._client.is_connected:
            self._client.request("engine.status", {}, self._show_status, lambda _err: None)

    def _show_status(self, status: dict[str, Any]) -> None:
        jobs = status.get("jobs") or {}
        jobs_text = ", ".join(f"{n} {state}" for state, n in sorted(jobs.items())) or "none"
        self.engine_facts.set_facts([
            ("Version", str(status.get("version", "—"))),
            ("Process id", str(status.get("pid", "—"))),
            ("Running for", fmt.duration(status.get("uptime_s"))),
            ("Data folder", str(status.get("home", "—"))),
            ("Socket", str(status.get("socket", "—"))),
            ("Jobs", jobs_text),
            ("Clients connected", str(status.get("clients", "—"))),
            ("Store", store_text(status.get("store") or {})),
        ])

    # -- probing ------------------------------------------------------------------------

    def probe(self) -> None:
        self.probe_button.setEnabled(False)
        self.probe_status.setText("Starting the probe…")
        # Events of the new job all come after this seq, so replaying from it misses none.
        since = self._client.last_seq
        self._client.request("jobs.start", {"kind": SYSTEM_PROBE, "spec": {}},
                             lambda job: self._follow_probe(job, since), self._probe_failed)

    def _follow_probe(self, job: dict[str, Any], since: int) -> None:
        self._probe_id = job["id"]
        self.probe_status.setText(f"Probing this machine… (job {job['id']})")
        self._probe_sub = self._client.subscribe([f"run/{job['id']}/*"], self._on_probe_event,
                                                 since=since)
        if job.get("state") in FINAL_STATES:
            self._fetch_probe(job["id"])

    def _on_probe_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        kind = topic.rsplit("/", 1)[-1]
        if kind == "result" or data.get("state") in FINAL_STATES:
            self._fetch_probe(self._probe_id)
        elif data.get("message"):
            self.probe_status.setText(f"Probing… {data['message']}")

    def _on_job_event(self, data: dict[str, Any]) -> None:
        if data.get("id") == self._probe_id and data.get("state") in FINAL_STATES:
            self._fetch_probe(self._probe_id)

    def _fetch_probe(self, job_id: str | None) -> None:
        def failed(err: RpcError) -> None:
            # Lost the connection: the probe runs on, and is fetched again on reconnect.
            if err.code not in (CONNECTION_LOST, NOT_CONNECTED):
                self._probe_failed(err)

        if job_id is not None:
            self._client.request("jobs.get", {"id": job_id}, self._on_probe_job, failed)

    def _on_probe_job(self, job: dict[str, Any]) -> None:
        if job.get("id") != self._probe_id or job.get("state") not in FINAL_STATES:
            return  # an older probe, or a result not written yet (the next event fetches again)
        self._finish_probe()
        if job["state"] == "succeeded" and job.get("result"):
            self._show_probe(job)
        else:
            error = job.get("error") or {}
            message = error.get("message") or f"The probe ended {job['state']}."
            self.probe_status.setText(" ".join(filter(None, [message, error.get("hint")])))

    def _probe_failed(self, err: Any) -> None:
        self._finish_probe()
        self.probe_status.setText(f"Could not probe this machine: {err}")

    def _finish_probe(self) -> None:
        self._probe_id = None
        if self._probe_sub is not None:
            self._client.unsubscribe(self._probe_sub)
            self._probe_sub = None
        self.probe_button.setEnabled(self._client.is_connected)

    def _load_latest_probe(self) -> None:
        """Show the newest finished probe (its result comes with jobs.get), unless one runs now."""
        probes = self.jobs.by_kind(SYSTEM_PROBE, ("succeeded",))
        if probes and self._probe_id is None:
            self._client.request("jobs.get", {"id": probes[0]["id"]}, self._show_probe, lambda _err: None)

    def _show_probe(self, job: dict[str, Any]) -> None:
        result = job.get("result") or {}
        if not isinstance(result, dict) or not result:
            return
        when = fmt.timestamp(job.get("ended_at") or job.get("created_at"))
        self.probe_status.setText(f"Probed at {when} (job {job.get('id')}).")
        self.machine_facts.set_facts(probe_rows(result))
