"""A page that is one wizard from a finished run to engine jobs (Compress, Export).

What they share lives here: heading and intro, the frame, marking the current step, the
footer's status line, and keeping the source list in step with the engine's jobs. Each
page keeps what differs: which steps can be reached, what blocks them, what Start sends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.connection.engine_client import EngineClient
from app.state.style import set_role
from app.widgets.common import label
from app.widgets.run_picker import RunPicker
from app.widgets.wizard_frame import build_wizard_frame, show_status
from app.widgets.wizard_parts import error_text


class WizardPage(QWidget):
    """Subclasses set ``title``, ``intro``, ``_client``, ``source_step`` (a RunPicker step), ``review_step``
    and ``steps``, then call ``build_frame`` and ``follow_engine``; they implement the methods that raise."""

    title = ""
    intro = ""
    _client: EngineClient
    source_step: RunPicker
    review_step: Any  # the page's own Review step: it has a ``review_view``
    steps: Sequence[Any]  # Steps: each has a ``title`` and a ``changed`` signal

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._outer = QVBoxLayout(self)
        self._outer.setContentsMargins(28, 24, 28, 16)
        self._outer.setSpacing(12)
        self._outer.addWidget(label(self.title, "h1"))
        self._outer.addWidget(label(self.intro, "muted", wrap=True))

    def build_frame(self, primary: tuple[str, str, Callable[[], None]], widest: str = "") -> None:
        """Lay out ``steps``; ``primary`` is (text, tooltip, slot) of ``run_button``, ``widest`` its longest
        text (its width is kept from the start). Any step's change refreshes."""
        frame = build_wizard_frame(self._outer, self.steps, self.go_to, self.current_step, primary, widest)
        self.step_buttons, self.stack = frame.step_buttons, frame.stack
        self.status_label, self.back_button, self.next_button = frame.status_label, frame.back_button, frame.next_button
        self.run_button = frame.primary_button
        for step in self.steps:
            step.changed.connect(self._on_changed)
        # What tests drive on either wizard.
        self.source_list = self.source_step.source_list
        self.review_view = self.review_step.review_view

    def follow_engine(self, jobs: Any) -> None:
        """Open the first step; list the runs from ``jobs`` (the window's JobsState) now and as it changes."""
        self.jobs = jobs
        jobs.jobs_reset.connect(self._on_list)
        jobs.job_changed.connect(self._on_job_event)
        jobs.job_removed.connect(self.source_step.remove)
        jobs.load_failed.connect(lambda err: self._set_status(error_text(err), "error"))
        self._client.connected.connect(self.reload)
        self._client.disconnected.connect(self._update_buttons)
        self.go_to(0)
        self._on_changed()
        if jobs.loaded:
            self._on_list()
        if self._client.is_connected:
            self.reload()

    # -- what each page decides -------------------------------------------------------------

    def go_to(self, index: int) -> None:
        """Open step ``index`` if it may be (ends in ``show_step``)."""
        raise NotImplementedError

    def _update_buttons(self) -> None:
        raise NotImplementedError

    def _on_changed(self) -> None:
        raise NotImplementedError

    def reload(self, _hello: Any = None) -> None:
        """The connection opened: re-read what the job list does not carry (hosts, the jobs started here)."""
        raise NotImplementedError

    def _on_list(self) -> None:
        """The job list was read again: refill the source list from ``self.jobs``."""
        raise NotImplementedError

    def _on_record(self, record: dict[str, Any]) -> None:
        """A job's record, fresh from the engine: update the Run step if it shows that job."""
        raise NotImplementedError

    def is_source(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` belongs in the source list."""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------

    def current_step(self) -> int:
        return self.stack.currentIndex()

    def show_step(self, index: int) -> None:
        """Show step ``index`` (the caller has checked it may) and mark its button."""
        self.stack.setCurrentIndex(index)
        for i, button in enumerate(self.step_buttons):
            set_role(button, "primary" if i == index else "")
            button.style().unpolish(button)  # the new role's style applies only once re-polished
            button.style().polish(button)
        self._update_buttons()

    def show_progress(self, *, running: bool, connected: bool, here: list[str], problems: list[str],
                      here_role: str, ready: str) -> None:
        """The footer's line: what keeps the user on this step (``here``) or from Start, else what Start does."""
        if running:
            self._set_status("")
        elif not connected:
            self._set_status("Waiting for the engine: Start is possible once it is connected.")
        elif here:
            more = f" (and {len(here) - 1} more)" if len(here) > 1 else ""
            self._set_status(f"Before going on: {here[0]}{more}", here_role)
        elif problems:
            self._set_status(f"Before starting: {problems[0]}", "muted")
        else:
            self._set_status(ready)

    def _set_status(self, text: str, role: str = "muted") -> None:
        show_status(self.status_label, text, role)

    def _on_job_event(self, data: dict[str, Any]) -> None:
        """Any job changed: the Run step and the source list follow (a deleted one leaves the list)."""
        self._on_record(data)
        if self.is_source(data):
            self.source_step.upsert(data)
