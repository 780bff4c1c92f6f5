"""A job's log (stdout.log): searchable, and following the end like ``tail -f``.

The owner hands it the whole tail on each poll (``set_lines``); it only
touches the text when something changed. The search box highlights every
match (case-insensitive); "Only matches" hides the other lines. Follow keeps
the view at the last line; scrolling up turns it off, scrolling back to the
end turns it on again.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import label

MAX_HIGHLIGHTS = 2000  # beyond this the count is still right, only the colouring stops


class LogPane(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._lines: list[str] = []
        self.view = QPlainTextEdit()
        self.view.setObjectName("log")
        self.view.setReadOnly(True)
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setPlaceholderText("Nothing in this run's log yet.")
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search the log")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._render)
        self.only_matches = QCheckBox("Only matches")
        self.only_matches.toggled.connect(self._render)
        self.follow = QCheckBox("Follow")
        self.follow.setChecked(True)
        self.follow.setToolTip("Keep the last line in view as the log grows")
        self.follow.toggled.connect(lambda on: on and self._scroll_to_end())
        self.matches = label("", "muted")
        self.view.verticalScrollBar().valueChanged.connect(self._on_scrolled)
        self._rendering = False

        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(label("Log", "h2"))
        bar.addWidget(self.search, 1)
        bar.addWidget(self.matches)
        bar.addWidget(self.only_matches)
        bar.addWidget(self.follow)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)

    def set_lines(self, lines: list[str]) -> None:
        if lines == self._lines:
            return
        self._lines = list(lines)
        self._render()

    def clear(self) -> None:
        self._lines = []
        self._render()

    def text(self) -> str:
        return self.view.toPlainText()

    def match_count(self) -> int:
        needle = self.search.text().lower()
        return sum(line.lower().count(needle) for line in self._lines) if needle else 0

    def _render(self) -> None:
        needle = self.search.text().lower()
        shown = self._lines
        if needle and self.only_matches.isChecked():
            shown = [line for line in self._lines if needle in line.lower()]
        text = "\n".join(shown)
        bar = self.view.verticalScrollBar()
        keep = bar.value()
        self._rendering = True
        if text != self.view.toPlainText():
            self.view.setPlainText(text)
        self._highlight(needle)
        if self.follow.isChecked():
            self._scroll_to_end()
        else:
            bar.setValue(keep)
        self._rendering = False
        count = self.match_count()
        self.matches.setText(f"{count} match{'es' if count != 1 else ''}" if needle else "")

    def _highlight(self, needle: str) -> None:
        selections = []
        if needle:
            fmt = QTextCharFormat()
            fmt.setBackground(QColor("#ffe066"))
            doc = self.view.document()
            cursor = QTextCursor(doc)
            while len(selections) < MAX_HIGHLIGHTS:
                cursor = doc.find(needle, cursor, QTextDocument.FindFlag(0))
                if cursor.isNull():
                    break
                selection = QTextEdit.ExtraSelection()
                selection.cursor = cursor
                selection.format = fmt
                selections.append(selection)
        self.view.setExtraSelections(selections)

    def _scroll_to_end(self) -> None:
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())
        self.view.horizontalScrollBar().setValue(0)

    def _on_scrolled(self, value: int) -> None:
        if self._rendering:
            return
        at_end = value >= self.view.verticalScrollBar().maximum() - 2
        if at_end != self.follow.isChecked():
            self.follow.blockSignals(True)
            self.follow.setChecked(at_end)
            self.follow.blockSignals(False)

