"""A job's log (stdout.log): searchable, and following the end like ``tail -f``.

The owner hands it the whole tail on each poll (``set_lines``); it only
touches the text when something changed. The search box highlights every
match (case-insensitive); "Only matches" hides the other lines. Follow keeps
the view at the last line; scrolling up turns it off, scrolling back to the
end turns it on again.

Known library noise (deprecation notices and warnings that PyTorch,
transformers and friends print, ``library_noise``) is hidden from view, with
"Library warnings (N)" to show it; the file keeps every line. The owner can
add lines of its own (``add_note``: an evaluation, a checkpoint), placed among
the file's lines by time.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from PySide6.QtCore import QTimer
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
NOTE_RENDER_MS = 50  # a replay adds hundreds of notes at once: one render for them all

# torch's own log lines: "W1203 19:39:22.627000 6337 torch/utils/_pytree.py:630] ..." (warning and info;
# errors, E and F, stay in view).
_TORCH_LOG = re.compile(r"^[WI]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")
# warnings.warn output: "/…/modeling_utils.py:3312: FutureWarning: …", then the source line, indented.
_PY_WARNING = re.compile(r"^\S.*?\.py:\d+: \w*Warning: ")
# Messages some libraries print bare (no logger set up) that say nothing about the run.
_KNOWN_NOISE = re.compile("|".join([
    r"is an Enum subclass and is now natively supported",
    r"^Some weights of .* were (not initialized|newly initialized)",
    r"^You should probably TRAIN this model on a down-stream task",
]))
# Ember's own lines start with the time: "19:39:23 text_classification: minilm with lora ..."
_CLOCK = re.compile(r"^(\d\d):(\d\d):(\d\d) ")
_HALF_DAY = 12 * 3600


def library_noise(lines: list[str]) -> list[bool]:
    """For each line, whether it is known library noise. A noise line's indented continuation
    (the source line warnings.warn prints under its message) is noise too."""
    noise: list[bool] = []
    inside = False
    for line in lines:
        if inside and line[:1] in (" ", "\t") and line.strip():
            noise.append(True)
            continue
        inside = bool(_TORCH_LOG.match(line) or _PY_WARNING.match(line) or _KNOWN_NOISE.search(line))
        noise.append(inside)
    return noise


def note_line(t: float, text: str) -> str:
    """A line of the owner's, with the time as Ember's own lines have it."""
    return f"{datetime.fromtimestamp(t).strftime('%H:%M:%S')} {text}"


def merge_notes(lines: list[str], notes: list[tuple[float, str]]) -> list[str]:
    """The file's lines with the notes placed by time among Ember's timed lines.

    The file has only the time of day: the date is taken from the first note and a clock
    that goes back by more than half a day has passed midnight. Untimed lines (warnings,
    tracebacks) stay after the timed line before them; notes after every line go last.
    """
    if not notes:
        return list(lines)
    notes = sorted(notes)
    anchor = notes[0][0]
    midnight = datetime.fromtimestamp(anchor).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    out: list[str] = []
    index = 0
    current: float | None = None
    for line in lines:
        clock = _CLOCK.match(line)
        if clock:
            hours, minutes, seconds = (int(g) for g in clock.groups())
            when = midnight + hours * 3600 + minutes * 60 + seconds
            if current is None and when > anchor + _HALF_DAY:
                midnight -= 24 * 3600  # the log began just before the midnight the first note followed
                when -= 24 * 3600
            while when < (current if current is not None else anchor) - _HALF_DAY:
                midnight += 24 * 3600  # the run went past midnight
                when += 24 * 3600
            current = when
            while index < len(notes) and math.floor(notes[index][0]) < when:
                out.append(note_line(*notes[index]))
                index += 1
        out.append(line)
    out.extend(note_line(*note) for note in notes[index:])
    return out


class LogPane(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._lines: list[str] = []
        self._notes: dict[tuple[float, str], None] = {}  # ordered and without repeats (a replay)
        self._shown: list[str] = []
        self._note_timer = QTimer(self, singleShot=True, interval=NOTE_RENDER_MS)
        self._note_timer.timeout.connect(self._render)
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
        self.noise_check = QCheckBox("Library warnings")
        self.noise_check.setToolTip("Show the deprecation notices and warnings that PyTorch and other libraries "
                                    "print; they rarely concern the run. The log file (stdout.log) keeps them all.")
        self.noise_check.toggled.connect(self._render)
        self.noise_check.hide()  # until there is some
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
        bar.addWidget(self.noise_check)
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

    def add_note(self, t: float, text: str) -> None:
        """A line of the owner's at epoch time ``t`` ("evaluation at step 40: ..."); shown shortly."""
        if (t, text) not in self._notes:
            self._notes[t, text] = None
            self._note_timer.start()

    def clear(self) -> None:
        self._lines = []
        self._notes = {}
        self._render()

    def text(self) -> str:
        return self.view.toPlainText()

    def hidden_noise(self) -> int:
        """How many lines of library noise the file has (hidden unless Library warnings is on)."""
        return sum(library_noise(self._lines))

    def match_count(self) -> int:
        needle = self.search.text().lower()
        return sum(line.lower().count(needle) for line in self._shown) if needle else 0

    def _render(self) -> None:
        self._note_timer.stop()
        needle = self.search.text().lower()
        noise = library_noise(self._lines)
        lines = self._lines if self.noise_check.isChecked() else \
            [line for line, hide in zip(self._lines, noise, strict=True) if not hide]
        noisy = sum(noise)
        self.noise_check.setText(f"Library warnings ({noisy})")
        self.noise_check.setVisible(noisy > 0)
        self.view.setPlaceholderText(
            f"Only library warnings so far: tick Library warnings ({noisy}) to see them." if noisy
            else "Nothing in this run's log yet.")
        self._shown = merge_notes(lines, list(self._notes))
        shown = self._shown
        if needle and self.only_matches.isChecked():
            shown = [line for line in shown if needle in line.lower()]
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

