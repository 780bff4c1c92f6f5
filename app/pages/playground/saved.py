"""Saved chats: the Playground's conversations kept by the engine (``chats.list``), newest first,
to open again (the models, the settings and every turn come back, and asking continues the chat) or delete.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QMessageBox,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.text import format as fmt
from app.widgets.common import label, row_table, show_text

COLUMNS = ("Chat", "Models", "Questions", "Saved")
LIST_LIMIT = 500


class SavedChats(QDialog):
    opened = Signal(dict)  # chats.get's reply: the page shows it

    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Saved chats")
        self.resize(760, 420)
        self._client = client
        self.rows: list[dict[str, Any]] = []
        box = QVBoxLayout(self)
        box.addWidget(label("Every Playground chat is kept after each answer. Open one to read it again or go "
                            "on asking; ember chats lists them in a terminal.", "muted", wrap=True))
        self.table = row_table(COLUMNS, "Saved chats")
        self.table.itemSelectionChanged.connect(self._update)
        self.table.cellDoubleClicked.connect(lambda *_: self.open_selected())
        box.addWidget(self.table, 1)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        box.addWidget(self.message)
        buttons = QDialogButtonBox()
        self.open_button = QPushButton("Open")
        self.open_button.setProperty("role", "primary")
        self.open_button.clicked.connect(self.open_selected)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.clicked.connect(self.ask_delete)
        buttons.addButton(self.open_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.delete_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(QDialogButtonBox.StandardButton.Close).clicked.connect(self.reject)
        box.addWidget(buttons)
        self.confirm_dialog: QMessageBox | None = None
        self._update()

    def reload(self) -> None:
        self._client.request("chats.list", {"limit": LIST_LIMIT}, self._fill, self._show_error)

    def _fill(self, reply: dict[str, Any]) -> None:
        self.rows = list(reply.get("chats") or [])
        self.table.setRowCount(len(self.rows))
        for i, row in enumerate(self.rows):
            cells = (row.get("title") or "", "  |  ".join(row.get("models") or []), str(row.get("questions", 0)),
                     fmt.timestamp(row.get("updated_at")))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(i, col, item)
        if self.rows:
            self.table.selectRow(0)
        show_text(self.message, "" if self.rows else "No saved chats yet: ask a model something first.")
        self._update()

    def selected(self) -> dict[str, Any] | None:
        rows = {i.row() for i in self.table.selectedItems()}
        return self.rows[rows.pop()] if len(rows) == 1 else None

    def _update(self) -> None:
        ok = self.selected() is not None and self._client.is_connected
        self.open_button.setEnabled(ok)
        self.delete_button.setEnabled(ok)

    def open_selected(self) -> None:
        row = self.selected()
        if row is None:
            return

        def got(reply: dict[str, Any]) -> None:
            self.opened.emit(reply)
            self.accept()

        self._client.request("chats.get", {"id": row["id"]}, got, self._show_error)

    def ask_delete(self) -> None:
        row = self.selected()
        if row is None:
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Delete chat",
                          f"Delete the saved chat \u201c{row.get('title')}\u201d? It cannot be brought back.",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self)
        box.accepted.connect(lambda: self.delete(row["id"]))
        self.confirm_dialog = box
        box.open()

    def delete(self, conv_id: str) -> None:
        self._client.request("chats.delete", {"id": conv_id}, lambda _r: self.reload(), self._show_error)

    def _show_error(self, err: Any) -> None:
        show_text(self.message, str(err))
