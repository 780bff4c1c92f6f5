"""The main window: a sidebar of pages, the connection banner and the status bar.

It only assembles. The pages are listed in app/models/pages.py (the page registry); each is its own
module, built the first time it is shown, so a page that needs something heavy
(pyqtgraph, numpy) costs nothing until it is opened. The window owns the
EngineProcess (with its JobsState, app/state/job_list.py) and a Navigator
(app/state/navigation.py), and hands both to every page: pages read the jobs from
the one and move to another page through the other, never through this class.
"""

from __future__ import annotations

import importlib
from typing import Any

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

from app.connection.engine_process import EngineProcess
from app.models.pages import PAGES, PageEntry, row_of
from app.shell.accessibility import install_accessibility, make_accessible
from app.state import notifications
from app.state.navigation import Navigator
from app.state.style import icon
from app.widgets.activity import ActivityIndicator
from app.widgets.connection import ConnectionBanner, EngineStatus
from app.widgets.notification_panel import NotificationBell


def build_page(entry: PageEntry, engine: EngineProcess, parent: QWidget, nav: Navigator) -> QWidget:
    # Imported on first show, so a page's heavy imports cost nothing at startup.
    module = importlib.import_module(f"app.pages.{entry.key}")
    return getattr(module, entry.class_name)(engine, parent, nav=nav)


class MainWindow(QMainWindow):
    def __init__(self, engine: EngineProcess | None = None):
        super().__init__()
        self.setWindowTitle("Ember Studio")
        self.setWindowIcon(icon("ember"))
        self.resize(1180, 760)
        self.engine = engine or EngineProcess(self)
        self.nav = Navigator(self)  # pages ask it for another page; _navigate answers
        self.nav.requested.connect(self._navigate)
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
        # Job endings and errors from anywhere become entries under the bell (app/state/notifications.py).
        self.notifications = notifications.NotificationCentre(self)
        self.notifications.watch(self.engine)
        notifications.install(self.notifications)
        self.activity = ActivityIndicator(self.engine)
        self.statusBar().addPermanentWidget(self.activity)
        self.bell = NotificationBell(self.notifications)
        self.statusBar().addPermanentWidget(self.bell)

        self.sidebar.currentRowChanged.connect(self._show_row)
        self.sidebar.setCurrentRow(0)
        # Keys for the main actions, names for screen readers (app/shell/shortcuts.py, app/shell/accessibility.py).
        from app.shell.help import install_help_menu
        from app.shell.shortcuts import install_shortcuts

        install_shortcuts(self)
        engine_menu = self.menuBar().addMenu("&Engine")
        self.connect_action = engine_menu.addAction("Connect to engine…")
        self.connect_action.triggered.connect(self.show_connect_dialog)
        self.local_action = engine_menu.addAction("Use this machine's engine")
        self.local_action.triggered.connect(self.engine.use_local)
        install_help_menu(self)  # the menu bar's Help menu (app/shell/help.py)
        install_accessibility(self)

    def page(self, key: str) -> QWidget:
        """The page for ``key``, built on first use."""
        if key not in self._pages:
            row = row_of(key)
            stand_in = self.stack.widget(row)
            page = build_page(PAGES[row], self.engine, self.stack, self.nav)
            self.stack.insertWidget(row, page)
            self.stack.removeWidget(stand_in)
            stand_in.deleteLater()
            self._pages[key] = page
            make_accessible(page)  # Tab reaches every control; each has an accessible name
        return self._pages[key]

    def show_page(self, key: str) -> QWidget:
        self.sidebar.setCurrentRow(row_of(key))
        return self.page(key)

    def _navigate(self, key: str, args: dict[str, Any]) -> None:
        """A Navigator's request: show page ``key``, opened on ``args`` (its ``navigate``)."""
        page = self.show_page(key)
        if args:
            page.navigate(**args)

    def _show_row(self, row: int) -> None:
        if 0 <= row < len(PAGES):
            self.stack.setCurrentWidget(self.page(PAGES[row].key))

    def show_connect_dialog(self) -> None:
        """Engine › Connect to engine…: a team engine over TLS (app/widgets/connect_dialog.py)."""
        from app.widgets.connect_dialog import ConnectDialog

        self.connect_dialog = ConnectDialog(self.engine, self)
        self.connect_dialog.show()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        from app.state.prefs import save_window

        save_window(self)  # geometry and page, restored at the next start
        # Only the connection closes; the engine and its jobs go on.
        self.engine.close()
        super().closeEvent(event)
