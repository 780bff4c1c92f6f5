"""Pieces every wizard step uses: the step base class, field messages, issue lists,
a "Checking…" indicator and a debounced engine request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.help import DOC_MENTION, doc_label
from app.pages.new_finetune.field_labels import field_message, label_for, on_screen
from app.pages.new_finetune.spec_tools import issue_where
from app.widgets.common import label
from engine.api.protocol import METHOD_NOT_FOUND, RpcError


class FieldMessage(QLabel):
    """Red text under a field; hidden while there is nothing to say."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setProperty("role", "error")
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hide()

    def set_messages(self, messages: list[str]) -> None:
        self.setText("\n".join(messages))
        self.setVisible(bool(messages))


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


def error_text(err: Any) -> str:
    hint = (getattr(err, "data", None) or {}).get("hint") if isinstance(err, RpcError) else None
    return f"{getattr(err, 'message', err)}" + (f" ({hint})" if hint else "")


class Step(QWidget):
    """One page of the wizard: fills itself from a spec, writes its part back, shows errors.

    ``prefixes`` are the spec paths it owns, so validation errors are shown here;
    ``field_messages`` maps a field path to the message under its widget.
    """

    changed = Signal()
    title = ""
    prefixes: tuple[str, ...] = ()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.field_messages: dict[str, FieldMessage] = {}
        self.general_message = FieldMessage()
        self._loading = False

    def message_for(self, path: str) -> FieldMessage:
        widget = self.field_messages.setdefault(path, FieldMessage())
        return widget

    def owns(self, path: str) -> bool:
        return any(path == p or path.startswith(p + ".") for p in self.prefixes)

    def show_errors(self, errors: dict[str, list[str]]) -> None:
        shown: dict[FieldMessage, list[str]] = {m: [] for m in self.field_messages.values()}
        shown[self.general_message] = []
        keys: dict[FieldMessage, list[str]] = {}
        for path, messages in errors.items():
            match = max((p for p in self.field_messages if path == p or path.startswith(p + ".")),
                        key=len, default=None)
            target = self.field_messages[match] if match else self.general_message
            # On screen a field is named by its label ("Batch size must be at least 1"); the job
            # file's key is in the tooltip.
            shown[target].extend(field_message(path, m, self.label_of(path)) if path else on_screen(m)
                                 for m in messages)
            if path:
                keys.setdefault(target, []).append(path)
        for widget, messages in shown.items():
            widget.set_messages(messages)
            paths = keys.get(widget)
            widget.setToolTip(f"In the job file: {', '.join(dict.fromkeys(paths))}" if paths else "")

    def label_of(self, path: str) -> str:
        """The label the form shows ``path`` under (a fine-tune's fields by default)."""
        return label_for(path)

    def emit_changed(self, *_args: Any) -> None:
        if not self._loading:
            self.changed.emit()

    def load(self, spec: dict[str, Any]) -> None:
        self._loading = True
        try:
            self._load(spec)
        finally:
            self._loading = False

    # Subclasses fill these in.
    def _load(self, spec: dict[str, Any]) -> None: ...

    def write(self, spec: dict[str, Any]) -> None: ...

    def blocking(self) -> list[str]:
        """Problems that must be fixed before Launch (what the engine found)."""
        return []

    def busy(self) -> bool:
        return False

    def spec_changed(self, spec: dict[str, Any]) -> None:
        """The whole form changed; re-inspect what this step shows, if it depends on it."""


def with_message(widget: QWidget, message: FieldMessage) -> QWidget:
    """A field and its error text below it, for a form row."""
    box = QWidget()
    column = QVBoxLayout(box)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    column.addWidget(widget)
    column.addWidget(message)
    return box


def step_header(title: str, text: str) -> QWidget:
    box = QWidget()
    column = QVBoxLayout(box)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    column.addWidget(label(title, "h2"))
    column.addWidget(label(text, "muted", wrap=True))
    return box


def show_text(widget: QLabel, text: str) -> None:
    """Set a note's text and hide it while empty, so empty notes leave no gaps."""
    widget.setText(text)
    widget.setVisible(bool(text))
