"""Models: the Hugging Face models on this machine, downloading more, and the Hub access token.

The table is ``models.list`` (the Hugging Face cache, the one every Hugging Face library reads),
refreshed when the connection opens, after a download and after a delete. Download is the shared
Hub picker (search as you type, progress with bytes, speed and ETA). The token is typed into a
password field and sent once with ``hub.login``; the page never shows or keeps it (docs/hub.md).
Dialogs open with open() and are kept in attributes (``token_dialog``, ``confirm_dialog``) so tests
can answer them.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTableWidgetItem,
    QWidget,
)

from app import format as fmt
from app.engine_process import EngineProcess
from app.models.navigation import Navigator
from app.widgets.common import card, label, row_table, scrolling_body, show_text
from app.widgets.hub_picker import HubPicker

COLUMNS = ("Model", "Size", "Last used", "Revisions", "Folder")


class ModelsPage(QWidget):
    title = "Models"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)
        self._client = engine.client
        self.models: list[dict[str, Any]] = []
        self.token_dialog: QInputDialog | None = None
        self.confirm_dialog: QMessageBox | None = None

        outer = scrolling_body(self, spacing=14)
        header = QHBoxLayout()
        header.addWidget(label("Models", "h1"), 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Read the Hugging Face cache again")
        self.refresh_button.clicked.connect(self.reload)
        header.addWidget(self.refresh_button)
        outer.addLayout(header)
        self.intro = label("Models from the Hugging Face Hub, kept in the Hugging Face cache. A fine-tune uses a "
                           "cached model without the network (New fine-tune › Model › Hugging Face Hub), and "
                           "downloads one that is missing as it starts.", "muted", wrap=True)
        outer.addWidget(self.intro)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        frame, box = card()
        box.addWidget(label("Download a model", "h2"))
        self.picker = HubPicker(self._client)
        self.picker.downloaded.connect(lambda _result: self.reload())
        box.addWidget(self.picker)
        outer.addWidget(frame)

        frame, box = card()
        box.addWidget(label("On this machine", "h2"))
        self.cache_note = label("", "muted", wrap=True)
        box.addWidget(self.cache_note)
        self.table = row_table(COLUMNS, "Cached models", stretch=-1)  # the folder takes the rest
        self.table.itemSelectionChanged.connect(self._selection_changed)
        box.addWidget(self.table)
        row = QHBoxLayout()
        row.addStretch(1)
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Delete the selected model from the Hugging Face cache (asks first)")
        self.delete_button.setEnabled(False)
        self.delete_button.clicked.connect(self.ask_delete)
        row.addWidget(self.delete_button)
        box.addLayout(row)
        outer.addWidget(frame)

        frame, box = card()
        box.addWidget(label("Hugging Face access token", "h2"))
        self.token_status = label("", "", wrap=True)
        box.addWidget(self.token_status)
        row = QHBoxLayout()
        self.token_button = QPushButton("Save token…")
        self.token_button.setToolTip("Gated models (Llama, Gemma, …) need a token from an account that was "
                                     "granted access; it is saved where huggingface_hub reads it")
        self.token_button.clicked.connect(self.ask_token)
        self.forget_button = QPushButton("Forget token")
        self.forget_button.setToolTip("Delete the saved token file")
        self.forget_button.clicked.connect(self.forget_token)
        row.addWidget(self.token_button)
        row.addWidget(self.forget_button)
        row.addStretch(1)
        box.addLayout(row)
        outer.addWidget(frame)
        outer.addStretch(1)

        self._client.connected.connect(lambda _hello=None: self.reload())
        if self._client.is_connected:
            self.reload()

    # -- the cache ----------------------------------------------------------------------------

    def reload(self) -> None:
        self._client.request("models.list", {}, self._show_models, self._show_error)
        self._client.request("hub.status", {}, self._show_status, self._show_error)

    def _show_error(self, err: Any) -> None:
        hint = getattr(err, "hint", "")
        show_text(self.message, f"{getattr(err, 'message', err)}" + (f" ({hint})" if hint else ""))

    def _show_models(self, reply: dict[str, Any]) -> None:
        self.message.hide()
        self.models = list(reply.get("models") or [])
        self.table.setRowCount(len(self.models))
        for r, m in enumerate(self.models):
            revisions = ", ".join(rev["commit"][:10] + (f" ({', '.join(rev['refs'])})" if rev["refs"] else "")
                                  for rev in m.get("revisions") or []) or "none complete"
            size = fmt.size(m.get("size_bytes"))
            if m.get("partial_bytes"):
                size += f" (+{fmt.size(m['partial_bytes'])} partial)"
            cells = (m["repo_id"], size, fmt.timestamp(m.get("last_used")), revisions, m.get("path") or "")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(r, c, item)
        where = reply.get("cache_dir") or ""
        self.cache_note.setText(f"In {where}." if self.models else
                                f"No model in the Hugging Face cache ({where}) yet: download one above.")
        self._selection_changed()

    def selected(self) -> dict[str, Any] | None:
        rows = {i.row() for i in self.table.selectedItems()}
        return self.models[rows.pop()] if len(rows) == 1 else None

    def _selection_changed(self) -> None:
        self.delete_button.setEnabled(self.selected() is not None and self._client.is_connected)

    def ask_delete(self) -> None:
        model = self.selected()
        if model is None:
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Delete model",
                          f"Delete {model['repo_id']} ({fmt.size(model.get('size_bytes'))}) from the Hugging Face "
                          "cache? A fine-tune that uses it downloads it again.",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self)
        box.accepted.connect(lambda: self.delete(model["repo_id"]))
        self.confirm_dialog = box
        box.open()

    def delete(self, repo_id: str) -> None:
        self._client.request("models.delete", {"repo_id": repo_id}, lambda _r: self.reload(), self._show_error)

    # -- the token ----------------------------------------------------------------------------

    def _show_status(self, st: dict[str, Any]) -> None:
        token = st.get("token") or {}
        source = token.get("source")
        text = {"file": f"A token is saved ({token.get('path')}).",
                "environment": "A token comes from the HF_TOKEN environment variable."}.get(
            source or "", "No token saved: public models download without one; gated ones need it.")
        where = f" Models come from {st.get('endpoint')}" + (" (offline: HF_HUB_OFFLINE is set)."
                                                               if st.get("offline") else ".")
        self.token_status.setText(text + where)
        self.forget_button.setEnabled(source == "file")

    def ask_token(self) -> None:
        dialog = QInputDialog(self)
        dialog.setWindowTitle("Hugging Face access token")
        dialog.setLabelText("Paste an access token (Hugging Face › Settings › Access Tokens). It is saved "
                            "where huggingface_hub reads it, readable only by you.")
        dialog.setTextEchoMode(QLineEdit.EchoMode.Password)
        dialog.textValueSelected.connect(self.save_token)
        self.token_dialog = dialog
        dialog.open()

    def save_token(self, token: str) -> None:
        if self.token_dialog is not None:
            self.token_dialog.setTextValue("")  # the page keeps no copy
        if token.strip():
            self._client.request("hub.login", {"token": token}, self._show_status, self._show_error)

    def forget_token(self) -> None:
        self._client.request("hub.logout", {}, self._show_status, self._show_error)
