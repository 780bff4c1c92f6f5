"""Going from one page to another without knowing the main window.

A page asks its Navigator to show a page, with what to open it on
(``nav.show("monitor", job_id=...)``); the main window listens, shows the page and
hands it the arguments through the page's ``navigate(**args)``. A page built on its
own (a test) gets a Navigator nobody listens to, so its buttons simply do nothing.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from engine.api.job_terms import FINETUNE, SUCCEEDED

# The tasks whose finished runs the Playground opens: it chats with a language model, classifies a text
# or an image.
PLAYGROUND_TASKS = ("causal_lm", "text_classification", "image_classification")


def playground_can_open(job: dict[str, Any], task: str | None) -> bool:
    """Whether the Playground takes this run: a finished fine-tune or compression variant of such a model
    (``task`` is the run's task, a variant's from the fine-tune it was made from)."""
    kind = str(job.get("kind") or "")
    return job.get("state") == SUCCEEDED and (kind == FINETUNE or kind.startswith("compress.")) \
        and task in PLAYGROUND_TASKS


class Navigator(QObject):
    requested = Signal(str, dict)  # page id, arguments for that page's navigate()

    def show(self, page_id: str, **args: Any) -> None:
        self.requested.emit(page_id, args)

    def try_in_playground(self, job_id: str | None = None, model: dict[str, Any] | None = None) -> None:
        """Open the Playground on a finished run, or on any model (a ModelRef dict: engine/api/playground.py)."""
        self.show("playground", **({"model": model} if model else {"job_id": job_id}))

    def action(self, page_id: str, **args: Any):
        """A slot for a button's clicked signal: show ``page_id`` with ``args``."""
        return lambda *_clicked: self.show(page_id, **args)
