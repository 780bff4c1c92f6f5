"""Parts every wizard's steps use (New fine-tune, Compress, Export): the step base class,
the message under a field, a step's header, error text of a refused request."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.models.field_labels import field_message, label_for, on_screen
from app.widgets.common import label
from engine.api.protocol import RpcError


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


def show_builtins(radio: Any, combo: Any, choices: tuple[str, ...]) -> None:
    """A step's Built-in radio and its combo for ``choices``: the name on the radio when there is one, else
    the combo (refilled only when the choices change, so the user's pick stays)."""
    radio.setText("Built-in" if len(choices) > 1 else f"Built-in: {choices[0]}")
    if [combo.itemText(i) for i in range(combo.count())] != list(choices):
        combo.blockSignals(True)
        combo.clear()
        combo.addItems(list(choices))
        combo.blockSignals(False)
    combo.setVisible(len(choices) > 1)


def indented(widget: QWidget, width: int = 280) -> QWidget:
    """A control under a radio button, indented like the button's text and no wider than ``width``."""
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(24, 0, 0, 0)
    widget.setMinimumWidth(width)
    row.addWidget(widget)
    row.addStretch(1)
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
