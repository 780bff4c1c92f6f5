"""The Data step's chat template card (causal LM): which template turns a conversation into text, whether
the model has one of its own, and the first training row as the model will read it, with the part it
learns highlighted. Filled from data.inspect (``model_chat_template``, ``chat_template_used``,
``rendered_example``)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QComboBox, QFormLayout, QPlainTextEdit, QVBoxLayout, QWidget

from app.state.style import colour
from app.text.glossary import field_tooltip
from app.widgets.common import card, label
from app.widgets.wizard_parts import show_text

# data.chat_template: (value, what the drop-down says)
CHOICES = (
    ("auto", "The model's own (auto)"),
    ("chatml", "ChatML (Qwen, SmolLM)"),
    ("llama3", "Llama 3"),
    ("plain", "Plain (### User: / ### Assistant:)"),
)
USED_WORDS = {"model": "the model's own template", "chatml": "ChatML", "llama3": "Llama 3", "plain": "plain"}
NO_TEMPLATE_NOTE = ("This model has no chat template: plain is used (### User: / ### Assistant: headers). "
                    "Pick ChatML or Llama 3 to train it in a format other tools expect of a chat model; "
                    "the Playground then uses the same template for the tuned run.")
VIEW_LINES = 9


class ChatTemplateBox(QWidget):
    """A card: the template drop-down, a note about the model's own template, and the rendered example."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.frame, box = card()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.frame)
        box.addWidget(label("Chat template", "h2"))
        box.addWidget(label("How each conversation becomes the text the model reads and learns to continue. "
                            "Training, the evaluation's answers and the Playground use the same one.",
                            "muted", wrap=True))
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.combo = QComboBox()
        for value, text in CHOICES:
            self.combo.addItem(text, value)
        self.combo.setAccessibleName("Chat template")
        self.combo.setToolTip(field_tooltip("chat template", "data.chat_template",
                                            "auto: the model's own, plain when it has none."))
        form.addRow(label("Template"), self.combo)
        box.addLayout(form)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        box.addWidget(self.note)
        self.example_title = label("", "muted", wrap=True)
        box.addWidget(self.example_title)
        self.view = QPlainTextEdit()
        self.view.setObjectName("log")  # the stylesheet's monospace look
        self.view.setReadOnly(True)
        self.view.setAccessibleName("Rendered example")
        self.view.setToolTip("The first row of the training file as the model reads it; the highlighted part "
                             "is what it learns to write (the loss covers only that).")
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.view.setFixedHeight(VIEW_LINES * self.view.fontMetrics().lineSpacing() + 16)
        box.addWidget(self.view)
        self.learned: list[str] = []  # the highlighted texts, as shown
        self.combo.currentIndexChanged.connect(lambda _i: self.changed.emit())
        self.clear()

    def value(self) -> str:
        return str(self.combo.currentData() or "auto")

    def set_value(self, value: str | None) -> None:
        index = self.combo.findData(value or "auto")
        self.combo.setCurrentIndex(max(index, 0))

    def clear(self) -> None:
        """While a new inspection runs."""
        self.view.clear()
        self.learned = []
        self.example_title.setText("The first training row, rendered: waiting for the data check…")
        show_text(self.note, "")

    def show_reply(self, reply: dict[str, Any]) -> None:
        """data.inspect's answer for a causal LM (preference rows come without an example)."""
        with_example = "model_chat_template" in reply
        self.example_title.setVisible(with_example)
        self.view.setVisible(with_example)
        own = reply.get("model_chat_template")
        used = reply.get("chat_template_used")
        if own is False and self.value() == "auto":
            show_text(self.note, NO_TEMPLATE_NOTE)
        elif own is False:
            show_text(self.note, f"This model has no chat template; {USED_WORDS.get(str(used), used)} is used.")
        elif own and self.value() != "auto":
            show_text(self.note, f"{USED_WORDS.get(str(used), used)} replaces the model's own chat template.")
        else:
            show_text(self.note, "")
        example = reply.get("rendered_example")
        if reply.get("example_error"):
            self._show_text(f"Cannot render an example: {reply['example_error']}", [])
            self.example_title.setText("The first training row, rendered:")
        elif own is None:
            self._show_text("", [])
            self.example_title.setText("The rendered example appears once the model is here (downloaded, or "
                                       "prepared by its first use).")
        elif example:
            more = " (cut)" if example.get("cut") else ""
            self.example_title.setText(f"Line {example.get('line')} of the training file as the model reads it"
                                       f"{more}, with {USED_WORDS.get(str(used), used)}; highlighted: what it "
                                       "learns to write.")
            self._show_text(str(example.get("text") or ""), list(example.get("learned") or []))
        else:
            self._show_text("", [])
            self.example_title.setText("No training row to render.")

    def _show_text(self, text: str, spans: list[list[int]]) -> None:
        self.view.setPlainText(text)
        self.learned = []
        highlight = QTextCharFormat()
        highlight.setBackground(_color("accent-soft"))
        highlight.setForeground(_color("accent-text"))
        highlight.setFontWeight(700)
        for start, end in spans:
            start, end = max(0, int(start)), min(len(text), int(end))
            if end <= start:
                continue
            cursor = QTextCursor(self.view.document())
            cursor.setPosition(_qt_position(text, start))
            cursor.setPosition(_qt_position(text, end), QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(highlight)
            self.learned.append(text[start:end])


def _qt_position(text: str, index: int) -> int:
    """Qt counts UTF-16 units; Python counts characters (an emoji is one here, two there)."""
    return len(text[:index].encode("utf-16-le")) // 2


def _color(token: str) -> Any:
    from PySide6.QtGui import QColor

    return QColor(colour(token))
