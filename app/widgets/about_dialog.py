"""Help › About Ember Studio: the versions a bug report needs, and the data folder with a Copy button.

The window's own versions are read here; the engine's (PyTorch and the other packages it
runs on) come from the engine, which reports them in its latest machine probe, so the
window never imports torch. Until a probe exists they are read from the installed
packages' metadata, which imports nothing either.
"""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

import PySide6
from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.text.probe_facts import probe_rows
from app.widgets.common import label
from engine import __version__ as EMBER_VERSION  # the package's version (pyproject reads it there)
from engine.api.job_terms import SYSTEM_PROBE

ENGINE_PACKAGES = ("torch", "transformers", "peft", "onnxruntime")  # read locally until a probe reports


def installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def window_versions() -> list[tuple[str, str]]:
    """(name, version) of Ember and the libraries the window runs on."""
    return [
        ("Ember Studio", EMBER_VERSION),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()})"),
        ("Qt", qVersion()),
        ("PySide6", PySide6.__version__),
        ("pyqtgraph", installed("pyqtgraph")),  # metadata: the charts' import costs nothing here
    ]


def local_engine_packages() -> str:
    have = ", ".join(f"{name} {installed(name)}" for name in ENGINE_PACKAGES)
    return f"{have} (installed with this Python; Settings › Probe this machine asks the engine)"


class AboutDialog(QDialog):
    """Versions (the window's, then the engine's) and the data folder; ``refresh()`` asks the engine again."""

    def __init__(self, window: QWidget):
        super().__init__(window)
        self.setWindowTitle("About Ember Studio")
        self._window = window
        self._engine_rows: dict[str, str] = {}
        box = QVBoxLayout(self)
        box.addWidget(label("Ember Studio", "h1"))
        box.addWidget(label("Fine-tune, compress and deploy PyTorch models.", "muted"))
        form = QFormLayout()
        form.setHorizontalSpacing(20)
        self.values: dict[str, QLabel] = {}
        for key, _value in self.rows():
            value = label("", "factValue", wrap=True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setAccessibleName(key)
            form.addRow(label(key, "factKey"), value)
            self.values[key] = value

        folder_row = QHBoxLayout()
        self.data_folder = label(self._data_folder(), "factValue", wrap=True)
        self.data_folder.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.data_folder.setAccessibleName("Data folder")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the data folder's path to the clipboard")
        self.copy_button.clicked.connect(self.copy_data_folder)
        folder_row.addWidget(self.data_folder, 1)
        folder_row.addWidget(self.copy_button)
        form.addRow(label("Data folder", "factKey"), folder_row)
        box.addLayout(form)
        self.copied = label("", "muted")
        box.addWidget(self.copied)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy_all = buttons.addButton("Copy all", QDialogButtonBox.ButtonRole.ActionRole)
        copy_all.setToolTip("Copy every version and the data folder, for a bug report")
        copy_all.clicked.connect(self.copy_all)
        buttons.rejected.connect(self.reject)
        box.addWidget(buttons)
        self.resize(620, 0)
        self._show_facts()

    # -- what it shows ---------------------------------------------------------------------

    def _data_folder(self) -> str:
        engine = getattr(self._window, "engine", None)
        paths = getattr(engine, "paths", None)
        if paths is None:  # the engine was never started: where it would keep its data
            from app.state.prefs import engine_paths_from_prefs

            paths = engine_paths_from_prefs()[0]
        return str(paths.home)

    def rows(self) -> list[tuple[str, str]]:
        engine = self._engine_rows
        return [*window_versions(),
                ("Engine", engine.get("Engine", "not connected: its version shows once it is")),
                ("Engine packages", engine.get("Packages", local_engine_packages()))]

    def _show_facts(self) -> None:
        for key, value in self.rows():
            self.values[key].setText(value)
        # Wrapped values grow taller: keep the width, let the height follow.
        self.layout().activate()
        self.resize(self.width(), self.heightForWidth(self.width()) if self.hasHeightForWidth()
                    else self.sizeHint().height())

    def value(self, key: str) -> str:
        """The text shown for ``key`` (tests read it)."""
        return self.values[key].text()

    def refresh(self) -> None:
        """Read the data folder again and ask the engine for its status and latest probe."""
        self.data_folder.setText(self._data_folder())
        self.copied.setText("")
        self._show_facts()
        engine = getattr(self._window, "engine", None)
        client = getattr(engine, "client", None)
        if client is None or not client.is_connected:
            return
        client.request("engine.status", {}, self._on_status, lambda _err: None)
        probes = engine.jobs.by_kind(SYSTEM_PROBE, ("succeeded",))  # the window's JobsState, newest first
        if probes:  # its result (package versions) comes with jobs.get
            client.request("jobs.get", {"id": probes[0]["id"]}, self._on_probe, lambda _err: None)

    def _on_status(self, status: dict[str, Any]) -> None:
        self._engine_rows["Engine"] = f"{status.get('version', '?')} (process {status.get('pid', '?')})"
        self._show_facts()

    def _on_probe(self, job: dict[str, Any]) -> None:
        result = job.get("result") or {}
        if not isinstance(result, dict):
            return
        packages = dict(probe_rows(result)).get("Packages")  # torch and the others, by version
        if packages:
            self._engine_rows["Packages"] = f"{packages}\n(the engine's latest machine probe)"
            self._show_facts()

    # -- copying ---------------------------------------------------------------------------

    def copy_data_folder(self) -> None:
        QGuiApplication.clipboard().setText(self.data_folder.text())
        self.copied.setText("Data folder copied to the clipboard.")

    def copy_all(self) -> None:
        lines = [f"{key}: {value}" for key, value in self.rows()]
        lines.append(f"Data folder: {self.data_folder.text()}")
        QGuiApplication.clipboard().setText("\n".join(lines))
        self.copied.setText("Versions and data folder copied to the clipboard.")
