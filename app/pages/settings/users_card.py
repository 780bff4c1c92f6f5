"""Settings › Users: who may use this engine, with which role and projects (admins only; docs/security.md).

Lists the users (never their tokens: the engine keeps only hashes), adds one (the new token is shown once,
to copy and hand over privately), changes a role, makes a new token, revokes. A non-admin sees who they
are and what their role allows. Below, the projects the user belongs to (an admin: all) with their members,
data folders and hosts; an admin gives a project its folders and hosts there. Every action is an engine
request (users.*, projects.*), checked and audited there.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import card, label, say
from app.widgets.wizard_parts import error_text
from engine.api.permissions import ADMIN, ROLE_WORDS, ROLES

COLUMNS = ("Name", "Role", "Projects", "Token")
PROJECT_COLUMNS = ("Project", "Members", "Data folders", "Hosts")


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def token_state(user: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    if user.get("revoked_at"):
        return "revoked"
    expires = user.get("expires_at")
    if expires:
        return "expired" if expires < now else f"expires {time.strftime('%Y-%m-%d', time.localtime(expires))}"
    return "active"


class UsersCard(QWidget):
    users_shown = Signal(int)  # users.list answered: how many users the engine has besides the local one

    def __init__(self, engine: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._engine = engine
        self._client = engine.client
        self.users: list[dict[str, Any]] = []
        self.last_token = ""
        frame, box = card()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(frame)
        box.addWidget(label("Users", "h2"))
        self.me = label("", "muted", wrap=True)
        box.addWidget(self.me)
        self.admin_box = QFrame()
        admin = QVBoxLayout(self.admin_box)
        admin.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.setAccessibleName("Users")
        admin.addWidget(self.table)
        actions = QHBoxLayout()
        self.new_token_button = QPushButton("New token")
        self.new_token_button.setToolTip("Make a new token for the selected user; the old one stops working")
        self.revoke_button = QPushButton("Revoke")
        self.revoke_button.setProperty("role", "danger")
        self.revoke_button.setToolTip("The selected user's token stops working at once")
        self.new_token_button.clicked.connect(lambda: self._on_selected("users.update", new_token=True))
        self.revoke_button.clicked.connect(lambda: self._on_selected("users.revoke"))
        actions.addWidget(self.new_token_button)
        actions.addWidget(self.revoke_button)
        actions.addStretch(1)
        admin.addLayout(actions)
        add = QHBoxLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("name")
        self.name_edit.setAccessibleName("New user's name")
        self.role_combo = QComboBox()
        for role in ROLES:
            self.role_combo.addItem(role, role)
            self.role_combo.setItemData(self.role_combo.count() - 1, ROLE_WORDS[role], 3)  # tooltip role
        self.role_combo.setCurrentIndex(ROLES.index("operator"))
        self.projects_edit = QLineEdit("default")
        self.projects_edit.setAccessibleName("New user's projects")
        self.projects_edit.setToolTip("Comma-separated projects the user belongs to; * for every project")
        self.add_button = QPushButton("Add user")
        self.add_button.clicked.connect(self.add_user)
        for w, stretch in ((self.name_edit, 1), (self.role_combo, 0), (self.projects_edit, 1), (self.add_button, 0)):
            add.addWidget(w, stretch)
        admin.addLayout(add)
        self.token_view = QLineEdit()
        self.token_view.setReadOnly(True)
        self.token_view.setAccessibleName("The new token")
        self.token_view.hide()
        admin.addWidget(self.token_view)
        box.addWidget(self.admin_box)
        box.addWidget(label("Projects", "h3"))
        self.projects_table = QTableWidget(0, len(PROJECT_COLUMNS))
        self.projects_table.setHorizontalHeaderLabels(PROJECT_COLUMNS)
        self.projects_table.verticalHeader().hide()
        self.projects_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.projects_table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.projects_table.setAccessibleName("Projects")
        self.projects_table.setToolTip("A project's data folders and hosts serve only its jobs; a folder or host no "
                                       "project names is everyone's")
        self.projects_table.itemSelectionChanged.connect(self._project_picked)
        box.addWidget(self.projects_table)
        self.project_box = QFrame()
        edit = QHBoxLayout(self.project_box)
        edit.setContentsMargins(0, 0, 0, 0)
        self.project_name = QLineEdit()
        self.project_name.setPlaceholderText("project")
        self.project_name.setAccessibleName("Project's name")
        self.project_folders = QLineEdit()
        self.project_folders.setPlaceholderText("/data/vision, …")
        self.project_folders.setAccessibleName("Project's data folders")
        self.project_folders.setToolTip("Comma-separated folders on the engine's machine whose files only this "
                                        "project's jobs may read")
        self.project_hosts = QLineEdit()
        self.project_hosts.setPlaceholderText("hosts")
        self.project_hosts.setAccessibleName("Project's hosts")
        self.project_hosts.setToolTip("Comma-separated hosts (Hosts page) only this project's jobs may use")
        self.save_project_button = QPushButton("Save project")
        self.save_project_button.setToolTip("Give the project these data folders and hosts (replacing what it had)")
        self.save_project_button.clicked.connect(self.save_project)
        for w, stretch in ((self.project_name, 1), (self.project_folders, 2), (self.project_hosts, 1),
                           (self.save_project_button, 0)):
            edit.addWidget(w, stretch)
        box.addWidget(self.project_box)
        self.projects: list[dict[str, Any]] = []
        self.status = label("", "muted", wrap=True)
        self.status.hide()
        box.addWidget(self.status)
        self._client.connected.connect(self.refresh)
        if self._client.is_connected:
            self.refresh()

    def refresh(self, *_args: Any) -> None:
        self._client.request("users.me", {}, self._show_me, self._failed)

    def _show_me(self, me: dict[str, Any]) -> None:
        role = me.get("role", "")
        where = f" on {self._engine.remote['address']}" if getattr(self._engine, "remote", None) else ""
        self.me.setText(f"You are {me.get('name')} ({role}: {ROLE_WORDS.get(role, '')}){where}; projects: "
                        f"{', '.join(me.get('projects') or []) or 'none'}.")
        self.admin_box.setVisible(role == ADMIN)
        self.project_box.setVisible(role == ADMIN)
        if role == ADMIN:
            self._client.request("users.list", {}, self._show_users, self._failed)
        self._client.request("projects.list", {}, self._show_projects, self._failed)

    def _show_projects(self, reply: dict[str, Any]) -> None:
        self.projects = reply.get("projects") or []
        self.projects_table.setRowCount(len(self.projects))
        for r, p in enumerate(self.projects):
            values = (p["name"], ", ".join(p.get("members") or []) or "-",
                      ", ".join(p.get("data_folders") or []) or "anywhere", ", ".join(p.get("hosts") or []) or "-")
            for c, value in enumerate(values):
                self.projects_table.setItem(r, c, QTableWidgetItem(value))
        self.projects_table.resizeColumnsToContents()
        self.projects_table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)

    def _project_picked(self) -> None:
        row = self.projects_table.currentRow()
        if 0 <= row < len(self.projects):
            p = self.projects[row]
            self.project_name.setText(p["name"])
            self.project_folders.setText(", ".join(p.get("data_folders") or []))
            self.project_hosts.setText(", ".join(p.get("hosts") or []))

    def save_project(self) -> None:
        params = {"name": self.project_name.text().strip(), "data_folders": _split(self.project_folders.text()),
                  "hosts": _split(self.project_hosts.text())}
        self._client.request("projects.set", params, self._project_saved, self._failed)

    def _project_saved(self, reply: dict[str, Any]) -> None:
        self._say(f"Project {reply.get('name')}: data folders {', '.join(reply.get('data_folders') or []) or 'anywhere'}"
                  f"; hosts {', '.join(reply.get('hosts') or []) or 'everyone’s'}.")
        self.refresh()

    def _show_users(self, reply: dict[str, Any]) -> None:
        self.users = reply.get("users") or []
        self.users_shown.emit(len(self.users))
        self.table.setRowCount(len(self.users))
        for r, u in enumerate(self.users):
            for c, value in enumerate((u["name"], u["role"], ", ".join(u.get("projects") or []), token_state(u))):
                self.table.setItem(r, c, QTableWidgetItem(value))
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)

    def add_user(self) -> None:
        projects = _split(self.projects_edit.text())
        params = {"name": self.name_edit.text().strip(), "role": self.role_combo.currentData(),
                  "projects": projects or ["default"]}
        self._client.request("users.add", params, self._done, self._failed)

    def _on_selected(self, method: str, **extra: Any) -> None:
        row = self.table.currentRow()
        if row < 0 or row >= len(self.users):
            self._say("Select a user first.", error=True)
            return
        self._client.request(method, {"name": self.users[row]["name"], **extra}, self._done, self._failed)

    def _done(self, reply: dict[str, Any]) -> None:
        user = reply.get("user") or {}
        self.last_token = reply.get("token") or ""
        if self.last_token:
            self.token_view.setText(self.last_token)
            self.token_view.show()
            self._say(f"The token of {user.get('name')}, shown this once: copy it and give it to them privately. "
                      "They connect with Engine › Connect to engine….")
        else:
            self.token_view.hide()
            self._say(f"{user.get('name')}: {token_state(user)}.")
        self.name_edit.clear()
        self.refresh()

    def _failed(self, err: Any) -> None:
        self._say(error_text(err), error=True)

    def _say(self, text: str, error: bool = False) -> None:
        say(self.status, text, error)
