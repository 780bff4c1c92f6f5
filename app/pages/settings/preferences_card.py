"""The Preferences card of the Settings page: theme, data directory, default hardware, units.

Each control writes its preference as soon as it changes; the theme applies at once,
the data directory at the next engine start (the running engine keeps its own).
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.state.prefs import prefs
from app.state.style import apply_theme, set_role
from app.widgets.common import label

THEMES = (("system", "Same as the system"), ("light", "Light"), ("dark", "Dark"))
DEVICES = (("auto", "Automatic (GPU when there is one)"), ("cpu", "CPU"), ("cuda", "CUDA GPU"))
UNITS = (("binary", "Binary (KiB, MiB, GiB)"), ("decimal", "Decimal (kB, MB, GB)"))


def _combo(items: tuple[tuple[str, str], ...], current: str) -> QComboBox:
    box = QComboBox()
    for key, text in items:
        box.addItem(text, key)
    box.setCurrentIndex(max(0, box.findData(current)))
    return box


def _row(form: QFormLayout, text: str, widget: QWidget, tip: str, buddy: QWidget | None = None) -> QLabel:
    """A labelled row: the label is the field's buddy (Alt+letter focuses it) and its accessible name."""
    name = QLabel(text)
    name.setBuddy(buddy or widget)
    (buddy or widget).setAccessibleName(text.replace("&", ""))
    (buddy or widget).setToolTip(tip)
    form.addRow(name, widget)
    return name


class PreferencesCard(QFrame):
    """Preferences, saved as they change."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        set_role(self, "card")  # the same panel as widgets.common.card()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(18, 16, 18, 16)
        outer.setSpacing(10)
        box = QFormLayout()
        p = prefs()
        outer.addWidget(label("Preferences", "h2"))

        self.theme_combo = _combo(THEMES, p.get("theme"))
        _row(box, "&Theme", self.theme_combo, "Light or dark colours; \"Same as the system\" follows the "
                                              "desktop's setting")
        self.theme_combo.currentIndexChanged.connect(self._on_theme)

        self.data_dir_edit = QLineEdit(p.get("data_dir"))
        self.data_dir_edit.setPlaceholderText("Default (the engine's own data folder)")
        self.browse_button = QPushButton("Browse…")
        self.browse_button.setToolTip("Choose the folder where the engine keeps runs, models and its database")
        self.browse_button.setAccessibleName("Browse for the data directory")
        self.browse_button.clicked.connect(self._browse)
        data_row = QWidget()
        column = QVBoxLayout(data_row)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(4)
        row = QHBoxLayout()
        row.addWidget(self.data_dir_edit, 1)
        row.addWidget(self.browse_button)
        column.addLayout(row)
        self.data_dir_note = label("Applies the next time the engine starts (Stop engine below, then reopen "
                                   "Ember Studio). Ignored while EMBER_HOME is set.", "muted", wrap=True)
        column.addWidget(self.data_dir_note)
        _row(box, "&Data directory", data_row, "Where the engine keeps runs, models and its database; empty "
                                               "means the default", buddy=self.data_dir_edit)
        self.data_dir_edit.editingFinished.connect(self._on_data_dir)

        self.device_combo = _combo(DEVICES, p.get("default_device"))
        _row(box, "Default &hardware", self.device_combo, "The device a new fine-tune starts with; you can "
                                                          "still change it on the Training step")
        self.device_combo.currentIndexChanged.connect(
            lambda: prefs().set("default_device", self.device_combo.currentData()))

        self.units_combo = _combo(UNITS, p.get("units"))
        _row(box, "Si&zes in", self.units_combo, "Binary units count in 1024s (like nvidia-smi); decimal "
                                                 "units in 1000s (like disk makers)")
        self.units_combo.currentIndexChanged.connect(lambda: prefs().set("units", self.units_combo.currentData()))

        self.notifications_check = QCheckBox("Show desktop &notifications")
        self.notifications_check.setChecked(p.get("desktop_notifications"))
        self.notifications_check.setToolTip("Tell the desktop when a job finishes or fails; the notification "
                                            "centre keeps every entry either way")
        self.notifications_check.toggled.connect(lambda on: prefs().set("desktop_notifications", on))
        box.addRow("", self.notifications_check)

        self.reset_tour_button = QPushButton("Reset tour")
        self.reset_tour_button.setToolTip("Show the guided tour again the next time Ember Studio opens")
        self.reset_tour_button.clicked.connect(self._reset_tour)
        self.tour_note = label("", "muted")
        tour_row = QWidget()
        row = QHBoxLayout(tour_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.reset_tour_button)
        row.addWidget(self.tour_note, 1)
        _row(box, "&Guided tour", tour_row, "Show the guided tour again the next time Ember Studio opens",
             buddy=self.reset_tour_button)
        outer.addLayout(box)

    def _on_theme(self) -> None:
        theme = self.theme_combo.currentData()
        prefs().set("theme", theme)
        app = QApplication.instance()
        if app is not None:
            apply_theme(app, theme)

    def _on_data_dir(self) -> None:
        prefs().set("data_dir", self.data_dir_edit.text().strip())

    def _browse(self) -> None:
        start = self.data_dir_edit.text().strip()
        chosen = QFileDialog.getExistingDirectory(self, "Data directory", start)
        if chosen:
            self.data_dir_edit.setText(chosen)
            self._on_data_dir()

    def _reset_tour(self) -> None:
        prefs().set("tour_done", False)
        self.tour_note.setText("The tour starts again the next time Ember Studio opens.")
