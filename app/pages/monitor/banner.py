"""The Monitor's banner for a run's error, warning and diverged events: message, hint, dismiss.

Errors and divergence (a run stopped because its loss blew up) are red, warnings amber. A newer
event replaces what is shown; a warning never hides an error that is still up, and the error a
diverged run ends with (the same message) leaves the banner's kind "diverged".
"""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QToolButton, QVBoxLayout

from app.connection.engine_client import CONNECTION_LOST, NOT_CONNECTED
from app.state.style import set_state
from app.widgets.common import label
from engine.api.protocol import RpcError

# Local to the banner: the shared stylesheet has no amber/red panel role yet.
STYLE = """
QFrame#runBanner[state="error"] { background: #fdecec; border: 1px solid #f1b3b3; border-radius: 6px; }
QFrame#runBanner[state="warning"] { background: #fff4e0; border: 1px solid #f3cf8f; border-radius: 6px; }
QFrame#runBanner[state="error"] QLabel#bannerMessage { color: #a61e1e; font-weight: 600; }
QFrame#runBanner[state="warning"] QLabel#bannerMessage { color: #8a4b00; font-weight: 600; }
QFrame#runBanner QLabel { background: transparent; }
QFrame#runBanner QToolButton { border: none; background: transparent; font-size: 12pt; }
"""


class EventBanner(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("runBanner")
        self.setStyleSheet(STYLE)
        self.kind = ""
        self.message = label("", wrap=True)
        self.message.setObjectName("bannerMessage")
        self.hint = label("", wrap=True)
        self.close_button = QToolButton(text="✕")
        self.close_button.setToolTip("Dismiss")
        self.close_button.clicked.connect(self.dismiss)
        text = QVBoxLayout()
        text.setSpacing(2)
        text.addWidget(self.message)
        text.addWidget(self.hint)
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 8, 8, 8)
        row.addLayout(text, 1)
        row.addWidget(self.close_button)
        self.hide()

    def show_event(self, kind: str, message: str, hint: str) -> None:
        """``kind``: "error", "warning" or "diverged" (a run stopped because its loss blew up)."""
        if not self.isHidden() and (kind == "warning" and self.kind in ("error", "diverged")
                                    or kind == "error" and self.kind == "diverged"):
            return
        self.kind = kind
        set_state(self, "warning" if kind == "warning" else "error")
        # A divergence ends the run failed: it reads as an error (its message says it diverged).
        self.message.setText(("Warning: " if kind == "warning" else "Error: ") + message)
        self.hint.setText(hint)
        self.hint.setVisible(bool(hint))
        self.show()

    def show_rpc_error(self, err: RpcError) -> None:
        if err.code in (NOT_CONNECTED, CONNECTION_LOST):
            return  # the window's connection banner already says so
        self.show_event("error", err.message, str(err.data.get("hint") or ""))

    def dismiss(self) -> None:
        self.kind = ""
        self.hide()
