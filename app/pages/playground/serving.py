"""Serve the Playground's model: a serve.model job (docs/serve.md) started from the page, and a bar with its URL,
its live figures, Copy URL and Stop.

The job's ``serving`` events (``run/<id>/serving``) bring the URL (the first) and the figures (every 2 s);
the window's JobsState says when the job ends (stopped, or failed with its message). One served model at a
time from here; ``ember serve`` and the Runs page show every serve job.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from app.widgets.common import label, show_text
from engine.api.job_terms import FINAL_STATES, RUNNING, SERVE


def figures_text(data: dict[str, Any]) -> str:
    """'12 requests · 0.50/s · 31.2 tokens/s · first token p50 0.08 s · queue 0 · 0 errors'."""
    n = int(data.get("requests") or 0)
    parts = [f"{n:,} request{'' if n == 1 else 's'}", f"{float(data.get('requests_per_s') or 0):.2f}/s",
             f"{float(data.get('tokens_per_s') or 0):.1f} tokens/s"]
    if data.get("ttft_p50_s") is not None:
        parts.append(f"first token p50 {float(data['ttft_p50_s']):.2f} s")
    parts.append(f"queue {int(data.get('queue') or 0)}")
    parts.append(f"{int(data.get('errors') or 0)} errors")
    return " · ".join(parts)


class ServeBar(QWidget):
    """Hidden until a model is served from the page."""

    changed = Signal()  # started, a new line of figures, or ended: the page's Serve button may change

    def __init__(self, client: Any, jobs: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self.job_id: str | None = None
        self.url = ""
        self._sub: Any = None
        self._starting = False  # jobs.start sent, its reply not in yet
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.text = label("", "muted", wrap=True)
        self.text.setAccessibleName("Serving")
        row.addWidget(self.text, 1)
        self.copy_button = QPushButton("Copy URL")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.url))
        self.stop_button = QPushButton("Stop serving")
        self.stop_button.clicked.connect(self.stop)
        row.addWidget(self.copy_button)
        row.addWidget(self.stop_button)
        jobs.job_changed.connect(self._job_changed)
        self.hide()

    @property
    def serving(self) -> bool:
        return self.job_id is not None

    def start(self, ref: dict[str, Any], title: str) -> None:
        """Serve ``ref`` on any free loopback port."""
        if self.serving or self._starting:
            return
        self.url, self._starting = "", True
        self._set(f"Starting a server for {title}…", busy=True)
        since = self._client.last_seq  # the job's events all come after this

        def failed(err: Any) -> None:
            self._starting = False
            self._set(f"Could not serve: {err}")

        self._client.request("jobs.start", {"kind": SERVE, "spec": {"model": ref, "port": 0}, "name": title},
                             lambda job: self._follow(job, since), failed)

    def adopt(self, jobs: list[dict[str, Any]]) -> None:
        """Show a serve job still running from before (the window was closed and opened again)."""
        if self.serving or self._starting:
            return
        running = [j for j in jobs if j.get("kind") == SERVE and j.get("state") == RUNNING]
        if running:
            job = max(running, key=lambda j: j.get("created_at") or 0)
            self._follow(job, None)  # every serving event repeats the URL: live ones are enough
            self._set(f"Serving {job.get('name') or job['id']}: waiting for its next figures…", busy=False)

    def _follow(self, job: dict[str, Any], since: int | None) -> None:
        self._starting = False
        self.job_id = job["id"]
        self._sub = self._client.subscribe([f"run/{job['id']}/serving"], self._on_event, since=since)

    def _on_event(self, _topic: str, _seq: int, data: dict[str, Any]) -> None:
        if data.get("url"):
            self.url = str(data["url"])
        if self.url:
            line = f"Serving {data.get('model', '')} at {self.url} (OpenAI-compatible)"
            self._set(line + (f"\n{figures_text(data)}" if "requests" in data else ""), busy=False)

    def _job_changed(self, job: dict[str, Any]) -> None:
        if job.get("id") != self.job_id or job.get("state") not in FINAL_STATES:
            return
        error = job.get("error") or {}
        self._end()
        if job["state"] == "failed":
            self._set(f"The server stopped: {error.get('message', 'failed')}"
                      + (f"\n{error['hint']}" if error.get("hint") else ""))
        else:
            self._set("")

    def stop(self) -> None:
        if self.job_id:
            self._client.request("jobs.stop", {"id": self.job_id}, lambda _j: None,
                                 lambda err: self._set(f"Could not stop the server: {err}"))
            self.stop_button.setEnabled(False)

    def _end(self) -> None:
        if self._sub is not None:
            self._client.unsubscribe(self._sub)
        self._sub, self.job_id = None, None

    def _set(self, text: str, busy: bool = False) -> None:
        show_text(self.text, text)
        self.setVisible(bool(text))
        self.copy_button.setVisible(bool(self.url) and self.serving)
        self.stop_button.setVisible(self.serving)
        self.stop_button.setEnabled(self.serving and (not busy or bool(self.url)))
        self.changed.emit()
