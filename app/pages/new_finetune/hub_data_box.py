"""The Data step's "From the Hugging Face Hub" source: a dataset id and revision with Download (the
model.download job with ``repo_type: dataset``, progress in bytes, speed and ETA), the training and
validation splits, and what data.inspect found (``hub``: cached or not, its splits and columns).

The column pickers stay in the step (they serve the user's own file too); this box fills the split
drop-downs and says whether the dataset is here yet.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QVBoxLayout, QWidget

from app.widgets.common import label
from app.widgets.hub_picker import HubPicker
from app.widgets.wizard_parts import show_text, with_message

AUTO_VAL = ""  # data.val_split None: the dataset's validation split, else the held-out share
AUTO_VAL_TEXT = "the dataset's validation split, else held out"


def _split_combo(name: str) -> QComboBox:
    combo = QComboBox()
    combo.setEditable(True)  # a data file's path in the repo works too
    combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
    combo.setAccessibleName(name)
    combo.setMinimumContentsLength(18)
    return combo


class HubDataBox(QWidget):
    changed = Signal()
    downloaded = Signal()  # the dataset is in the cache now: look at it again

    def __init__(self, client: Any, message_for: Any, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 0, 0, 0)
        self.picker = HubPicker(client, repo_type="dataset")
        outer.addWidget(with_message(self.picker, message_for("data.hub")))
        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        self.split_combo = _split_combo("Training split")
        self.split_combo.setEditText("train")
        self.split_combo.setToolTip("The dataset's split to train on, or the path of a data file in it (CSV, TSV, "
                                    "JSONL, JSON or Parquet). Job file: data.split.")
        form.addRow(label("Training split"), with_message(self.split_combo, message_for("data.split")))
        self.val_combo = _split_combo("Validation split")
        self.val_combo.addItem(AUTO_VAL_TEXT, AUTO_VAL)
        self.val_combo.setToolTip("The split (or file) to measure on; the first choice takes the dataset's "
                                  "validation split when it has one, else holds out a share of the training rows. "
                                  "Job file: data.val_split.")
        form.addRow(label("Validation"), with_message(self.val_combo, message_for("data.val_split")))
        outer.addLayout(form)
        self.note = label("", "muted", wrap=True)
        self.note.hide()
        outer.addWidget(self.note)
        self.picker.changed.connect(self.changed.emit)
        self.picker.downloaded.connect(lambda _result: self.downloaded.emit())
        self.split_combo.editTextChanged.connect(lambda _t: self.changed.emit())
        self.val_combo.editTextChanged.connect(lambda _t: self.changed.emit())

    # -- the spec ------------------------------------------------------------------------------

    def repo_id(self) -> str:
        return self.picker.repo_id()

    def val_split(self) -> str | None:
        text = self.val_combo.currentText().strip()
        return None if text in ("", AUTO_VAL_TEXT) else text

    def load(self, data: dict[str, Any]) -> None:
        self.picker.set_model(data.get("hub"), data.get("revision"))
        self.split_combo.setEditText(data.get("split") or "train")
        self.val_combo.setEditText(data.get("val_split") or AUTO_VAL_TEXT)

    def write(self, data: dict[str, Any]) -> None:
        data.update(hub=self.repo_id() or None, revision=self.picker.revision(),
                    split=self.split_combo.currentText().strip() or "train", val_split=self.val_split())

    # -- what data.inspect found ---------------------------------------------------------------

    def show_facts(self, facts: dict[str, Any] | None) -> None:
        """data.inspect's ``hub``: the splits fill the drop-downs; a dataset not downloaded yet is said."""
        if not facts:
            show_text(self.note, "")
            return
        if not facts.get("cached"):
            show_text(self.note, f"{facts.get('repo_id')} is not downloaded yet: Download it to see its rows and "
                                 "columns here (a fine-tune also downloads it as it starts).")
            return
        splits = dict(facts.get("splits") or {})
        self._fill(self.split_combo, list(splits), [])
        self._fill(self.val_combo, list(splits), [(AUTO_VAL_TEXT, AUTO_VAL)])
        described = ", ".join(f"{name} ({len(files)} file{'s' if len(files) != 1 else ''})"
                              for name, files in splits.items())
        val = facts.get("val_split")
        show_text(self.note, f"Downloaded ({str(facts.get('commit') or '')[:10]}). Splits: {described or 'none'}. "
                             + (f"Validation: {val}." if val else "Validation: held out from the training rows."))

    def _fill(self, combo: QComboBox, names: list[str], fixed: list[tuple[str, str]]) -> None:
        current = combo.currentText()
        if [combo.itemText(i) for i in range(combo.count())] == [t for t, _ in fixed] + names:
            return
        combo.blockSignals(True)
        combo.clear()
        for text, value in fixed:
            combo.addItem(text, value)
        for name in names:
            combo.addItem(name, name)
        combo.setEditText(current)
        combo.blockSignals(False)
