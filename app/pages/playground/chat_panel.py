"""The chat: one column, or two side by side, the prompt box with Send and Stop, the JSONL export, and the
chat kept in the engine's store (``chats.save``) after every answer, so Saved chats reopens it.

One prompt goes to every column in use at once, each with its own model and its own conversation
(conversation.py); the settings are the form's (settings_form.py) at the time of sending, and the export
writes those with each conversation.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.pages.playground.conversation import ChatColumn
from app.pages.playground.prompt import PromptBox
from app.pages.playground.settings_form import SettingsForm
from app.widgets.common import label, show_text
from engine.api.playground import conversation_line


class ChatPanel(QWidget):
    state_changed = Signal()  # an answer started or ended, or the prompt changed: buttons may change
    answered = Signal(dict)  # a column's answer ended (the done event's figures)

    def __init__(self, client: Any, settings: SettingsForm, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self._settings = settings
        self._sent_settings: dict[str, Any] = {}  # what the conversation was asked with (exported with it)
        self.side_by_side = False
        self.conversation_id: str | None = None  # made on the first save; New chat starts another

        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(8)
        self.column_a = ChatColumn(client, "A")
        self.column_b = ChatColumn(client, "B")
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.column_a, 1)
        row.addWidget(self.column_b, 1)
        box.addLayout(row, 1)
        for col in (self.column_a, self.column_b):
            col.busy_changed.connect(lambda _busy: self.update_buttons())
            col.answered.connect(self.answered.emit)
            col.answered.connect(self._save_when_idle)

        self.prompt_row = QWidget()
        prompt = QHBoxLayout(self.prompt_row)
        prompt.setContentsMargins(0, 0, 0, 0)
        self.prompt = PromptBox()
        self.prompt.submitted.connect(self.send)
        self.prompt.textChanged.connect(self.update_buttons)
        prompt.addWidget(self.prompt, 1)
        buttons = QVBoxLayout()
        self.send_button = QPushButton("Send")
        self.send_button.setProperty("role", "primary")
        self.send_button.setToolTip("Send the prompt (Enter)")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("End the answer now; what came so far stays")
        self.stop_button.clicked.connect(self.stop)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        prompt.addLayout(buttons)
        box.addWidget(self.prompt_row)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        box.addWidget(self.message)
        client.connected.connect(lambda *_: self.update_buttons())
        client.disconnected.connect(self.update_buttons)
        self.set_side_by_side(False)

    def set_side_by_side(self, on: bool) -> None:
        self.side_by_side = on
        self.column_b.setVisible(on)
        self.update_buttons()

    def columns(self) -> list[ChatColumn]:
        """The columns in use: the first, and the second side by side."""
        return [self.column_a, self.column_b] if self.side_by_side else [self.column_a]

    def busy(self) -> bool:
        return self.column_a.busy or self.column_b.busy

    def has_conversation(self) -> bool:
        return any(col.messages for col in self.columns())

    # -- asking ---------------------------------------------------------------------------------

    def send(self) -> None:
        text = self.prompt.toPlainText().strip()
        if not text or self.busy():
            return
        try:
            settings = self._settings.settings()
        except ValueError as err:
            show_text(self.message, str(err))
            return
        if any(col.ref is None for col in self.columns()):
            show_text(self.message, "Pick a model to talk to first.")
            return
        show_text(self.message, "")
        self._sent_settings = settings
        self.prompt.clear()
        for col in self.columns():
            col.ask(text, settings)
        self.update_buttons()

    def stop(self) -> None:
        for col in (self.column_a, self.column_b):
            col.stop()

    def new_chat(self) -> None:
        for col in (self.column_a, self.column_b):
            col.clear()
        self.conversation_id = None
        show_text(self.message, "")
        self.update_buttons()

    # -- saved chats ------------------------------------------------------------------------------

    def _save_when_idle(self, *_args: Any) -> None:
        if not self.busy():  # side by side: once both answers are in
            self.save()

    def save(self) -> None:
        """Keep the chat in the engine's store (engine.api.playground.Conversation), replacing its last save."""
        sides = [side for side in (col.side() for col in self.columns()) if side]
        if not sides or not self._client.is_connected:
            return
        # The id is made here, before the first reply: two saves in flight still name one chat.
        self.conversation_id = self.conversation_id or f"chat-{secrets.token_hex(6)}"
        params = {"id": self.conversation_id, "sides": sides,
                  "settings": self._sent_settings or self._settings.values()}
        self._client.request("chats.save", params, lambda _reply: None,
                             lambda err: show_text(self.message, f"This chat could not be saved: {err}"))

    def load(self, conversation: dict[str, Any]) -> None:
        """Show a saved chat (chats.get's ``conversation``) in the columns; asking again continues it.
        The page has picked its models and shown its settings first."""
        for col in (self.column_a, self.column_b):
            col.clear()
        show_text(self.message, "")
        self.conversation_id = conversation.get("id")
        self._sent_settings = dict(conversation.get("settings") or {})
        for col, side in zip((self.column_a, self.column_b), conversation.get("sides") or [], strict=False):
            col.load(side.get("messages") or [], side.get("figures") or [])
        self.update_buttons()

    # -- export ---------------------------------------------------------------------------------

    def conversation_lines(self) -> list[str]:
        """One JSON line per column that has a conversation (engine.api.playground.conversation_line)."""
        settings = self._sent_settings or self._settings.values()
        return [conversation_line(col.messages, col.ref, settings, col.model_title)
                for col in self.columns() if col.messages and col.ref]

    def export_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the conversation", "conversation.jsonl",
                                              "JSON Lines (*.jsonl);;All files (*)",
                                              options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self.export(path)

    def export(self, path: str) -> None:
        """Write the conversations to ``path``: one JSON line per conversation (a column)."""
        try:
            Path(path).write_text("".join(line + "\n" for line in self.conversation_lines()), encoding="utf-8")
        except OSError as err:
            show_text(self.message, f"Could not write {path}: {err.strerror or err}. Pick another folder.")
            return
        show_text(self.message, "")

    # -- buttons --------------------------------------------------------------------------------

    def update_buttons(self, *_args: Any) -> None:
        busy = self.busy()
        ready = all(col.ref is not None for col in self.columns())
        self.send_button.setEnabled(self._client.is_connected and not busy and ready
                                    and not self._settings.problem() and bool(self.prompt.toPlainText().strip()))
        self.stop_button.setEnabled(busy)
        self.state_changed.emit()
