"""The New fine-tune wizard's own parts: issue lists, a "Checking…" indicator, a debounced
engine request, problem lines. The parts every wizard shares (the step base class, field
messages, headers) are in app/widgets/wizard_parts.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.help import DOC_MENTION, doc_label
from app.models.field_labels import field_message, label_for, on_screen
from app.models.spec_tools import issue_where
from app.widgets.common import label
from engine.api.protocol import METHOD_NOT_FOUND, RpcError


class IssueList(QWidget):
    """Input issues as the engine reports them: message, file:line, and the fix."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._box = QVBoxLayout(self)
        self._box.setContentsMargins(0, 0, 0, 0)
        self._box.setSpacing(4)
        self.issues: list[dict[str, Any]] = []
        self.hide()

    def set_issues(self, issues: list[dict[str, Any]]) -> None:
        while self._box.count():
            self._box.takeAt(0).widget().deleteLater()
        self.issues = list(issues)
        for issue in self.issues[:20]:
            where = issue_where(issue)
            message = on_screen(str(issue.get("message", "")))
            text = f"{where}: {message}" if where else message
            if DOC_MENTION.search(text):  # "see docs/x.md" opens the manual there
                line = doc_label(text, "error")
            else:
                line = label(text, "error", wrap=True)
                line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self._box.addWidget(line)
            if issue.get("hint"):
                hint = f"Fix: {on_screen(issue['hint'])}"
                fix = doc_label(hint, "muted") if DOC_MENTION.search(hint) else label(hint, "muted", wrap=True)
                fix.setToolTip(f"In the job file: {issue['hint']}")  # the keys, for whoever edits the YAML
                self._box.addWidget(fix)
        if len(self.issues) > 20:
            self._box.addWidget(label(f"…and {len(self.issues) - 20} more.", "error"))
        self.setVisible(bool(self.issues))

    def text(self) -> str:
        return "\n".join(w.text() for w in self.findChildren(QLabel))


class Busy(QLabel):
    """A muted "Checking…" whose dots move, so a slow first inspection looks alive."""

    def __init__(self, text: str = "Checking", parent: QWidget | None = None):
        super().__init__(parent)
        self.setProperty("role", "muted")
        self._text = text
        self._dots = 0
        self._timer = QTimer(self, interval=350)
        self._timer.timeout.connect(self._tick)
        self.hide()

    def start(self, text: str | None = None) -> None:
        self._text = text or self._text
        self._dots = 0
        self._tick()
        self._timer.start()
        self.show()

    def stop(self) -> None:
        self._timer.stop()
        self.hide()

    def _tick(self) -> None:
        self._dots = self._dots % 3 + 1
        self.setText(self._text + "." * self._dots)


class DebouncedRequest:
    """Send ``method`` a little after the last change; only the newest reply is shown.

    ``params()`` builds the request when the timer fires, so it always sees the
    current form. ``on_missing`` runs instead of ``on_error`` when the engine does
    not know the method (an older engine).
    """

    def __init__(self, owner: QWidget, client: Any, method: str, delay_ms: int,
                 params: Callable[[], dict[str, Any] | None],
                 on_reply: Callable[[Any], None], on_error: Callable[[RpcError], None],
                 on_missing: Callable[[RpcError], None] | None = None):
        self._client = client
        self.method = method
        self._params = params
        self._on_reply, self._on_error, self._on_missing = on_reply, on_error, on_missing
        self._generation = 0
        self.pending = False  # waiting on the timer or the reply
        self._timer = QTimer(owner, singleShot=True, interval=delay_ms)
        self._timer.timeout.connect(self._send)

    def trigger(self) -> None:
        self._generation += 1
        self.pending = True
        self._timer.start()

    def cancel(self) -> None:
        self._generation += 1
        self._timer.stop()
        self.pending = False

    def _send(self) -> None:
        params = self._params()
        if params is None:
            self.pending = False
            return
        generation = self._generation
        self._client.request(self.method, params,
                             lambda reply: self._done(generation, self._on_reply, reply),
                             lambda err: self._done(generation, self._failed, err))

    def _failed(self, err: RpcError) -> None:
        if err.code == METHOD_NOT_FOUND and self._on_missing is not None:
            self._on_missing(err)
        else:
            self._on_error(err)

    def _done(self, generation: int, fn: Callable[[Any], None], value: Any) -> None:
        if generation != self._generation:
            return  # the form changed since: a newer request is on its way
        self.pending = False
        fn(value)


def problem_line(path: str, message: str) -> str:
    """One of the problems the status line and Review list: "Batch size must be at least 1"."""
    text = field_message(path, message) if path else on_screen(message)
    return text if path and text.startswith(label_for(path)) else f"{label_for(path) or 'Spec'}: {text}"
