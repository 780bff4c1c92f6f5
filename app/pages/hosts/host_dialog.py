"""The Add host / Edit host form.

Fields are checked with the engine's own HostSpec (pydantic) before anything is
sent, so most mistakes show next to their field at once; what only the engine
can judge (a name already taken) comes back as RpcError data.fields and is shown
the same way. The dialog never closes itself on OK: it emits ``submitted`` and
the page calls ``finish()`` when the engine said yes, or ``show_errors()``.
It is opened with open(), not exec(), so a test can fill it and press OK.

A message wraps under its field and the dialog grows to show it (the form scrolls
where the screen ends): the fields keep their width and height whatever is shown.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import label
from engine.api.host_spec import HostSpec

AUTH_CHOICES = (("key", "Key file"), ("agent", "SSH agent"), ("password", "Password (asked each time)"))
ROLE_CHOICES = (("training", "Training node"), ("jetson", "Jetson (export target)"))
TEXT_FIELDS = ("name", "address", "user", "key_path", "python", "workdir")
FIELDS = ("name", "address", "port", "user", "auth", "key_path", "python", "workdir", "role")
FIELD_CHARS = 30  # the narrowest a text field gets, in average characters: an address fits


def _combo(choices: tuple[tuple[str, str], ...]) -> QComboBox:
    combo = QComboBox()
    for value, text in choices:
        combo.addItem(text, value)
    return combo


def field_of(error: dict[str, Any]) -> str:
    """The HostSpec field an engine error names ('host.name' and 'name' both mean name)."""
    path = str(error.get("field") or "")
    last = path.split(".")[-1]
    return last if last in FIELDS else ""


def plain_message(error: dict[str, Any]) -> str:
    """A pydantic error in words (its own text names regexes and types)."""
    kind = error.get("type", "")
    if kind == "string_too_short":
        return "required"
    if kind == "string_pattern_mismatch":
        return "letters, digits, '.', '_' and '-' only, starting with a letter or digit"
    return str(error.get("msg", "")).removeprefix("Value error, ")


class HostDialog(QDialog):
    submitted = Signal(dict)  # the HostSpec fields, already valid as far as this side can tell

    def __init__(self, record: dict[str, Any] | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.original_name = (record or {}).get("name")  # None: adding
        self.setWindowTitle("Edit host" if record else "Add host")
        self.setMinimumWidth(520)
        self.edits: dict[str, QLineEdit] = {key: QLineEdit() for key in TEXT_FIELDS}
        for edit in self.edits.values():
            edit.setMinimumWidth(edit.fontMetrics().averageCharWidth() * FIELD_CHARS)
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.auth = _combo(AUTH_CHOICES)
        self.role = _combo(ROLE_CHOICES)
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self.browse)
        self._errors: dict[str, QLabel] = {}
        self.file_dialog: QFileDialog | None = None

        self.edits["name"].setPlaceholderText("gpu-box (used in run specs)")
        self.edits["address"].setPlaceholderText("gpu-box.lan or 192.168.1.20")
        self.edits["user"].setPlaceholderText("empty: the same user as here")
        self.edits["key_path"].setPlaceholderText("empty: ~/.ssh/id_ed25519, id_rsa, …")
        self.edits["python"].setPlaceholderText("python3, or a venv's bin/python")

        outer = QVBoxLayout(self)
        outer.setSpacing(10)
        outer.addWidget(label("Ember logs in over SSH, checks the host's key with you the first time, "
                              "then probes what the host has.", "muted", wrap=True))
        self.form_body = QWidget()
        form = QFormLayout(self.form_body)
        form.setContentsMargins(0, 0, 0, 0)
        form.setVerticalSpacing(4)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        key_row = QHBoxLayout()
        key_row.addWidget(self.edits["key_path"], 1)
        key_row.addWidget(self.browse_button)
        rows: list[tuple[str, str, Any]] = [
            ("name", "Name", self.edits["name"]), ("address", "Address", self.edits["address"]),
            ("port", "Port", self.port), ("user", "User", self.edits["user"]),
            ("auth", "Log in with", self.auth), ("key_path", "Key file", key_row),
            ("python", "Python", self.edits["python"]), ("workdir", "Work folder", self.edits["workdir"]),
            ("role", "Role", self.role)]
        for key, text, widget in rows:
            column = QVBoxLayout()
            column.setSpacing(2)
            if isinstance(widget, QHBoxLayout):
                column.addLayout(widget)
            else:
                column.addWidget(widget)
            error = label("", "error", wrap=True)
            # As wide as the field, however long the message: it takes more lines, not more room.
            error.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            error.hide()
            column.addWidget(error)
            self._errors[key] = error
            form.addRow(text, column)
        self.form_scroll = QScrollArea()
        self.form_scroll.setWidgetResizable(True)
        self.form_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.form_scroll.setWidget(self.form_body)
        outer.addWidget(self.form_scroll, 1)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        outer.addWidget(self.message)

        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.reject)
        self.ok_button = QPushButton("Save" if record else "Add host")
        self.ok_button.setProperty("role", "primary")
        self.ok_button.setDefault(True)
        self.ok_button.clicked.connect(self.submit)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.ok_button)
        outer.addLayout(buttons)

        self.auth.currentIndexChanged.connect(self._auth_changed)
        self.set_values(record or HostSpec.model_construct(name="", address="").model_dump())

    # -- values ---------------------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {key: edit.text().strip() for key, edit in self.edits.items()}
        out["port"] = self.port.value()
        out["auth"] = self.auth.currentData()
        out["role"] = self.role.currentData()
        return out

    def set_values(self, values: dict[str, Any]) -> None:
        """Fill the form (HostSpec fields; anything else in ``values`` is ignored)."""
        for key, edit in self.edits.items():
            if key in values:
                edit.setText(str(values[key] or ""))
        if "port" in values:
            self.port.setValue(int(values["port"] or 22))
        for key, combo in (("auth", self.auth), ("role", self.role)):
            if key in values:
                index = combo.findData(values[key])
                combo.setCurrentIndex(max(index, 0))
        self._auth_changed()

    def _auth_changed(self) -> None:
        uses_key = self.auth.currentData() == "key"
        self.edits["key_path"].setEnabled(uses_key)
        self.browse_button.setEnabled(uses_key)

    def browse(self) -> None:
        self.file_dialog = QFileDialog(self, "Private key file", self.edits["key_path"].text() or "~/.ssh")
        self.file_dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self.file_dialog.fileSelected.connect(self.edits["key_path"].setText)
        self.file_dialog.open()

    # -- submitting -------------------------------------------------------------------------

    def submit(self) -> None:
        """Check the fields here first; only a valid form goes to the engine."""
        self.clear_errors()
        values = self.values()
        try:
            HostSpec.model_validate(values)
        except ValidationError as exc:
            self.show_errors([{"field": ".".join(str(p) for p in err["loc"]), "message": plain_message(err)}
                              for err in exc.errors()])
            return
        self.set_busy(True)
        self.submitted.emit(values)

    def set_busy(self, busy: bool) -> None:
        self.ok_button.setEnabled(not busy)
        self.ok_button.setText("Checking…" if busy else ("Save" if self.original_name else "Add host"))

    def clear_errors(self) -> None:
        for error in self._errors.values():
            error.clear()
            error.hide()
        self.message.clear()
        self.message.hide()

    def show_errors(self, errors: list[dict[str, Any]], message: str = "", hint: str = "") -> None:
        """Errors next to their fields; those that name no field, and ``message``, below the form."""
        self.set_busy(False)
        loose = [message] if message else []
        for error in errors:
            text = " ".join(filter(None, [str(error.get("message") or ""), str(error.get("hint") or "")]))
            key = field_of(error)
            if key:
                self._errors[key].setText(text)
                self._errors[key].show()
            else:
                loose.append(f"{error.get('field')}: {text}" if error.get("field") else text)
        if hint:
            loose.append(hint)
        if loose:
            self.message.setText("\n".join(loose))
            self.message.show()
        self.fit_height()

    def fit_height(self) -> None:
        """Grow (never shrink) so every message shows without scrolling, as far as the screen allows."""
        for layout in (self.form_body.layout(), self.layout()):
            layout.activate()
        body = self.form_body
        needed = max(body.heightForWidth(self.form_scroll.viewport().width()), body.minimumSizeHint().height())
        extra = needed - self.form_scroll.viewport().height()
        extra += max(0, self.layout().totalHeightForWidth(self.width()) - self.height())  # the message below
        if extra <= 0:
            return
        screen = self.screen() or QGuiApplication.primaryScreen()
        room = screen.availableGeometry().height() - 60 if screen is not None else self.height() + extra
        self.resize(self.width(), max(self.height(), min(self.height() + extra, room)))

    def error_for(self, key: str) -> str:
        """The error shown under field ``key`` ('' when none); tests read it."""
        error = self._errors[key]
        return error.text() if not error.isHidden() else ""

    def finish(self) -> None:
        """The engine took it: close."""
        self.set_busy(False)
        self.accept()
