"""A column name: a drop-down of the file's own columns that still takes any typed name.

The Data step fills it from data.inspect's ``file_columns``. When the field still holds
the default name and the file has no such column, the engine's guess is chosen (the
longest-text column for text, the fewest-values one for labels) and said next to it; a
name the user chose is never replaced.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QWidget


class ColumnField(QComboBox):
    def __init__(self, default: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.default = default
        self.textChanged = self.editTextChanged  # the line edit's name, as before this was one
        self.guessed = ""  # the guess last chosen by the form, '' once the user picks
        self.setEditText(default)
        self.activated.connect(self._picked)

    def _picked(self, _index: int) -> None:
        self.guessed = ""  # chosen by the user now

    def text(self) -> str:
        return self.currentText()

    def setText(self, text: str) -> None:  # noqa: N802 - QLineEdit's name
        self.guessed = ""
        self.setEditText(text)

    def set_columns(self, columns: list[dict[str, Any]], guess: str | None) -> bool:
        """Offer ``columns`` (data.inspect's file_columns); choose ``guess`` over a default that is not one.

        Returns whether the text changed (a guess was taken).
        """
        names = [str(c.get("name")) for c in columns if c.get("name")]
        current = self.currentText()
        self.blockSignals(True)
        self.clear()
        for column in columns:
            name = str(column.get("name") or "")
            if name:
                self.addItem(name)
                self.setItemData(self.count() - 1, _describe(column), Qt.ItemDataRole.ToolTipRole)
        self.setEditText(current)
        self.blockSignals(False)
        if guess and guess in names and current not in names and (current.strip() in ("", self.default) or current == self.guessed):
            self.setEditText(guess)
            self.guessed = guess
            return True
        return False


def _describe(column: dict[str, Any]) -> str:
    if "distinct" not in column:  # a name only (a Hub dataset's columns)
        return ""
    return (f"{column.get('distinct', 0):,} different values, {column.get('mean_chars', 0):g} characters "
            f"on average, in the first {column.get('filled', 0):,} rows")
