"""The notification centre on screen: a bell in the status bar and the panel it opens.

The bell shows how many entries are unread ("Notifications, 2 unread" to a
screen reader). The panel lists entries newest first, each with its level,
time, title and text, and the actions that fit it: **Details…** (a dialog with
the details in a read-only monospace box and Copy; the only place a
traceback is ever shown) and **Open run** for an entry about a job.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QSize, Qt
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.state.notifications import Notification, NotificationCentre
from app.state.style import icon, set_role
from app.text import format as fmt
from app.widgets.jobs_table import state_dot

# An entry's level drawn with the job state colour that means the same thing.
LEVEL_STATES = {"info": "queued", "success": "succeeded", "warning": "stopping", "error": "failed"}
LEVEL_WORDS = {"info": "Information", "success": "Done", "warning": "Warning", "error": "Error"}


class DetailsDialog(QDialog):
    """An entry's details: read-only, monospace, copyable."""

    def __init__(self, entry: Notification, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Details: {entry.title}")
        self.resize(760, 480)
        column = QVBoxLayout(self)
        title = QLabel(entry.title)
        set_role(title, "h2")
        title.setTextFormat(Qt.TextFormat.PlainText)
        column.addWidget(title)
        text = QLabel(entry.text)
        text.setTextFormat(Qt.TextFormat.PlainText)
        text.setWordWrap(True)
        text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(text)
        self.details = QPlainTextEdit(entry.details)
        self.details.setReadOnly(True)
        self.details.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details.setAccessibleName("Details text")
        column.addWidget(self.details, 1)
        row = QHBoxLayout()
        row.addStretch(1)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the title, text and details, for a bug report")
        self.copy_button.clicked.connect(lambda: self.copy(entry))
        close = QPushButton("Close")
        close.setDefault(True)
        close.clicked.connect(self.accept)
        row.addWidget(self.copy_button)
        row.addWidget(close)
        column.addLayout(row)

    @staticmethod
    def copy(entry: Notification) -> None:
        QGuiApplication.clipboard().setText(f"{entry.title}\n{entry.text}\n\n{entry.details}".strip())


class EntryCard(QFrame):
    """One entry in the panel."""

    def __init__(self, entry: Notification, panel: NotificationPanel, parent: QWidget):
        super().__init__(parent)
        self.entry_id = entry.id
        self.setObjectName("notificationEntry")
        self.setProperty("unread", not entry.read)
        grid = QGridLayout(self)
        grid.setContentsMargins(4, 8, 4, 8)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(3)
        dot = QLabel()
        dot.setPixmap(state_dot(LEVEL_STATES.get(entry.level, "queued")).pixmap(10, 10))
        dot.setToolTip(LEVEL_WORDS.get(entry.level, entry.level))
        dot.setAccessibleName(LEVEL_WORDS.get(entry.level, entry.level))
        self.title = QLabel(entry.title)
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.title.setWordWrap(True)
        font = self.title.font()
        font.setBold(not entry.read)
        self.title.setFont(font)
        when = QLabel(fmt.timestamp(entry.time))
        set_role(when, "muted")
        self.text = QLabel(entry.text)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        grid.addWidget(dot, 0, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.title, 0, 1)
        grid.addWidget(when, 0, 2, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignRight)
        grid.addWidget(self.text, 1, 1, 1, 2)
        grid.setColumnStretch(1, 1)
        actions = QHBoxLayout()
        actions.addStretch(1)
        self.details_button = QPushButton("Details…", self)
        self.details_button.setAccessibleName(f"Details of {entry.title}")
        self.details_button.clicked.connect(lambda: panel.show_details(entry.id))
        self.details_button.setVisible(bool(entry.details))
        self.open_button = QPushButton("Open run", self)
        self.open_button.setAccessibleName(f"Open the run of {entry.title}")
        self.open_button.setToolTip("Show this job on the Monitor page")
        self.open_button.clicked.connect(lambda: panel.open_entry(entry.id))
        self.open_button.setVisible(bool(entry.job_id))
        actions.addWidget(self.details_button)
        actions.addWidget(self.open_button)
        if entry.details or entry.job_id:
            grid.addLayout(actions, 2, 1, 1, 2)
        self.setAccessibleName(f"{LEVEL_WORDS.get(entry.level, entry.level)}: {entry.title}")


class NotificationPanel(QFrame):
    """The entries, newest first, with Mark all read and Clear all; a popup above the bell."""

    def __init__(self, centre: NotificationCentre, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("notificationPanel")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName("Notifications")
        self.resize(460, 520)
        self.centre = centre
        self.cards: dict[int, EntryCard] = {}
        self._dialog: DetailsDialog | None = None
        column = QVBoxLayout(self)
        column.setContentsMargins(14, 12, 14, 12)
        header = QHBoxLayout()
        heading = QLabel("Notifications")
        set_role(heading, "h2")
        header.addWidget(heading, 1)
        self.mark_read_button = QPushButton("Mark all read")
        self.mark_read_button.clicked.connect(centre.mark_all_read)
        self.clear_button = QPushButton("Clear all")
        self.clear_button.setToolTip("Remove every entry; the jobs themselves stay on the Runs page")
        self.clear_button.clicked.connect(centre.clear)
        header.addWidget(self.mark_read_button)
        header.addWidget(self.clear_button)
        column.addLayout(header)
        self.empty = QLabel("Nothing yet. Finished and failed jobs, and any error, appear here.")
        self.empty.setWordWrap(True)
        set_role(self.empty, "muted")
        column.addWidget(self.empty)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        body = self._body = QWidget()
        self._list = QVBoxLayout(body)
        self._list.setContentsMargins(0, 0, 0, 0)
        self._list.setSpacing(0)
        self._list.addStretch(1)
        scroll.setWidget(body)
        column.addWidget(scroll, 1)
        self._scroll = scroll
        centre.changed.connect(self.refresh)
        self.rebuild()

    def refresh(self) -> None:
        """Follow the centre while shown; a hidden panel is rebuilt when it opens."""
        if self.isVisible():
            self.rebuild()

    def rebuild(self) -> None:
        for card in self.cards.values():
            self._list.removeWidget(card)
            card.deleteLater()
        self.cards.clear()
        entries = list(reversed(self.centre.entries))  # newest first
        for index, entry in enumerate(entries):
            card = self.cards[entry.id] = EntryCard(entry, self, self._body)
            self._list.insertWidget(index, card)
        self.empty.setVisible(not entries)
        self._scroll.setVisible(bool(entries))
        self.mark_read_button.setEnabled(self.centre.unread > 0)
        self.clear_button.setEnabled(bool(entries))

    def show_details(self, entry_id: int) -> DetailsDialog | None:
        entry = self.centre.entry(entry_id)
        if entry is None:
            return None
        self.centre.mark_read(entry_id)
        self.hide()
        # Parented to the window, not this popup: the popup closes when the dialog takes focus.
        self._dialog = DetailsDialog(entry, self.parentWidget().window() if self.parentWidget() else None)
        self._dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._dialog.show()
        return self._dialog

    def open_entry(self, entry_id: int) -> None:
        entry = self.centre.entry(entry_id)
        if entry is None or not entry.job_id:
            return
        self.centre.mark_read(entry_id)
        self.hide()
        self.centre.open_job(entry.job_id)


class NotificationBell(QToolButton):
    """Status-bar button: the bell and the unread count; click for the panel."""

    def __init__(self, centre: NotificationCentre, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("notificationBell")
        self.setAutoRaise(True)
        self.setIcon(icon("bell"))
        self.setIconSize(QSize(16, 16))
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.centre = centre
        self.panel = NotificationPanel(centre, self)
        centre.changed.connect(self.refresh)
        self.clicked.connect(self.show_panel)
        self.refresh()

    def refresh(self) -> None:
        unread = self.centre.unread
        self.setText(str(unread) if unread else "")
        self.setAccessibleName(f"Notifications, {unread} unread")
        errors = sum(not e.read and e.level == "error" for e in self.centre.entries)
        self.setToolTip(f"Notifications: {unread} unread" + (f", {errors} about errors" if errors else "")
                        if unread else "Notifications: nothing unread")
        self.setProperty("state", "error" if errors else ("unread" if unread else "read"))

    def show_panel(self) -> None:
        self.panel.rebuild()
        corner = self.mapToGlobal(QPoint(self.width(), 0))
        self.panel.move(max(0, corner.x() - self.panel.width()), max(0, corner.y() - self.panel.height() - 4))
        self.panel.show()
        self.panel.activateWindow()
