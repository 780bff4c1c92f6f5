"""One model's side of a chat: the conversation so far, the answer as it streams, and how fast it came.

``ChatColumn`` keeps the messages (user and assistant turns, what the next request sends and what Export
writes) and shows them in a ``ConversationView``; its AnswerStream brings each answer. After an answer
the view gets a line with its tokens, tokens/s and time to first token; a warning (the prompt was cut to
fit the context) or an error with its hint shows under the view, and the conversation before it stays.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QBrush, QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

from app.pages.playground.stream import AnswerStream
from app.state.style import colour
from app.widgets.common import label, show_text
from engine.api.playground import answer_figures

STOPPED = {"user": "Stop", "stop_sequence": "stop sequence", "eos": "end of answer", "length": "max new tokens"}


def figures_text(done: dict[str, Any]) -> str:
    """'24 tokens · 310.2 tokens/s · first token 0.05 s · 0.1 s in all · ended by max new tokens'."""
    parts = [f"{int(done.get('new_tokens') or 0):,} tokens", f"{float(done.get('tokens_per_s') or 0):.1f} tokens/s"]
    if done.get("ttft_s") is not None:
        parts.append(f"first token {float(done['ttft_s']):.2f} s")
    parts.append(f"{float(done.get('seconds') or 0):.1f} s in all")
    if done.get("stopped") in STOPPED:
        parts.append(f"ended by {STOPPED[done['stopped']]}")
    return " · ".join(parts)


class ConversationView(QTextBrowser):
    """Turns as blocks (a name line, then the text); an answer grows at the end as chunks arrive."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setPlaceholderText("The conversation appears here.")
        self.setMinimumHeight(120)

    def _cursor_at_end(self) -> QTextCursor:
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _block(self, text: str, token: str = "text", bold: bool = False, small: bool = False,
               gap: int = 0) -> None:
        cursor = self._cursor_at_end()
        block = QTextBlockFormat()
        block.setTopMargin(gap)
        char = QTextCharFormat()
        char.setForeground(self.palette().text() if token == "text" else _brush(token))
        if bold:
            char.setFontWeight(QFont.Weight.DemiBold)
        if small:
            char.setFontPointSize(max(7.0, self.font().pointSizeF() - 1))
        if self.document().isEmpty():
            cursor.setBlockFormat(block)
            cursor.setCharFormat(char)
        else:
            cursor.insertBlock(block, char)
        cursor.insertText(text, char)
        self._follow()

    def add_turn(self, who: str, text: str, token: str = "text") -> None:
        self._block(who, "muted", bold=True, gap=10)
        self._block(text, token)

    def start_answer(self, who: str) -> None:
        self._block(who, "accent-text", bold=True, gap=10)
        self._block("")

    def append_text(self, chunk: str) -> None:
        cursor = self._cursor_at_end()
        char = QTextCharFormat()
        char.setForeground(self.palette().text())
        cursor.insertText(chunk, char)
        self._follow()

    def add_note(self, text: str, token: str = "muted") -> None:
        self._block(text, token, small=True, gap=2)

    def _follow(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())


def _brush(token: str) -> QBrush:
    return QBrush(QColor(colour(token)))


class ChatColumn(QWidget):
    busy_changed = Signal(bool)
    answered = Signal(dict)  # an answer ended (done event's figures, text included)

    def __init__(self, client: Any, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.name = name  # "A" or "B": for accessible names
        self.messages: list[dict[str, str]] = []  # user and assistant turns (the system prompt is a setting)
        self.figures: list[dict[str, Any] | None] = []  # each answer's figures, in order (kept with a saved chat)
        self.last_figures: dict[str, Any] = {}
        self.model_title = ""
        self.ref: dict[str, Any] | None = None
        self.stream = AnswerStream(client, self)
        self.stream.loading.connect(self._loading)
        self.stream.text.connect(self._text)
        self.stream.finished.connect(self._finished)
        self.stream.failed.connect(self._failed)
        self._pending: dict[str, str] | None = None  # the user turn being answered

        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(6)
        self.view = ConversationView()
        self.view.setAccessibleName(f"Conversation {name}")
        box.addWidget(self.view, 1)
        self.status = label("", "muted", wrap=True)
        self.status.hide()
        box.addWidget(self.status)
        self.warning = label("", wrap=True)
        self.warning.setStyleSheet(f"color: {colour('warning-text')}; background: {colour('warning-bg')};"
                                   "border-radius: 4px; padding: 4px 8px;")
        self.warning.hide()
        box.addWidget(self.warning)
        self.error = label("", wrap=True)
        self.error.setStyleSheet(f"color: {colour('error-text')}; background: {colour('error-bg')};"
                                 "border-radius: 4px; padding: 4px 8px;")
        self.error.hide()
        box.addWidget(self.error)

    @property
    def busy(self) -> bool:
        return self.stream.busy

    def set_model(self, ref: dict[str, Any] | None, title: str) -> None:
        changed = self.ref is not None and ref != self.ref and bool(self.messages)
        self.ref, self.model_title = ref, title
        if changed:
            self.view.add_note(f"From here on: {title}")

    def ask(self, text: str, settings: dict[str, Any]) -> None:
        """Send ``text`` as the next user turn; the answer streams into the view."""
        if self.ref is None or self.busy:
            return
        show_text(self.error, "")
        show_text(self.warning, "")
        self._pending = {"role": "user", "content": text}
        self.messages.append(self._pending)
        self.view.add_turn("You", text)
        self.view.start_answer(self.model_title or "Model")
        show_text(self.status, "Sending…")
        self.stream.start(self.ref, list(self.messages), settings)
        self.busy_changed.emit(True)

    def stop(self) -> None:
        self.stream.stop()

    def load(self, messages: list[dict[str, str]], figures: list[dict[str, Any] | None]) -> None:
        """Show a saved conversation, as it was when it was saved; the next question continues it."""
        self.clear()
        self.messages = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
        self.figures = list(figures)
        answers = iter(self.figures)
        for message in self.messages:
            if message["role"] == "user":
                self.view.add_turn("You", message["content"])
                continue
            self.view.start_answer(self.model_title or "Model")
            self.view.append_text(message["content"])
            figure = next(answers, None)
            if figure:
                self.view.add_note(figures_text(figure))

    def side(self) -> dict[str, Any] | None:
        """This column's side of a saved chat (engine.api.playground.ConversationSide), None when empty."""
        if not self.messages or self.ref is None:
            return None
        return {"model": self.ref, "title": self.model_title, "messages": list(self.messages),
                "figures": list(self.figures)}

    def clear(self) -> None:
        """A new chat: forget the conversation (an answer still coming is stopped)."""
        was_busy = self.busy
        self.stream.abandon()
        self.messages, self.figures, self._pending, self.last_figures = [], [], None, {}
        self.view.clear()
        for note in (self.status, self.warning, self.error):
            show_text(note, "")
        if was_busy:
            self.busy_changed.emit(False)

    def answer_text(self) -> str:
        """The last answer (the one streaming now, while it streams)."""
        if self.busy:
            return self.stream.text_so_far()
        last = self.messages[-1] if self.messages else {}
        return last.get("content", "") if last.get("role") == "assistant" else ""

    # -- the stream's events -----------------------------------------------------------------

    def _loading(self, model: str) -> None:
        show_text(self.status, f"Loading model {model or self.model_title}…")

    def _text(self, chunk: str) -> None:
        if chunk:
            self.view.append_text(chunk)
            show_text(self.status, "Answering…")

    def _finished(self, done: dict[str, Any]) -> None:
        self._pending = None
        self.messages.append({"role": "assistant", "content": done.get("text", "")})
        self.figures.append(answer_figures(done))
        self.last_figures = done
        self.view.add_note(figures_text(done))  # under the answer, where it stays with the conversation
        show_text(self.status, "")
        warnings = [str(w) for w in done.get("warnings") or [] if w]
        show_text(self.warning, "\n".join(f"Warning: {w}" for w in warnings))
        self.busy_changed.emit(False)
        self.answered.emit(done)

    def _failed(self, message: str, hint: str) -> None:
        # The conversation stays; the unanswered question leaves the history so a retry does not repeat it.
        if self._pending is not None and self.messages and self.messages[-1] is self._pending:
            self.messages.pop()
        self._pending = None
        partial = self.stream.text_so_far()
        self.view.add_note("No answer: see the message below" if not partial else "The answer broke off here",
                           "error-text")
        show_text(self.status, "")
        show_text(self.error, f"{message}" + (f"\n{hint}" if hint else ""))
        self.busy_changed.emit(False)
