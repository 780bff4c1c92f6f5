"""Welcome: what Ember Studio does, four ways to start, the tour, and the latest runs.

The page is the first thing a newcomer sees, so every way forward is one click:
the built-in path needs no download and no choices, the own-data path lands on
the field to fill in, and past runs open on Monitor. The recent list follows the
``jobs`` topic like Runs does, so a run started anywhere appears here at once.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QStackedWidget,
    QWidget,
)

from app.connection.engine_process import EngineProcess
from app.models.jobs import Lookup, is_system, run_title
from app.models.spec_tools import FIRST_CHAT
from app.state.navigation import Navigator
from app.state.style import icon, set_role
from app.text import format as fmt
from app.widgets.common import card, label, scrolling_body
from app.widgets.empty_state import empty_state
from app.widgets.jobs_table import state_dot
from engine.api.job_terms import kind_noun

RECENT_LIMIT = 8
ID_ROLE = Qt.ItemDataRole.UserRole


def recent_line(job: dict[str, Any], lookup: Lookup | None = None) -> str:
    """'name · kind · state · when', the one line a recent run gets."""
    kind = str(job.get("kind") or "")
    when = fmt.timestamp(job.get("created_at") or job.get("started_at"))
    return f"{run_title(job, lookup)}  ·  {kind_noun(kind)}  ·  {job.get('state', '')}  ·  {when}"


class WelcomePage(QWidget):
    title = "Welcome"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)  # how this page opens another (app/state/navigation.py)
        self._client = engine.client

        outer = scrolling_body(self, spacing=14)
        outer.addWidget(label("Welcome to Ember Studio", "h1"))
        outer.addWidget(label(
            "Ember Studio fine-tunes PyTorch models on your data, makes them smaller and faster, and "
            "packages them to run anywhere. Every step runs in a background engine, so closing the "
            "window never stops a job. Pick a starting point below.", "muted", wrap=True))

        row = QGridLayout()  # two by two: four side by side would not fit a 1024-px window
        row.setSpacing(12)
        self.builtin_button = self._start_card(
            row, "Fine-tune the built-in text model", "new_finetune",
            "Teach a small text model to sort support tickets: no download, a few minutes on a CPU.",
            self.start_builtin, primary=True)
        self.chat_button = self._start_card(
            row, "Tune and chat with a language model", "new_finetune",
            "Teach the built-in SmolLM2 chat model to answer in a word, then try it beside the original in "
            "the Playground: no download, a few minutes on a CPU.", self.start_chat)
        self.own_data_button = self._start_card(
            row, "Fine-tune on my data", "runs",
            "Bring a CSV, JSONL file or image folder; Ember checks it before anything starts.",
            self.start_own_data)
        self.open_run_button = self._start_card(
            row, "Open a past run", "monitor",
            "Watch a run's charts, compare runs, compress or export a finished model.",
            self.open_runs)
        outer.addLayout(row)

        tour_row = QHBoxLayout()
        self.tour_button = QPushButton("Take the tour")
        self.tour_button.setToolTip("A one-minute walk through the pages, one sentence each")
        self.tour_button.clicked.connect(self.start_tour)
        tour_row.addWidget(self.tour_button)
        tour_row.addWidget(label("New here? The tour shows where everything is.", "muted"))
        tour_row.addStretch(1)
        outer.addLayout(tour_row)

        frame, box = card()
        box.addWidget(label("Recent runs", "h2"))
        self.recent_list = QListWidget()
        self.recent_list.setAccessibleName("Recent runs")
        self.recent_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.recent_list.setMinimumHeight(160)
        self.recent_list.itemActivated.connect(self._open_item)  # double-click or Enter
        self.recent_empty = empty_state("No runs yet", "Your first fine-tune will appear here; a double-click "
                                        "opens it on Monitor.", icon_name="runs")
        self.recent_stack = QStackedWidget()
        self.recent_stack.addWidget(self.recent_empty)
        self.recent_stack.addWidget(self.recent_list)
        box.addWidget(self.recent_stack)
        outer.addWidget(frame, 1)

        self.jobs = engine.jobs  # the window's JobsState: every record, kept current
        for signal in (self.jobs.jobs_reset, self.jobs.job_changed, self.jobs.job_removed):
            signal.connect(self._fill)
        self._fill()

    def _start_card(self, row: QGridLayout, title: str, icon_name: str, text: str, slot,
                    primary: bool = False) -> QPushButton:
        frame, box = card()
        box.setContentsMargins(12, 14, 12, 14)
        button = QPushButton(icon(icon_name, ink="primary-text" if primary else "subtle"), title)
        button.setIconSize(QSize(22, 22))
        button.setMinimumHeight(52)
        button.setToolTip(text)
        if primary:
            set_role(button, "primary")
        button.clicked.connect(slot)
        box.addWidget(button)
        box.addWidget(label(text, "muted", wrap=True))
        box.addStretch(1)
        n = row.count()
        row.addWidget(frame, n // 2, n % 2)
        return button

    # -- the four ways to start ---------------------------------------------------------

    def start_builtin(self) -> None:
        """The wizard on its first step, reset to the built-in text model, tickets and LoRA."""
        self.nav.show("new_finetune", start_over="text_classification")

    def start_chat(self) -> None:
        """The wizard on its first step with SmolLM2, the short-answers data and LoRA, sized for a CPU."""
        self.nav.show("new_finetune", start_over="causal_lm", preset=FIRST_CHAT)

    def start_own_data(self) -> None:
        """The wizard on its Data step, "My data" chosen and the file field focused."""
        self.nav.show("new_finetune", own_data=True)

    def open_runs(self) -> None:
        self.nav.show("runs")

    def start_tour(self) -> None:
        from app.widgets.tour import tour_for

        tour_for(self.window()).start()

    # -- recent runs --------------------------------------------------------------------

    def _fill(self, *_change: Any) -> None:
        current = self.recent_list.currentItem()
        current_id = current.data(ID_ROLE) if current else None
        # Newest first; a machine probe is no run.
        newest = [job for job in self.jobs.all() if not is_system(job)][:RECENT_LIMIT]
        self.recent_list.clear()
        for job in newest:
            item = QListWidgetItem(state_dot(str(job.get("state", ""))), recent_line(job, self.jobs.get))
            item.setData(ID_ROLE, job["id"])
            item.setToolTip("Double-click or press Enter to open this run on Monitor")
            self.recent_list.addItem(item)
            if job["id"] == current_id:
                self.recent_list.setCurrentItem(item)
        self.recent_stack.setCurrentWidget(self.recent_list if newest else self.recent_empty)

    def recent_ids(self) -> list[str]:
        """The runs listed, newest first (tests and the tour read it)."""
        return [self.recent_list.item(i).data(ID_ROLE) for i in range(self.recent_list.count())]

    def _open_item(self, item: QListWidgetItem) -> None:
        job_id = item.data(ID_ROLE)
        if job_id:
            self.nav.show("monitor", job_id=job_id)
