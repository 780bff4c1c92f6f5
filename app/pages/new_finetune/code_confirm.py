"""Confirming a model from the user's Python file before the engine runs it.

``jobs.start`` with ``model.code`` answers CONFIRMATION_REQUIRED until the spec carries the
file's sha256 (engine/api/custom_code.py). :func:`start_job` sends jobs.start, and on that answer
shows :class:`CodeConfirmDialog` with what the engine read (path, sha256, size, the first
lines); "Run this code" sends jobs.start again with ``model.code_sha256``, "Cancel" sends
nothing. The GUI never opens, imports or runs the file: it shows only what the engine sent.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from engine.api.protocol import CONFIRMATION_REQUIRED, RpcError

RUN_TEXT = "Run this code"


def _size_text(n: Any) -> str:
    if not isinstance(n, int):
        return "—"
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1024:.1f} KiB ({n:,} bytes)"


class CodeConfirmDialog(QDialog):
    """Path, sha256, size and the start of the file; "Run this code" or "Cancel"."""

    def __init__(self, facts: dict[str, Any], parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("codeConfirmDialog")
        self.setWindowTitle("Run your model code?")
        self.facts = dict(facts)
        layout = QVBoxLayout(self)
        intro = QLabel("This run imports and executes the Python file below in the training process, with "
                       "your permissions. Run it only if you wrote it or trust where it came from. If the "
                       "file changes after you confirm, the run refuses to start.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.path_label = QLabel(str(facts.get("path", "")))
        self.sha_label = QLabel(str(facts.get("sha256", "")))
        self.size_label = QLabel(_size_text(facts.get("size")))
        for widget in (self.path_label, self.sha_label):
            widget.setFont(mono)
            widget.setWordWrap(True)
            widget.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("File", self.path_label)
        form.addRow("SHA-256", self.sha_label)
        form.addRow("Size", self.size_label)
        layout.addLayout(form)
        layout.addWidget(QLabel("First lines of the file:"))
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.preview.setFont(mono)
        self.preview.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.preview.setPlainText(str(facts.get("preview", "")))
        self.preview.setMinimumSize(640, 320)
        layout.addWidget(self.preview, 1)
        self.buttons = QDialogButtonBox()
        self.run_button = self.buttons.addButton(RUN_TEXT, QDialogButtonBox.ButtonRole.AcceptRole)
        self.cancel_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.cancel_button.setDefault(True)  # Enter must not run code by accident
        self.run_button.setAutoDefault(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)


def needs_confirmation(err: Any) -> bool:
    return isinstance(err, RpcError) and err.code == CONFIRMATION_REQUIRED and bool(err.data.get("sha256"))


def with_hash(params: dict[str, Any], sha256: str) -> dict[str, Any]:
    """jobs.start params with ``model.code_sha256`` set to what the user confirmed."""
    out = copy.deepcopy(params)
    out.setdefault("spec", {}).setdefault("model", {})["code_sha256"] = sha256
    return out


def start_job(parent: QWidget, client: Any, params: dict[str, Any], on_started: Callable[[Any], None],
              on_failed: Callable[[Any], None], on_cancelled: Callable[[], None] | None = None) -> None:
    """jobs.start; on CONFIRMATION_REQUIRED ask the user, then start again with the confirmed hash."""

    def failed(err: Any) -> None:
        if not needs_confirmation(err):
            on_failed(err)
            return
        dialog = CodeConfirmDialog(err.data, parent)
        parent._code_confirm_dialog = dialog  # type: ignore[attr-defined] # reachable for tests and kept alive

        def done(result: int) -> None:
            parent._code_confirm_dialog = None  # type: ignore[attr-defined]
            dialog.deleteLater()
            if result != QDialog.DialogCode.Accepted:
                if on_cancelled is not None:
                    on_cancelled()
                else:
                    on_failed(RpcError(CONFIRMATION_REQUIRED, "you did not confirm the model code"))
                return
            # A second CONFIRMATION_REQUIRED (the file changed meanwhile) asks again with the new facts.
            client.request("jobs.start", with_hash(params, str(err.data["sha256"])), on_started, failed)

        dialog.finished.connect(done)
        dialog.open()  # window-modal, without a nested event loop

    client.request("jobs.start", params, on_started, failed)
