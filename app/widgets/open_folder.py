"""Open a folder in the desktop's file manager, or show its path with a Copy button where none opens.

``QDesktopServices.openUrl`` returns False when the desktop has no file-manager launcher
(Qt prints "Unable to detect a launcher" on a bare X session); the click would then do
nothing visible, so the path is shown instead, selectable and one click from the clipboard.
"""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QFontDatabase, QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QPushButton, QVBoxLayout, QWidget

from app.widgets.common import label, show_text


class FolderFallback(QWidget):
    """Hidden until a folder could not be opened: a note, the path (selectable) and Copy."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(4)
        self.note = label("", "muted", wrap=True)
        column.addWidget(self.note)
        row = QHBoxLayout()
        self.path_edit = QLineEdit()
        self.path_edit.setReadOnly(True)
        self.path_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.path_edit.setToolTip("The folder's path: select it, or press Copy")
        row.addWidget(self.path_edit, 1)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the folder's path to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        row.addWidget(self.copy_button)
        column.addLayout(row)
        self.copied = label("", "muted")
        self.copied.hide()
        column.addWidget(self.copied)
        self.hide()

    def show_path(self, path: str) -> None:
        self.note.setText("No file manager could be opened on this desktop. The folder is here; copy its path "
                          "into a file manager or a terminal:")
        self.path_edit.setText(path)
        self.path_edit.setCursorPosition(0)
        show_text(self.copied, "")
        self.show()

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.path_edit.text())
        show_text(self.copied, "The path is on the clipboard.")


def open_folder(path: str, fallback: FolderFallback | None = None) -> bool:
    """Ask the desktop to open ``path``; when it cannot, show the path in ``fallback``. True when it opened."""
    if not path:
        return False
    opened = bool(QDesktopServices.openUrl(QUrl.fromLocalFile(path)))
    if fallback is not None:
        if opened:
            fallback.hide()
        else:
            fallback.show_path(path)
    return opened
