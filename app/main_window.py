"""The main window: a sidebar of pages, the connection banner and the status bar.

It only assembles. Each page is its own module and talks to the engine itself
through ``EngineProcess.client``; the window owns the EngineProcess and hands it to
every page. Pages are built the first time they are shown, so a page that
needs something heavy (pyqtgraph, numpy) costs nothing until it is opened.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from PySide6.QtCore import QSize
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import notifications
from app.accessibility import install_accessibility, make_accessible
from app.engine_process import EngineProcess
from app.style import icon
from app.widgets.activity import ActivityIndicator
from app.widgets.connection import ConnectionBanner, EngineStatus
from app.widgets.notification_panel import NotificationBell


@dataclass(frozen=True)
class PageEntry:
    key: str  # also the module name under app/pages/ and the icon name
    title: str
    class_name: str

    def build(self, engine: EngineProcess, parent: QWidget) -> QWidget:
        # Imported on first show, so a page's heavy imports cost nothing at startup.
        module = importlib.import_module(f"app.pages.{self.key}")
        return getattr(module, self.class_name)(engine, parent)


# The sidebar, top to bottom: the order a model goes through its life.
PAGES = (
    PageEntry("welcome", "Welcome", "WelcomePage"),
    PageEntry("runs", "Runs", "RunsPage"),
    PageEntry("new_finetune", "New fine-tune", "NewFinetunePage"),
    PageEntry("monitor", "Monitor", "MonitorPage"),
    PageEntry("compress", "Compress", "CompressPage"),
    PageEntry("compare", "Compare", "ComparePage"),
    PageEntry("export", "Export", "ExportPage"),
    PageEntry("hosts", "Hosts", "HostsPage"),
    PageEntry("settings", "Settings", "SettingsPage"),
)


PAGE_KEYS = tuple(entry.key for entry in PAGES)


def _row_of(key: str) -> int:
    if key not in PAGE_KEYS:
        raise KeyError(f"No page {key!r}; pages are {', '.join(PAGE_KEYS)}")
    return PAGE_KEYS.index(key)


class MainWindow(QMainWindow):
    def __init__(self, engine: EngineProcess | None = None):
        super().__init__()
        self.setWindowTitle("Ember Studio")
        self.setWindowIcon(icon("ember"))
        self.resize(1180, 760)
        self.engine = engine or EngineProcess(self)
        self._pages: dict[str, QWidget] = {}

        central = QWidget()
        central.setObjectName("centralArea")
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        self.banner = ConnectionBanner(self.engine)
        column.addWidget(self.banner)

        row = QHBoxLayout()
        row.setSpacing(0)
        side = QVBoxLayout()
        side.setSpacing(0)
        brand = QLabel("Ember Studio")
        brand.setObjectName("brand")
        side.addWidget(brand)
        self.sidebar = QListWidget()
        self.sidebar.setObjectName("sidebar")
        self.sidebar.setIconSize(QSize(18, 18))
        self.sidebar.setFixedWidth(196)
        brand.setFixedWidth(196)
        for entry in PAGES:
            QListWidgetItem(icon(entry.key), entry.title, self.sidebar)
        side.addWidget(self.sidebar, 1)
        row.addLayout(side)
        self.stack = QStackedWidget()
        self.stack.setObjectName("pages")
        for _entry in PAGES:
            self.stack.addWidget(QWidget())  # stand-in until the page is first shown
        row.addWidget(self.stack, 1)
        column.addLayout(row, 1)
        self.setCentralWidget(central)

        self.engine_status = EngineStatus(self.engine)
        self.statusBar().addWidget(self.engine_status)
        self.statusBar().setSizeGripEnabled(False)
        self.engine.client.error.connect(lambda text: self.statusBar().showMessage(text, 8000))
        # Job endings and errors from anywhere become entries under the bell (app/notifications.py).
        self.notifications = notifications.NotificationCentre(self)
        self.notifications.watch(self.engine)
        notifications.install(self.notifications)
        self.activity = ActivityIndicator(self.engine)
        self.statusBar().addPermanentWidget(self.activity)
        self.bell = NotificationBell(self.notifications)
        self.statusBar().addPermanentWidget(self.bell)

        self.sidebar.currentRowChanged.connect(self._show_row)
        self.sidebar.setCurrentRow(0)
        # Keys for the main actions, names for screen readers (app/shortcuts.py, app/accessibility.py).
        from app.help import install_help_menu
        from app.shortcuts import install_shortcuts  # here: it reads PAGES from this module

        install_shortcuts(self)
        install_help_menu(self)  # the menu bar's Help menu (app/help.py)
        install_accessibility(self)

    def page(self, key: str) -> QWidget:
        """The page for ``key``, built on first use."""
        if key not in self._pages:
            row = _row_of(key)
            stand_in = self.stack.widget(row)
            page = PAGES[row].build(self.engine, self.stack)
            self.stack.insertWidget(row, page)
            self.stack.removeWidget(stand_in)
            stand_in.deleteLater()
            self._pages[key] = page
            make_accessible(page)  # Tab reaches every control; each has an accessible name
        return self._pages[key]

    def show_page(self, key: str) -> QWidget:
        self.sidebar.setCurrentRow(_row_of(key))
        return self.page(key)

    # Cross-page navigation: pages call these through self.window().
    def open_run(self, job_id: str) -> None:
        """Watch ``job_id`` on the Monitor page."""
        self.show_page("monitor").show_run(job_id)

    def duplicate_run(self, spec: dict, name: str = "") -> None:
        """Open the New fine-tune wizard filled in with ``spec``."""
        self.show_page("new_finetune").load_spec(spec, name)

    def compare_runs(self, ids: list[str]) -> None:
        self.show_page("compare").set_runs(ids)

    def compress_run(self, run_id: str) -> None:
        """Open the Compress wizard on the finished fine-tune ``run_id``."""
        self.show_page("compress").set_source(run_id)

    def show_variants(self, parent_id: str) -> None:
        """Open Compare › Variants on ``parent_id`` and its compressed variants."""
        self.show_page("compare").show_variants(parent_id)

    def export_variant(self, run_id: str, record: dict | None = None) -> None:
        """Open Export with the run (a variant or a parent) chosen to be exported."""
        self.show_page("export").set_variant(run_id, record)

    def _show_row(self, row: int) -> None:
        if 0 <= row < len(PAGES):
            self.stack.setCurrentWidget(self.page(PAGES[row].key))

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        from app.prefs import save_window

        save_window(self)  # geometry and page, restored at the next start
        # Only the connection closes; the engine and its jobs go on.
        self.engine.close()
        super().closeEvent(event)
