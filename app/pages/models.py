"""Models: the built-in models, the Hugging Face models on this machine, downloading more, and the Hub token.

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
    QMenu,
    QMessageBox,
    QPushButton,
    QTableWidgetItem,
    QWidget,
)

from app.connection.engine_process import EngineProcess
from app.state.navigation import Navigator
from app.text import format as fmt
from app.widgets.common import card, label, row_table, scrolling_body, show_text
from app.widgets.hub_picker import HubPicker
from engine.api.job_terms import EXPORT, MODEL_PREPARE, SERVE
from engine.api.prepared_models import PREPARED

COLUMNS = ("Model", "Size", "Last used", "Revisions", "Folder")
BUILTIN_COLUMNS = ("Model", "Task", "State", "Size", "What it is")
# The Export button's menu: a language model's files, each checked by generating (docs/export.md).
EXPORT_CHOICES = (("Merged checkpoint and GGUF (transformers, vLLM, llama.cpp, Ollama)…", ["hf", "gguf"]),
                  ("GGUF only (llama.cpp, Ollama, LM Studio)…", ["gguf"]),
                  ("ONNX for generation (ONNX Runtime GenAI)…", ["onnx_genai"]))
STATE_WORDS = {"ready": "ready", "first-use": "prepared on first use", "missing": "not installed"}
TASK_WORDS = {"causal_lm": "language model", "text_classification": "text classifier",
              "image_classification": "image classifier"}


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
        box.addWidget(label("Built-in models", "h2"))
        box.addWidget(label("Ready offline, no download: fine-tune any of them; chat with, export or serve the "
                            "language models as they are.", "muted", wrap=True))
        self.builtins: list[dict[str, Any]] = []
        self.builtin_table = row_table(BUILTIN_COLUMNS, "Built-in models", stretch=-1)
        self.builtin_table.itemSelectionChanged.connect(self._builtin_selected)
        box.addWidget(self.builtin_table)
        row = QHBoxLayout()
        self.builtin_note = label("", "muted", wrap=True)
        row.addWidget(self.builtin_note, 1)
        self.finetune_button = QPushButton("Fine-tune…")
        self.finetune_button.setToolTip("The New fine-tune wizard with this model")
        self.finetune_button.clicked.connect(self.finetune_builtin)
        self.chat_button = QPushButton("Chat")
        self.chat_button.setToolTip("The Playground with this model")
        self.chat_button.clicked.connect(self.chat_builtin)
        self.export_button = QPushButton("Export")
        self.export_button.setToolTip("An export job of the model as it is, each file checked against it (Runs "
                                      "shows its progress; docs/export.md)")
        menu = QMenu(self.export_button)
        for text, formats in EXPORT_CHOICES:
            menu.addAction(text, lambda formats=formats: self.export_builtin(formats))
        self.export_button.setMenu(menu)
        self.serve_button = QPushButton("Serve")
        self.serve_button.setToolTip("An OpenAI-compatible endpoint for this model on a free local port; the "
                                     "Playground shows its URL and live figures (docs/serve.md)")
        self.serve_button.clicked.connect(self.serve_builtin)
        self.prepare_button = QPushButton("Prepare now")
        self.prepare_button.setToolTip("Write the model's folder now rather than when it is first picked")
        self.prepare_button.clicked.connect(self.prepare_builtin)
        for button in (self.prepare_button, self.finetune_button, self.chat_button, self.export_button,
                       self.serve_button):
            button.setEnabled(False)
            row.addWidget(button)
        box.addLayout(row)
        outer.addWidget(frame)

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

    def _show_builtins(self, rows: list[dict[str, Any]]) -> None:
        self.builtins = rows
        self.builtin_table.setRowCount(len(rows))
        for r, m in enumerate(rows):
            cells = (m["name"], TASK_WORDS.get(m["task"], m["task"]), STATE_WORDS.get(m["state"], m["state"]),
                     fmt.size(m["size_bytes"]) if m.get("size_bytes") else "-", m.get("about") or "")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip("\n".join(part for part in (text, m.get("note") or "", m.get("path") or "") if part))
                self.builtin_table.setItem(r, c, item)
        self._builtin_selected()

    def selected_builtin(self) -> dict[str, Any] | None:
        rows = {i.row() for i in self.builtin_table.selectedItems()}
        return self.builtins[rows.pop()] if len(rows) == 1 else None

    def _builtin_selected(self) -> None:
        m = self.selected_builtin()
        uses = (m or {}).get("uses") or []
        usable = m is not None and m["state"] != "missing"
        self.finetune_button.setEnabled(usable and "fine-tune" in uses)
        self.chat_button.setEnabled(usable and "chat" in uses)
        for button in (self.export_button, self.serve_button):  # language models: as they are, no run needed
            button.setEnabled(usable and "chat" in uses)
        self.prepare_button.setEnabled(m is not None and m["state"] == "first-use" and m["name"] in PREPARED)
        show_text(self.builtin_note, (m.get("note") or "") if m else "")

    def finetune_builtin(self) -> None:
        m = self.selected_builtin()
        if m is not None:
            self.nav.show("new_finetune", start_over=m["task"], preset={"model": {"builtin": m["name"]}})

    def chat_builtin(self) -> None:
        m = self.selected_builtin()
        if m is not None:
            self.nav.try_in_playground(model={"builtin": m["name"]})

    def export_builtin(self, formats: list[str]) -> None:
        m = self.selected_builtin()
        if m is None:
            return
        name = f"{m['name']}-export"
        show_text(self.builtin_note, f"Exporting {m['name']} ({', '.join(formats)}): Runs shows the job.")
        self._client.request("jobs.start", {"kind": EXPORT, "spec": {"model": {"builtin": m["name"]},
                                                                     "formats": formats}, "name": name},
                             lambda job: self.nav.show("runs", job_id=job["id"]), self._show_error)

    def serve_builtin(self) -> None:
        m = self.selected_builtin()
        if m is None:
            return
        ref = {"builtin": m["name"]}
        # The Playground's serve bar finds the running serve job and shows its URL and figures.
        self._client.request("jobs.start", {"kind": SERVE, "spec": {"model": ref, "port": 0}, "name": m["name"]},
                             lambda _job: self.nav.try_in_playground(model=ref), self._show_error)

    def prepare_builtin(self) -> None:
        m = self.selected_builtin()
        if m is None:
            return
        self.prepare_button.setEnabled(False)
        show_text(self.builtin_note, f"Preparing {m['name']}: a job of its own (Runs › Show system jobs).")
        self._client.request("jobs.start", {"kind": MODEL_PREPARE, "spec": {"builtin": m["name"]},
                                            "name": f"prepare {m['name']}"},
                             lambda _job: None, self._show_error)

    def _show_models(self, reply: dict[str, Any]) -> None:
        self._show_builtins(list(reply.get("builtins") or []))
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
