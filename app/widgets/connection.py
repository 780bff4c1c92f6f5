"""How the window shows the engine connection: a banner on top, a dot below.

Both read the EngineProcess and redraw on its ``state_changed``; neither
changes the connection except through the banner's one button.
"""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.connection import engine_process as ep
from app.state.style import set_role, set_state


def banner_text(engine: ep.EngineProcess) -> str:
    if engine.state == ep.STARTING:
        return "Starting the engine…"
    if engine.state == ep.RECONNECTING:
        return f"Engine connection lost — reconnecting (attempt {max(engine.attempt, 1)})…"
    if engine.state == ep.STOPPED:
        if engine.start_failure:
            return f"Engine stopped: {engine.start_failure}"
        reason = f" ({engine.stop_reason})" if engine.stop_reason else ""
        return f"Engine stopped{reason}. Running jobs carry on; start the engine to follow them."

    return ""


class ConnectionBanner(QFrame):
    """A strip across the top of the window, visible only while not connected."""

    def __init__(self, engine: ep.EngineProcess, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("banner")
        self._engine = engine
        layout = QHBoxLayout(self)
        layout.setContentsMargins(16, 8, 16, 8)
        self.message = QLabel()
        self.message.setWordWrap(True)
        layout.addWidget(self.message, 1)
        self.start_button = QPushButton("Start engine")
        set_role(self.start_button, "primary")
        self.start_button.setToolTip("Start the background engine again and reconnect")
        self.start_button.clicked.connect(engine.start)
        layout.addWidget(self.start_button)
        engine.state_changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        state = self._engine.state
        self.setVisible(state != ep.CONNECTED)
        set_state(self, state)
        self.message.setText(banner_text(self._engine))
        self.start_button.setVisible(state == ep.STOPPED)


class EngineStatus(QWidget):
    """Status-bar item: a coloured dot, the state in words, and the engine version."""

    def __init__(self, engine: ep.EngineProcess, parent: QWidget | None = None):
        super().__init__(parent)
        self._engine = engine
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.setSpacing(6)
        self.dot = QLabel()
        self.dot.setObjectName("stateDot")
        self.text = QLabel()
        self.version = QLabel()
        layout.addWidget(self.dot)
        layout.addWidget(self.text)
        layout.addWidget(self.version)
        engine.state_changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        state = self._engine.state
        set_state(self.dot, state)
        self.dot.setToolTip(f"Engine {state}")
        self.text.setText(f"Engine {state}")
        parts = []
        if self._engine.version:
            parts.append(f"v{self._engine.version}")
        if state == ep.CONNECTED and self._engine.engine_pid:
            parts.append(f"pid {self._engine.engine_pid}")
        self.version.setText("  ·  ".join(parts))
