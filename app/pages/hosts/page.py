"""Hosts: the machines Ember reaches over SSH, what they have, and whether they can run a recipe.

The list comes from ``hosts.list`` whenever the connection (re)opens and stays
live through the ``hosts`` topic (each event is a whole HostRecord, or
``{name, removed: true}``); Prepare's progress arrives on ``hosts/<name>``.

Every action that logs in goes through the same gate: the host key must be
trusted first (``hosts.check_key``; a new key is shown to the person to
compare, a changed one is refused with a warning), then a password is asked
for if the host uses one (never stored), then the action runs. Nothing here
blocks: dialogs are opened with open() and answered through signals, and the
page keeps the open one in an attribute (``host_dialog``, ``key_dialog``,
``password_dialog``, ``confirm_dialog``) so tests and screenshots can drive them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_client import CONNECTION_LOST, NOT_CONNECTED
from app.connection.engine_process import EngineProcess
from app.pages.hosts.card import HostCard
from app.pages.hosts.host_dialog import HostDialog
from app.pages.hosts.key_dialog import KeyDialog
from app.state.navigation import Navigator
from app.widgets.common import card, label, scrolling_body
from app.widgets.empty_state import empty_state
from engine.api.protocol import INVALID_PARAMS, RpcError

AGE_REFRESH_MS = 30_000
EMPTY_TEXT = ("A host is another machine Ember can use, reached over SSH: a GPU server or workstation to "
              "fine-tune on (alone, or several together), or a Jetson to export to. Ember checks the host's "
              "key with you, probes its GPUs, memory, disk and PyTorch, and installs itself there when you "
              "press Prepare.")


class HostsPage(QWidget):
    title = "Hosts"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client
        self.cards: dict[str, HostCard] = {}
        self.host_dialog: HostDialog | None = None
        self.key_dialog: KeyDialog | None = None
        self.password_dialog: QInputDialog | None = None
        self.confirm_dialog: QMessageBox | None = None

        outer = scrolling_body(self, spacing=14)

        header = QHBoxLayout()
        header.addWidget(label("Hosts", "h1"), 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Read the host list again")
        self.refresh_button.clicked.connect(self.reload)
        self.add_button = QPushButton("Add host")
        self.add_button.setProperty("role", "primary")
        self.add_button.clicked.connect(self.add_host)
        header.addWidget(self.refresh_button)
        header.addWidget(self.add_button)
        outer.addLayout(header)
        self.intro = label("Machines Ember reaches over SSH. A host is Ready when it can run Ember's "
                           "recipes now; Prepare installs this machine's Ember there.", "muted", wrap=True)
        outer.addWidget(self.intro)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        self.empty_state, box = card()
        empty = empty_state("No hosts yet", EMPTY_TEXT, "Add host", self.add_host, icon_name="hosts")
        self.empty_add_button = empty.action_button
        box.addWidget(empty)
        outer.addWidget(self.empty_state)

        self._list = QVBoxLayout()
        self._list.setSpacing(14)
        outer.addLayout(self._list)
        outer.addStretch(1)

        self._age_timer = QTimer(self, interval=AGE_REFRESH_MS)
        self._age_timer.timeout.connect(self._refresh_ages)
        self._age_timer.start()
        self._client.subscribe(["hosts", "hosts/*"], self._on_event)
        self._client.connected.connect(self._on_connected)
        self._client.disconnected.connect(self._on_disconnected)
        if self._client.is_connected:
            self._on_connected()
        else:
            self._on_disconnected()

    # -- the list ---------------------------------------------------------------------------

    def _on_connected(self, _hello: Any = None) -> None:
        self._set_connected(True)
        self.reload()

    def _on_disconnected(self) -> None:
        self._set_connected(False)

    def _set_connected(self, connected: bool) -> None:
        for button in (self.add_button, self.empty_add_button, self.refresh_button):
            button.setEnabled(connected)
        for host_card in self.cards.values():
            host_card.set_connected(connected)

    def reload(self) -> None:
        self._client.request("hosts.list", {}, self._show_list, self._show_page_error)

    def _show_list(self, reply: dict[str, Any]) -> None:
        self.message.hide()
        records = [r for r in reply.get("hosts") or [] if isinstance(r, dict) and r.get("name")]
        names = {r["name"] for r in records}
        for name in list(self.cards):
            if name not in names:
                self._drop(name)
        for record in records:
            self._upsert(record)

    def _upsert(self, record: dict[str, Any]) -> HostCard:
        name = record["name"]
        host_card = self.cards.get(name)
        if host_card is None:
            host_card = HostCard(record)
            host_card.action.connect(self._on_action)
            host_card.set_connected(self._client.is_connected)
            self.cards[name] = host_card
            names = sorted(self.cards)
            self._list.insertWidget(names.index(name), host_card)
        else:
            host_card.set_record(record)
        self.empty_state.setVisible(not self.cards)
        return host_card

    def _drop(self, name: str) -> None:
        host_card = self.cards.pop(name, None)
        if host_card is not None:
            self._list.removeWidget(host_card)
            host_card.deleteLater()
        self.empty_state.setVisible(not self.cards)

    def card(self, name: str) -> HostCard | None:
        return self.cards.get(name)

    def _on_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        if topic == "hosts":
            name = data.get("name")
            if not name:
                return
            if data.get("removed"):
                self._drop(name)
            elif "address" in data:
                if self._renamed_elsewhere(data):
                    self.reload()
                self._upsert(data)
        elif topic.startswith("hosts/") and data.get("kind") == "progress":
            host_card = self.cards.get(topic.split("/", 1)[1])
            if host_card is not None:
                host_card.set_progress(str(data.get("message") or ""), data.get("fraction"))

    def _renamed_elsewhere(self, record: dict[str, Any]) -> bool:
        """A record for a new name with the created_at of a known one: renamed (maybe by another client)."""
        created = record.get("created_at")
        return record["name"] not in self.cards and created is not None and any(
            c.record.get("created_at") == created for c in self.cards.values())

    def _refresh_ages(self) -> None:
        for host_card in self.cards.values():
            host_card.refresh_age()

    def _show_page_error(self, err: RpcError) -> None:
        if err.code in (CONNECTION_LOST, NOT_CONNECTED):
            return  # the banner says so; the list is read again on reconnect
        self.message.setText(str(err))
        self.message.show()

    # -- adding and editing -----------------------------------------------------------------

    def add_host(self) -> HostDialog:
        """Open the Add host form; returns it (tests fill it and press OK)."""
        return self._open_host_dialog(None)

    def edit_host(self, name: str) -> HostDialog:
        return self._open_host_dialog(self.cards[name].record)

    def _open_host_dialog(self, record: dict[str, Any] | None) -> HostDialog:
        if self.host_dialog is not None:
            self.host_dialog.close()
        dialog = HostDialog(record, self)
        dialog.submitted.connect(lambda values: self._submit_host(dialog, values))
        self.host_dialog = dialog
        dialog.open()
        return dialog

    def _submit_host(self, dialog: HostDialog, values: dict[str, Any]) -> None:
        old = dialog.original_name

        def failed(err: RpcError) -> None:
            fields = err.data.get("fields") if err.code == INVALID_PARAMS else None
            dialog.show_errors(fields or [], "" if fields else err.message, err.hint)

        def done(record: dict[str, Any]) -> None:
            dialog.finish()
            if old and old != record.get("name"):
                self._drop(old)
            self._upsert(record).clear_error()
            if old is None:
                self.probe_host(record["name"])  # first contact: the key question, then the facts

        if old is None:
            self._client.request("hosts.add", {"host": values}, done, failed)
        else:
            self._client.request("hosts.update", {"name": old, "host": values}, done, failed)

    # -- actions ----------------------------------------------------------------------------

    def _on_action(self, name: str, what: str) -> None:
        {"probe": self.probe_host, "prepare": self.prepare_host, "edit": self.edit_host,
         "remove": self.remove_host, "forget_key": self.forget_key}[what](name)

    def probe_host(self, name: str) -> None:
        self._logged_in(name, "Probing the host…", "hosts.probe")

    def prepare_host(self, name: str) -> None:
        self._logged_in(name, "Installing Ember on the host…", "hosts.prepare")

    def _logged_in(self, name: str, busy: str, method: str) -> None:
        """Run ``method`` once the key is trusted and, for password hosts, a password was given."""
        def run(password: str | None) -> None:
            params: dict[str, Any] = {"name": name}
            if password is not None:
                params["password"] = password
            self._request(name, busy, method, params, self._finished, self._recheck_key)

        self._with_trusted_key(name, lambda: self._with_password(name, run))

    def _recheck_key(self, name: str) -> None:
        """After a failed login, read the key's state again (no login): a changed key then shows as such."""
        host_card = self.cards.get(name)
        if host_card is not None and (host_card.record.get("key") or {}).get("status") == "trusted":
            # The engine publishes the record with the key's new state; nothing to do with the reply.
            self._client.request("hosts.check_key", {"name": name}, lambda _reply: None, lambda _err: None)

    def _finished(self, name: str, record: dict[str, Any]) -> None:
        if isinstance(record, dict) and record.get("name"):
            self._upsert(record)
        host_card = self.cards.get(name)
        if host_card is not None:
            host_card.set_idle()
            host_card.clear_error()

    def _request(self, name: str, busy: str, method: str, params: dict[str, Any],
                 then: Callable[[str, Any], None], after_error: Callable[[str], None] | None = None) -> None:
        host_card = self.cards.get(name)
        if host_card is None:
            return
        host_card.set_busy(busy)

        def failed(err: RpcError) -> None:
            current = self.cards.get(name)
            if current is not None:
                current.show_error(err.message, err.hint)
                if after_error is not None and err.code not in (CONNECTION_LOST, NOT_CONNECTED):
                    after_error(name)

        self._client.request(method, params, lambda reply: then(name, reply), failed)

    # -- the host key -----------------------------------------------------------------------

    def _with_trusted_key(self, name: str, then: Callable[[], None]) -> None:
        host_card = self.cards.get(name)
        if host_card is None:
            return
        if (host_card.record.get("key") or {}).get("status") == "trusted":
            then()
            return

        def checked(_name: str, reply: dict[str, Any]) -> None:
            current = self.cards.get(name)
            if current is None:
                return
            current.set_idle()
            status = reply.get("status")
            record = {**current.record, "key": {"status": status, "fingerprint": reply.get("fingerprint")}}
            current.set_record(record)
            if status == "trusted":
                then()
            elif status == "changed":
                current.show_error("The host key has CHANGED: Ember will not log in.",
                                   "Compare the new fingerprint with the one on the host, then Forget key.")
                self._open_key_dialog(record, reply, then)
            else:
                self._open_key_dialog(record, reply, then)

        self._request(name, "Checking the host key…", "hosts.check_key", {"name": name}, checked)

    def _open_key_dialog(self, record: dict[str, Any], check: dict[str, Any], then: Callable[[], None]) -> None:
        if self.key_dialog is not None:
            self.key_dialog.close()
        dialog = KeyDialog(record, check, self)
        name = record["name"]
        dialog.trusted.connect(lambda fingerprint: self._trust(name, fingerprint, then))
        self.key_dialog = dialog
        dialog.open()

    def _trust(self, name: str, fingerprint: str, then: Callable[[], None]) -> None:
        def trusted(_name: str, reply: dict[str, Any]) -> None:
            current = self.cards.get(name)
            if current is None:
                return
            current.set_idle()
            current.set_record({**current.record, "key": {"status": reply.get("status"),
                                                          "fingerprint": reply.get("fingerprint")}})
            if reply.get("status") == "trusted":
                then()

        self._request(name, "Trusting the host key…", "hosts.trust", {"name": name, "fingerprint": fingerprint},
                      trusted)

    def forget_key(self, name: str, ask: bool = True) -> None:
        def forgotten(_name: str, _reply: Any) -> None:
            self._finished(name, {})
            self.reload()  # no event for this one: read the key's new state

        def forget() -> None:
            self._request(name, "Forgetting the host key…", "hosts.forget_key", {"name": name}, forgotten)

        if not ask:
            forget()
            return
        self._confirm("Forget host key",
                      f"Forget the key Ember trusted for {name}?\n\nThe next Probe shows the key the host "
                      "presents then, for you to compare with the host's own fingerprint before trusting it.",
                      forget)

    # -- passwords and confirmations -----------------------------------------------------------

    def _with_password(self, name: str, then: Callable[[str | None], None]) -> None:
        host_card = self.cards.get(name)
        if host_card is None:
            return
        if host_card.record.get("auth") != "password":
            then(None)
            return
        if self.password_dialog is not None:
            self.password_dialog.close()
        dialog = QInputDialog(self)
        dialog.setWindowTitle(f"Password for {name}")
        dialog.setLabelText(f"Password of {host_card.record.get('user') or 'your user'} on "
                            f"{host_card.record.get('address')} (used for this action only, never stored):")
        dialog.setTextEchoMode(QLineEdit.EchoMode.Password)
        dialog.textValueSelected.connect(then)
        self.password_dialog = dialog
        dialog.open()

    def _confirm(self, title: str, text: str, then: Callable[[], None]) -> QMessageBox:
        if self.confirm_dialog is not None:
            self.confirm_dialog.close()
        box = QMessageBox(QMessageBox.Icon.Question, title, text,
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self)
        box.setDefaultButton(QMessageBox.StandardButton.No)
        box.buttonClicked.connect(
            lambda button: then() if box.standardButton(button) == QMessageBox.StandardButton.Yes else None)
        self.confirm_dialog = box
        box.open()
        return box

    def remove_host(self, name: str, ask: bool = True) -> None:
        def remove() -> None:
            self._request(name, "Removing…", "hosts.remove", {"name": name}, lambda n, _r: self._drop(n))

        if not ask:
            remove()
            return
        self._confirm("Remove host", f"Remove the host {name} from Ember?\n\nNothing on the host is changed; "
                                     "runs that used it keep their records.", remove)
