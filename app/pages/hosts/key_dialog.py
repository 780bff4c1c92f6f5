"""The host key question: trust a key seen for the first time, or a warning about a changed one.

SSH only protects a connection if the first key is checked by a person, so the
dialog shows the fingerprint and says how to read the real one on the host. A
changed key gets no Trust button at all: the only way on is to forget the old
key deliberately (the card's Forget key) and check the new one like a first one.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.pages.hosts.facts import address_line
from app.widgets.common import label

CHECK_COMMAND = "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"
MONO = "font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace;"
FINGERPRINT_STYLE = f"{MONO} font-size: 10.5pt; background: #f6f7f9; border: 1px solid #e3e6ea; " \
                    "border-radius: 6px; padding: 8px 10px;"
DANGER_STYLE = "background: #fdecea; color: #8a1c1c; border: 1px solid #f1b0ac; border-radius: 6px; " \
               "padding: 10px 12px; font-weight: 600;"


def _mono(text: str) -> QLabel:
    widget = QLabel(text)
    widget.setStyleSheet(FINGERPRINT_STYLE)
    widget.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return widget


class KeyDialog(QDialog):
    """``check`` is the hosts.check_key reply; ``trusted`` is emitted with its fingerprint."""

    trusted = Signal(str)

    def __init__(self, record: dict[str, Any], check: dict[str, Any], parent: QWidget | None = None):
        super().__init__(parent)
        self.name = str(record.get("name"))
        self.status = str(check.get("status"))
        self.fingerprint = str(check.get("fingerprint") or "")
        self.key_type = str(check.get("key_type") or "host")
        self.setMinimumWidth(560)
        outer = QVBoxLayout(self)
        outer.setSpacing(10)
        where = f"{self.name} ({address_line(record)})"
        self.trust_button: QPushButton | None = None
        if self.status == "changed":
            self.setWindowTitle("Host key changed")
            warning = label(f"WARNING: the host key of {where} has CHANGED. Someone may be intercepting "
                            "the connection. Ember will not connect to it.", wrap=True)
            warning.setStyleSheet(DANGER_STYLE)
            outer.addWidget(warning)
            outer.addWidget(label(f"It now presents this {self.key_type} key:", wrap=True))
            self.fingerprint_label = _mono(self.fingerprint)
            outer.addWidget(self.fingerprint_label)
            known = [str(k) for k in check.get("known_fingerprints") or []]
            if known:
                outer.addWidget(label("The key Ember trusted was:", wrap=True))
                outer.addWidget(_mono("\n".join(known)))
            outer.addWidget(label("If the host was reinstalled, its key changes too. Then read the new "
                                  "fingerprint on the host itself, at its console:", "muted", wrap=True))
            outer.addWidget(_mono(CHECK_COMMAND))
            outer.addWidget(label("and compare. Only when they match: press Forget key on the host's card, "
                                  "then Probe, and trust the new key.", "muted", wrap=True))
        else:
            self.setWindowTitle("Trust this host?")
            outer.addWidget(label("Trust this host?", "h2"))
            outer.addWidget(label(f"Ember has not connected to {where} before. It presents this "
                                  f"{self.key_type} key:", wrap=True))
            self.fingerprint_label = _mono(self.fingerprint)
            outer.addWidget(self.fingerprint_label)
            outer.addWidget(label("Before you trust it, compare it with the fingerprint the host itself "
                                  "reports. On the host (at its console, or over a connection you already "
                                  "trust) run:", "muted", wrap=True))
            outer.addWidget(_mono(CHECK_COMMAND))
            outer.addWidget(label("If they differ, someone may be intercepting the connection: do not trust it.",
                                  "muted", wrap=True))
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.close_button = QPushButton("Close" if self.status == "changed" else "Don't trust")
        self.close_button.clicked.connect(self.reject)
        buttons.addWidget(self.close_button)
        if self.status != "changed":
            self.trust_button = QPushButton("Trust")
            self.trust_button.setProperty("role", "primary")
            self.trust_button.clicked.connect(self._trust)
            buttons.addWidget(self.trust_button)
        else:
            self.close_button.setDefault(True)
        outer.addLayout(buttons)

    def _trust(self) -> None:
        self.accept()
        self.trusted.emit(self.fingerprint)
