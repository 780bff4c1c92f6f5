"""One host's card: how it is reached, whether its key is trusted, what the last probe found.

The card only shows and asks: its buttons emit ``action(name, what)`` and the
page talks to the engine. Errors (unreachable, login refused) stay on the card
with the engine's hint until the next action succeeds.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.pages.hosts.facts import address_line, ago, ember_warning, hardware_rows, software_rows
from app.state.style import set_role
from app.widgets.common import FactsView, label

ACTIONS = ("probe", "prepare", "edit", "remove", "forget_key")
BADGE = "border-radius: 9px; padding: 2px 10px; font-size: 9pt; font-weight: 600;"
TONES = {  # background, text
    "good": ("#e6f4ea", "#1e6b34"),
    "bad": ("#fdecea", "#a61e1e"),
    "warn": ("#fff4d6", "#6b4b00"),
    "plain": ("#eef1f4", "#4a5563"),
}
BOX = "border-radius: 6px; padding: 8px 10px;"
KEY_TEXT = {
    "trusted": ("key trusted", "good"),
    "unknown": ("key not trusted yet", "warn"),
    "changed": ("KEY CHANGED", "bad"),
    None: ("key not checked yet", "plain"),
}


def sentences(*parts: Any) -> str:
    """Message and hint as one text, each ending in a full stop."""
    texts = [str(p).strip() for p in parts if p and str(p).strip()]
    return " ".join(t if t[-1] in ".!?:" else t + "." for t in texts)


def set_tone(widget: QLabel, tone: str, box: bool = False) -> None:
    background, color = TONES[tone]
    widget.setStyleSheet(f"background: {background}; color: {color}; {BOX if box else BADGE}")


def badge(text: str, tone: str) -> QLabel:
    widget = QLabel(text)
    set_tone(widget, tone)
    return widget


class HostCard(QFrame):
    action = Signal(str, str)  # host name, one of ACTIONS

    def __init__(self, record: dict[str, Any], parent: QWidget | None = None):
        super().__init__(parent)
        set_role(self, "card")
        self.record: dict[str, Any] = {}
        self.busy_text = ""
        self.progress_seen: list[tuple[str, float | None]] = []  # this action's progress events, in order
        self.connected = True
        outer = QVBoxLayout(self)
        outer.setContentsMargins(18, 14, 18, 14)
        outer.setSpacing(8)

        header = QHBoxLayout()
        header.setSpacing(8)
        self.name_label = label("", "h2")
        self.ready_badge = badge("", "plain")
        self.role_badge = badge("", "plain")
        header.addWidget(self.name_label)
        header.addWidget(self.ready_badge, 0, Qt.AlignmentFlag.AlignVCenter)
        header.addWidget(self.role_badge, 0, Qt.AlignmentFlag.AlignVCenter)
        header.addStretch(1)
        self.buttons: dict[str, QPushButton] = {}
        for what, text, tip in (
                ("probe", "Probe", "Log in and read the host's OS, CPU, memory, disk, GPUs and Python packages"),
                ("prepare", "Prepare", "Copy this machine's Ember to the host and install it into the host's "
                                       "Python (no internet needed there)"),
                ("edit", "Edit…", "Change how Ember reaches this host"),
                ("forget_key", "Forget key…", "Remove the host key Ember stored for this host, to check and "
                                              "trust its key again"),
                ("remove", "Remove…", "Remove this host from Ember (nothing on the host is touched)")):
            button = QPushButton(text)
            button.setToolTip(tip)
            if what in ("remove", "forget_key"):
                button.setProperty("role", "danger")
            button.clicked.connect(lambda _=False, what=what: self.action.emit(self.name, what))
            header.addWidget(button)
            self.buttons[what] = button
        outer.addLayout(header)

        line = QHBoxLayout()
        line.setSpacing(10)
        self.address_label = label("", "muted")
        self.address_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.key_badge = badge("", "plain")
        line.addWidget(self.address_label)
        line.addWidget(self.key_badge)
        line.addStretch(1)
        self.age_label = label("", "muted")
        line.addWidget(self.age_label)
        outer.addLayout(line)

        self.key_warning = label("", wrap=True)
        set_tone(self.key_warning, "bad", box=True)
        outer.addWidget(self.key_warning)

        self.not_probed = label("Not probed yet. Probe logs in and reads what the host has: GPUs, "
                                "memory, disk, Python and PyTorch.", "muted", wrap=True)
        outer.addWidget(self.not_probed)
        self.facts_row = QWidget()
        columns = QHBoxLayout(self.facts_row)
        columns.setContentsMargins(0, 4, 0, 0)
        columns.setSpacing(28)
        self.hardware = FactsView()
        self.software = FactsView()
        columns.addWidget(self.hardware, 1, Qt.AlignmentFlag.AlignTop)
        columns.addWidget(self.software, 1, Qt.AlignmentFlag.AlignTop)
        outer.addWidget(self.facts_row)

        self.ember_warning = label("", wrap=True)
        set_tone(self.ember_warning, "warn", box=True)
        outer.addWidget(self.ember_warning)
        self.problems_label = label("", wrap=True)
        set_tone(self.problems_label, "warn", box=True)
        outer.addWidget(self.problems_label)

        busy_row = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(6)
        self.progress.setMaximumWidth(220)
        self.busy_label = label("", "muted", wrap=True)
        busy_row.addWidget(self.progress)
        busy_row.addWidget(self.busy_label, 1)
        self.busy_row = QWidget()
        self.busy_row.setLayout(busy_row)
        busy_row.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.busy_row)

        self.error_label = label("", wrap=True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        set_tone(self.error_label, "bad", box=True)
        outer.addWidget(self.error_label)

        self.busy_row.hide()
        self.error_label.hide()
        self.set_record(record)

    @property
    def name(self) -> str:
        return str(self.record.get("name", ""))

    # -- showing a record --------------------------------------------------------------------

    def set_record(self, record: dict[str, Any]) -> None:
        self.record = dict(record)
        self.name_label.setText(self.name)
        self.address_label.setText(address_line(record))
        self.role_badge.setText("Jetson" if record.get("role") == "jetson" else "training")
        key = record.get("key") or {}
        status = key.get("status")
        text, tone = KEY_TEXT.get(status, KEY_TEXT[None])
        self.key_badge.setText(text)
        set_tone(self.key_badge, tone)
        self.key_badge.setToolTip(str(key.get("fingerprint") or ""))
        self.key_warning.setVisible(status == "changed")
        self.key_warning.setText(
            "The host presents a different key than the one Ember trusted. Someone may be intercepting the "
            "connection; Ember will not log in. If the host was reinstalled, read its new fingerprint on the "
            "host, then Forget key and Probe to check and trust the new one.")
        self.buttons["forget_key"].setVisible(status in ("trusted", "changed"))

        facts = record.get("facts")
        self.not_probed.setVisible(not facts)
        self.facts_row.setVisible(bool(facts))
        if facts:
            ready = bool(facts.get("ready"))
            self.ready_badge.setText("Ready" if ready else "Not ready")
            set_tone(self.ready_badge, "good" if ready else "bad")
            self.hardware.set_facts(hardware_rows(facts))
            self.software.set_facts(software_rows(facts))
            warning = ember_warning(facts)
            problems = [p for p in facts.get("problems") or [] if isinstance(p, dict)]
            # The engine's problems usually say the same about Ember; show each thing once.
            if warning and any("ember" in str(p.get("message", "")).lower() for p in problems):
                warning = ""
            self.ember_warning.setText(warning)
            self.ember_warning.setVisible(bool(warning))
            self.problems_label.setText("\n".join("• " + sentences(p.get("message"), p.get("hint"))
                                                   for p in problems))
            self.problems_label.setVisible(bool(problems))
            # Prepare is the thing to do on a host that is not ready: say so by its colour.
            self._set_prepare_primary(not ready or bool(ember_warning(facts)))
        else:
            self._set_prepare_primary(False)
            self.ready_badge.setText("Not probed")
            set_tone(self.ready_badge, "plain")
            self.ember_warning.hide()
            self.problems_label.hide()
        self.refresh_age()

    def _set_prepare_primary(self, primary: bool) -> None:
        button = self.buttons["prepare"]
        role = "primary" if primary else ""
        if button.property("role") != role:
            button.setProperty("role", role)
            button.style().unpolish(button)
            button.style().polish(button)

    def refresh_age(self) -> None:
        when = ago(self.record.get("probed_at"))
        self.age_label.setText(f"probed {when}" if when else "")

    # -- busy and errors -----------------------------------------------------------------

    def set_busy(self, text: str) -> None:
        """Show a long action under way; the actions wait for it."""
        self.busy_text = text
        self.progress_seen = []
        self.busy_label.setText(text)
        self.progress.setRange(0, 0)  # moving, until progress events give a fraction
        self.busy_row.show()
        self.error_label.hide()
        self._enable(False)

    def set_progress(self, message: str, fraction: float | None) -> None:
        if not self.busy_text:
            return  # a late event of a finished action
        self.progress_seen.append((message, fraction))
        if message:
            self.busy_label.setText(message)
        if fraction is not None:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(max(0.0, min(1.0, float(fraction))) * 1000))

    def set_idle(self) -> None:
        self.busy_text = ""
        self.busy_row.hide()
        self._enable(True)

    def show_error(self, message: str, hint: str = "") -> None:
        self.set_idle()
        self.error_label.setText("\n".join(sentences(part) for part in (message, hint) if part))
        self.error_label.show()

    def clear_error(self) -> None:
        self.error_label.clear()
        self.error_label.hide()

    def error_text(self) -> str:
        return self.error_label.text() if not self.error_label.isHidden() else ""

    def set_connected(self, connected: bool) -> None:
        self.connected = connected
        self._enable(not self.busy_text)

    def _enable(self, enabled: bool) -> None:
        for button in self.buttons.values():
            button.setEnabled(enabled and self.connected)
