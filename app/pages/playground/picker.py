"""A model picker: one drop-down of every model the Playground can try, grouped, and a Browse button.

The page fills it (``set_choices``) from the JobsState, the built-ins and ``models.list``; Browse adds a
local model folder, a GGUF file or a served endpoint's URL. ``current()`` is the picked Choice, whose ``ref`` is the ModelRef to send.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtGui import QFont, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QMenu, QToolButton, QWidget

from app.pages.playground.choices import GROUPS, Choice, folder_choice, ref_key

CHOICE_ROLE = 0x0100 + 7  # Qt.UserRole + 7: the Choice of a row (group headers have none)


class ModelPicker(QWidget):
    changed = Signal(object)  # the Choice picked (None: nothing to pick), by the user or by the page
    chosen = Signal(object)  # the user picked a Choice (the list, or Browse)

    def __init__(self, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self._choices: list[Choice] = []
        self._folders: list[Choice] = []  # browsed this session; kept when the lists are refilled
        self._filling = False
        # (url, api key file) of the endpoints being served now: the endpoint dialog starts from them
        self.served: Callable[[], list[tuple[str, str]]] = list
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(6)
        self.combo = QComboBox()
        self.combo.setModel(QStandardItemModel(self.combo))
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(9)  # two pickers side by side and the settings fit 1024 px
        self.combo.setAccessibleName(f"Model {name}")
        self.combo.setToolTip("The model to try: a finished fine-tune or variant, a built-in model, a model "
                              "in the Hugging Face cache, or a folder (Browse…)")
        self.combo.currentIndexChanged.connect(self._on_index)
        self.combo.activated.connect(lambda _index: self.chosen.emit(self.current()))
        row.addWidget(self.combo, 1)
        # A tool button, its menu at once: narrower than a push button with a menu (side by side at 1024 px).
        self.browse_button = QToolButton(text="Browse…")
        self.browse_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.browse_button.setStyleSheet("QToolButton::menu-indicator { image: none; }")
        self.browse_button.setToolTip("Pick a local Hugging Face model folder (config.json, weights, tokenizer), an "
                                      "ONNX-GenAI folder, or a GGUF file (run by llama.cpp)")
        self.browse_button.setAccessibleName(f"Browse for a model folder or file ({name})")
        menu = QMenu(self.browse_button)
        menu.addAction("Model folder (Hugging Face or ONNX-GenAI)…", self.browse)
        menu.addAction("GGUF file…", self.browse_gguf)
        menu.addAction("Served endpoint (URL)…", self.browse_endpoint)
        self.browse_button.setMenu(menu)
        row.addWidget(self.browse_button)

    # -- filling ---------------------------------------------------------------------------

    def set_choices(self, choices: list[Choice]) -> None:
        """Refill the list, keeping the current pick when it is still there."""
        keep = self.current()
        self._choices = list(choices)
        self._fill(keep.key if keep else "")

    def _all(self) -> list[Choice]:
        seen = {c.key for c in self._choices}
        return self._choices + [c for c in self._folders if c.key not in seen]

    def _fill(self, key: str) -> None:
        before = self.current()
        self._filling = True
        model: QStandardItemModel = self.combo.model()
        model.clear()
        picked = -1
        for group in GROUPS:
            members = [c for c in self._all() if c.group == group]
            if not members:
                continue
            header = QStandardItem(group)
            header.setEnabled(False)
            header.setSelectable(False)
            font = QFont(self.combo.font())
            font.setBold(True)
            header.setFont(font)
            model.appendRow(header)
            for choice in members:
                item = QStandardItem(choice.title)
                item.setData(choice, CHOICE_ROLE)
                item.setToolTip(choice.detail or choice.title)
                model.appendRow(item)
                if choice.key == key:
                    picked = model.rowCount() - 1
        if picked < 0:
            picked = next((r for r in range(model.rowCount()) if model.item(r).data(CHOICE_ROLE)), -1)
        self.combo.setCurrentIndex(picked)
        self._filling = False
        after = self.current()
        if (after.key if after else "") != (before.key if before else ""):
            self.changed.emit(after)

    # -- picking ---------------------------------------------------------------------------

    def current(self) -> Choice | None:
        index = self.combo.currentIndex()
        return self.combo.itemData(index, CHOICE_ROLE) if index >= 0 else None

    def choices(self) -> list[Choice]:
        return self._all()

    def select(self, ref: dict | None) -> bool:
        """Pick the model ``ref`` names; False when the list does not hold it."""
        key = ref_key(ref) if ref else ""
        for row in range(self.combo.count()):
            choice = self.combo.itemData(row, CHOICE_ROLE)
            if choice is not None and choice.key == key:
                self.combo.setCurrentIndex(row)
                return True
        return False

    def forget_endpoint(self, url: str) -> None:
        """An endpoint that stopped serving leaves the list (and the selection moves to the first model)."""
        kept = [c for c in self._folders if (c.ref or {}).get("url") != url]
        if len(kept) != len(self._folders):
            current = self.current()
            self._folders = kept
            self._fill(current.key if current is not None and (current.ref or {}).get("url") != url else "")

    def add_folder(self, path: str) -> Choice:
        return self.add(folder_choice(path))

    def add(self, choice: Choice) -> Choice:
        """A browsed folder, file or endpoint, kept in the list for this session."""
        if choice.key not in {c.key for c in self._folders}:
            self._folders.append(choice)
        self._fill(choice.key)
        return choice

    def browse(self) -> None:
        path = QFileDialog.getExistingDirectory(
            self, "Choose a model folder", "",
            QFileDialog.Option.DontUseNativeDialog | QFileDialog.Option.ShowDirsOnly)
        if path:
            self.chosen.emit(self.add_folder(path))

    def browse_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF file", "", "GGUF models (*.gguf)",
                                              options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self.chosen.emit(self.add_folder(path))

    def browse_endpoint(self) -> None:
        from app.pages.playground.endpoint_dialog import EndpointDialog

        dialog = EndpointDialog(self, self.served())
        if dialog.exec() and (choice := dialog.choice()) is not None:
            self.chosen.emit(self.add(choice))

    def _on_index(self, _index: int) -> None:
        if not self._filling:
            self.changed.emit(self.current())
