"""The one failure a user is shown: a message that says what is wrong and a hint that says what to do.

Raised by a job's code (engine.training.context re-exports it there) and by the engine's own clients of
other servers (engine.api.endpoint_chat), so every caller catches one class. Plain Python.
"""

from __future__ import annotations


class JobFailed(Exception):
    """Raise from a recipe to fail with a message and a hint for the user."""

    reason = ""  # a subclass's word for the kind of failure, written beside the message (e.g. "diverged")

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint
