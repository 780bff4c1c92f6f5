"""Engine › Connect to engine…: use a team engine on another machine over TLS (docs/security.md).

The user types the engine's address and their token. The first time, the engine's certificate fingerprint
is shown to compare with the one the engine printed on its machine (``ember engine status``), like an SSH
host key; accepted, it is remembered for that address, and a different certificate later is refused with
both fingerprints. "Remember" keeps the address (preferences) and the token (a 0600 file in the user's
config folder) so the next start connects there.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.state.prefs import prefs
from app.widgets.common import label, say
from engine.api import paths as engine_paths
from engine.api.remote_engine import KnownEngines, SavedLogins, parse_address


class ConnectDialog(QDialog):
    def __init__(self, engine: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self.engine = engine
        self.setWindowTitle("Connect to engine")
        self.known = KnownEngines(engine_paths.known_engines_file())
        self.logins = SavedLogins(engine_paths.saved_logins_file())
        layout = QVBoxLayout(self)
        layout.addWidget(label("Use the Ember Studio engine of another machine (a team's GPU server) over an "
                               "encrypted connection. On that machine: ember engine serve --listen 0.0.0.0:7443, "
                               "and an admin makes your token with ember users add.", "muted", wrap=True))
        form = QFormLayout()
        self.address_edit = QLineEdit(prefs().get("remote_engine") or "")
        self.address_edit.setPlaceholderText("gpu-server:7443")
        self.address_edit.setAccessibleName("Engine address")
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("emb_…")
        self.token_edit.setAccessibleName("Your token")
        form.addRow("Address", self.address_edit)
        form.addRow("Your token", self.token_edit)
        self.remember_check = QCheckBox("Remember this engine and token on this computer")
        self.remember_check.setChecked(True)
        form.addRow("", self.remember_check)
        layout.addLayout(form)
        self.status = label("", "muted", wrap=True)
        self.status.hide()
        layout.addWidget(self.status)
        self.accept_button = QPushButton("Accept this certificate and connect")
        self.accept_button.hide()
        self.accept_button.clicked.connect(self._accept_certificate)
        layout.addWidget(self.accept_button)
        buttons = QDialogButtonBox()
        self.connect_button = buttons.addButton("Connect", QDialogButtonBox.ButtonRole.AcceptRole)
        self.local_button = buttons.addButton("Use this machine's engine", QDialogButtonBox.ButtonRole.ResetRole)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.connect_button.clicked.connect(self.connect_now)
        self.local_button.clicked.connect(self._use_local)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self._fingerprint = ""
        engine.state_changed.connect(self._on_state)
        if self.address_edit.text():
            self.token_edit.setText(self.logins.get(self.address_edit.text()) or "")

    def _say(self, text: str, error: bool = False) -> None:
        say(self.status, text, error)

    def connect_now(self) -> None:
        address, token = self.address_edit.text().strip(), self.token_edit.text().strip()
        try:
            parse_address(address)
        except ValueError as exc:
            self._say(str(exc), error=True)
            return
        if not token:
            self._say("Your token is empty: an admin of that engine makes one with ember users add.", error=True)
            return
        self.accept_button.hide()
        self._say(f"Connecting to {address}…")
        self.engine.connect_remote(address, token)

    def _accept_certificate(self) -> None:
        self.known.accept(self.address_edit.text().strip(), self._fingerprint)
        self.connect_now()

    def _use_local(self) -> None:
        self.engine.use_local()
        self.accept()

    def _on_state(self, state: str) -> None:
        refused = self.engine.refused_certificate
        if state == "stopped" and refused is not None:
            address, fingerprint, kind = refused
            self._fingerprint = fingerprint
            if kind == "unknown":
                self._say(f"First connection to {address}. Its certificate's SHA-256 fingerprint is\n{fingerprint}\n"
                          "Compare it with the one the engine shows on its machine (ember engine status) before "
                          "accepting it.")
                self.accept_button.show()
            else:
                self._say(f"The engine at {address} presents a DIFFERENT certificate ({fingerprint}) from the one "
                          f"accepted before ({self.known.get(address)}). Someone may be intercepting the "
                          "connection, or its certificate was replaced: check with its administrator. Not "
                          "connected.", error=True)
                self.accept_button.hide()
        elif state == "stopped" and self.engine.start_failure:
            self._say(self.engine.start_failure, error=True)
        elif state == "connected" and self.engine.remote is not None:
            address = self.engine.remote["address"]
            user = self.engine.user
            if self.remember_check.isChecked():
                prefs().set("remote_engine", address)
                self.logins.save(address, self.engine.remote["token"])
            self._say(f"Connected to {address} as {user.get('name')} ({user.get('role')}).")
            self.accept()
