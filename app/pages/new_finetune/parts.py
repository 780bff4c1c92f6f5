"""The New fine-tune wizard's own parts: issue lists, a "Checking…" indicator, a debounced
engine request, problem lines. The parts every wizard shares (the step base class, field
messages, headers) are in app/widgets/wizard_parts.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.models.field_labels import field_message, label_for, on_screen
from app.models.spec_tools import issue_where
from app.shell.help import DOC_MENTION, doc_label
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


PREPARE_POLL_MS = 2000  # how often a check waiting on a system.prepare_model job asks again


CHECK_RETRIES = 3  # a check that ran past its limit (a busy machine) is asked again this many times by itself


def retry_after_ms(err: Any, tries: int) -> int | None:
    """When a failed check is worth asking again by itself (it ran out of time), in how many ms; else None."""
    data = getattr(err, "data", None) or {}
    after = data.get("retry_after_s") if isinstance(data, dict) else None
    return int(float(after) * 1000) if isinstance(after, int | float) and tries < CHECK_RETRIES else None


def asked_again(err: Any, tries: int, status: Busy, request: DebouncedRequest) -> bool:
    """A check that ran out of time (a busy machine): say why on ``status`` and ask again by itself; False when
    it is not worth asking again (another error, or CHECK_RETRIES tries already)."""
    after = retry_after_ms(err, tries)
    if after is None:
        return False
    status.start(f"{getattr(err, 'message', err)}. Checking again")
    request.again_in(after)
    return True


def preparing_wait_ms(err: Any) -> int | None:
    """In how many ms to ask again when an answer waits on a built-in model being prepared; else None."""
    data = getattr(err, "data", None) or {}
    if not isinstance(data, dict) or not data.get("preparing"):
        return None
    return int(float(data.get("retry_after_s") or PREPARE_POLL_MS / 1000) * 1000)


def preparing_text(preparing: dict[str, Any]) -> str:
    """One line for a built-in model being prepared: what, and how far ("de-quantizing the weights, 20%")."""
    name, size = preparing.get("model", "the model"), preparing.get("bytes") or 0
    if preparing.get("state") == "queued":
        where = "waiting in the queue"
    else:
        stage, done = preparing.get("stage"), preparing.get("fraction")
        where = f"{stage}, {done:.0%}" if stage and isinstance(done, int | float) else (stage or "starting")
    return f"Preparing the built-in model {name} once (about {size / 1e6:,.0f} MB): {where}"


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
        self._delay_ms = delay_ms
        self._timer = QTimer(owner, singleShot=True, interval=delay_ms)
        self._timer.timeout.connect(self._send)

    def trigger(self) -> None:
        self._generation += 1
        self.pending = True
        self._timer.start(self._delay_ms)

    def again_in(self, ms: int) -> None:
        """Ask again in ``ms`` without being pending meanwhile: the answer said to wait for a job (a built-in
        model being prepared), and nothing should wait on this request until it is sent."""
        self._generation += 1
        self._timer.start(ms)

    def cancel(self) -> None:
        self._generation += 1
        self._timer.stop()
        self.pending = False

    def _send(self) -> None:
        self.pending = True
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
