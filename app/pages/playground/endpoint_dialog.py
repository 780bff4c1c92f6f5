"""Browse › Served endpoint: the URL of an OpenAI-compatible server and, when it wants one, its API key file.

The engine streams from that server itself (engine/daemon/endpoints.py), so a model served here, on an SSH
host, or by vLLM or llama.cpp's server on another machine is tried in the Playground like a local one.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QWidget,
)

from app.pages.playground.choices import Choice, endpoint_choice
from app.state.prefs import prefs
from app.widgets.common import label


def url_problem(url: str) -> str:
    """'' when ``url`` looks like a server's base URL, else what is wrong."""
    url = url.strip()
    if not url.startswith(("http://", "https://")):
        return "Start the URL with http:// or https://, e.g. http://127.0.0.1:8000/v1"
    if any(ch.isspace() for ch in url) or len(url) < 10:
        return "The URL has spaces in it or is cut short"
    return ""


class EndpointDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, served: list[tuple[str, str]] | None = None):
        """``served``: (URL, API key file) of the endpoints being served now, the first filled in."""
        super().__init__(parent)
        self.setWindowTitle("Chat with a served endpoint")
        form = QFormLayout(self)
        form.addRow(label("The base URL of an OpenAI-compatible server: an Ember serve job (its URL is on the "
                          "serve bar), vLLM, or llama.cpp's server.", "muted", wrap=True))
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://127.0.0.1:8000/v1")
        self.url.setAccessibleName("Endpoint URL")
        form.addRow("URL", self.url)
        key_row = QHBoxLayout()
        self.key_file = QLineEdit()
        self.key_file.setPlaceholderText("none (a server on loopback needs no key)")
        self.key_file.setAccessibleName("API key file")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_key)
        key_row.addWidget(self.key_file, 1)
        key_row.addWidget(browse)
        form.addRow("API key file", key_row)
        self.problem = label("", "error", wrap=True)
        form.addRow(self.problem)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        if served:
            url, key_file = served[0]
            self.url.setText(url)
            self.key_file.setText(key_file)
            others = ", ".join(u for u, _k in served[1:])
            if others:
                form.insertRow(1, label(f"Also served now: {others}", "muted", wrap=True))

    def _browse_key(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The server's API key file", "",
                                              options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self.key_file.setText(path)

    def _accept(self) -> None:
        problem = url_problem(self.url.text()) or self._key()[1]
        self.problem.setText(problem)
        if not problem:
            self.accept()

    def _key(self) -> tuple[str, str]:
        """(the key, a problem): a team engine reads no file a client names, so the key file is read here."""
        path = self.key_file.text().strip()
        if not path or not prefs().get("remote_engine"):
            return "", ""
        try:
            key = Path(path).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            return "", f"Cannot read the key file: {getattr(exc, 'strerror', None) or exc}"
        if not key or len(key) > 4096 or any(not 0x21 <= ord(c) <= 0x7e for c in key):
            return "", "The key file does not hold a key (one line of printable characters)"
        return key, ""

    def choice(self) -> Choice | None:
        key, problem = self._key()
        if url_problem(self.url.text()) or problem:
            return None
        return endpoint_choice(self.url.text(), "" if key else self.key_file.text().strip(), key)
