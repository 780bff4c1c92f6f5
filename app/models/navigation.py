"""Going from one page to another without knowing the main window.

A page asks its Navigator to show a page, with what to open it on
(``nav.show("monitor", job_id=...)``); the main window listens, shows the page and
hands it the arguments through the page's ``navigate(**args)``. A page built on its
own (a test) gets a Navigator nobody listens to, so its buttons simply do nothing.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal


class Navigator(QObject):
    requested = Signal(str, dict)  # page id, arguments for that page's navigate()

    def show(self, page_id: str, **args: Any) -> None:
        self.requested.emit(page_id, args)

    def action(self, page_id: str, **args: Any):
        """A slot for a button's clicked signal: show ``page_id`` with ``args``."""
        return lambda *_clicked: self.show(page_id, **args)
