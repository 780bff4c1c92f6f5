"""Serve the Playground's model: a serve.model job (docs/serve.md) started from the page, and a bar with its URL,
its live figures (a line of text), Copy URL, Stop, and under Details (folded at first, so the conversation keeps
its room) a small chart of tokens/s and requests/s and a load test (N streaming clients for T seconds,
engine/api/load_test.py, what ``ember bench-serve`` runs).

The job's ``serving`` events (``run/<id>/serving``) bring the URL (the first) and the figures (every 2 s);
the window's JobsState says when the job ends (stopped, or failed with its message). One served model at a
time from here; ``ember serve`` and the Runs page show every serve job.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout, QWidget

from app.widgets.charts import LiveChart
from app.widgets.common import label, show_text
from engine.api.job_terms import FINAL_STATES, RUNNING, SERVE
from engine.api.load_test import load_test


def figures_text(data: dict[str, Any], last_speed: float | None = None) -> str:
    """'12 requests · 0.50/s · 31.2 tokens/s · first token p50 0.08 s · queue 0 · 0 errors'. tokens/s is that of
    the answers that ended in the job's last report (engine.api.playground.tokens_per_s: the chat line's figure),
    else ``last_speed``, the last one seen ('last answer'); never a 0 for an idle server."""
    n = int(data.get("requests") or 0)
    parts = [f"{n:,} request{'' if n == 1 else 's'}", f"{float(data.get('requests_per_s') or 0):.2f}/s"]
    if data.get("tokens_per_s") is not None:
        parts.append(f"{float(data['tokens_per_s']):.1f} tokens/s")
    elif last_speed is not None:
        parts.append(f"{last_speed:.1f} tokens/s (last answer)")
    if data.get("ttft_p50_s") is not None:
        parts.append(f"first token p50 {float(data['ttft_p50_s']):.2f} s")
    parts.append(f"queue {int(data.get('queue') or 0)}")
    parts.append(f"{int(data.get('errors') or 0)} errors")
    return " · ".join(parts)


def load_test_text(result: dict[str, Any]) -> str:
    """'Load test, 4 clients for 10 s: 12 requests, 80.1 tokens/s, first token p50 0.21 s, p99 0.80 s, 0 errors'."""
    def secs(v: Any) -> str:
        return "-" if v is None else f"{float(v):.2f} s"

    return (f"Load test, {result['clients']} clients for {result['seconds']:.0f} s: {result['requests']} requests, "
            f"{result['tokens_per_s']:.1f} tokens/s, first token p50 {secs(result['ttft_p50_s'])}, "
            f"p99 {secs(result['ttft_p99_s'])}, {result['errors']} errors"
            + (f" ({result['error_examples'][0]})" if result.get("error_examples") else ""))


class ServeBar(QWidget):
    """Hidden until a model is served from the page."""

    changed = Signal()  # started, a new line of figures, or ended: the page's Serve button may change
    ended = Signal(str)  # the URL that no longer serves (the pickers drop it)
    load_tested = Signal(object)  # a load test's result (from its thread), or the exception that ended it

    def __init__(self, client: Any, jobs: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self.job_id: str | None = None
        self.url = ""
        self.key_file = ""  # the server wants the API key in this file (a job bound beyond loopback)
        self._sub: Any = None
        self._starting = False  # jobs.start sent, its reply not in yet
        self._t0: float | None = None  # when the first figures came: the chart's x is seconds since
        self.last_speed: float | None = None  # tokens/s of the last answers that ended (the bar keeps showing it)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        column.addLayout(row)
        self.text = label("", "muted", wrap=True)
        self.text.setAccessibleName("Serving")
        row.addWidget(self.text, 1)
        self.copy_button = QPushButton("Copy URL")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.url))
        self.stop_button = QPushButton("Stop serving")
        self.stop_button.clicked.connect(self.stop)
        self.details_button = QPushButton("Details")
        self.details_button.setCheckable(True)
        self.details_button.setToolTip("The chart of tokens/s and requests/s, and the load test")
        self.details_button.toggled.connect(self._show_details)
        row.addWidget(self.details_button)
        row.addWidget(self.copy_button)
        row.addWidget(self.stop_button)

        self.chart = LiveChart("Served", "tokens/s", right_label="requests/s")
        self.chart.plot.getPlotItem().setLabel("bottom", "seconds serving")
        self.chart.add_series("tokens/s")
        self.chart.add_series("requests/s", right=True)
        self.chart.start_at_zero()
        self.chart.setFixedHeight(200)
        self.chart.hide()
        column.addWidget(self.chart)

        tests = QHBoxLayout()
        column.addLayout(tests)
        self.clients = QSpinBox()
        self.clients.setRange(1, 256)
        self.clients.setValue(4)
        self.clients.setSuffix(" clients")
        self.clients.setToolTip("Streaming clients at once, each sending one request after another")
        self.seconds = QSpinBox()
        self.seconds.setRange(1, 3600)
        self.seconds.setValue(10)
        self.seconds.setSuffix(" s")
        self.load_button = QPushButton("Load test")
        self.load_button.setToolTip("N streaming clients for T seconds against the URL: time to first token "
                                    "(p50, p99), tokens/s, errors (what `ember bench-serve URL` prints)")
        self.load_button.clicked.connect(self.run_load_test)
        self.load_result = QLabel("")
        self.load_result.setWordWrap(True)
        for w in (self.clients, self.seconds, self.load_button):
            tests.addWidget(w)
        tests.addWidget(self.load_result, 1)
        self._test_row = [self.clients, self.seconds, self.load_button, self.load_result]
        self.load_tested.connect(self._load_test_done)
        jobs.job_changed.connect(self._job_changed)
        self.hide()

    def run_load_test(self) -> None:
        """The load test on its own thread (it blocks for its seconds); its result comes back as a signal."""
        if not self.url:
            return
        url, clients, seconds, key_file = self.url, self.clients.value(), float(self.seconds.value()), self.key_file
        self.load_button.setEnabled(False)
        self.load_result.setText(f"Load test running: {clients} clients for {seconds:.0f} s…")

        def work() -> None:
            try:
                key = Path(key_file).read_text().strip() if key_file else None
                self.load_tested.emit(load_test(url, clients, seconds, max_tokens=32, api_key=key))
            except Exception as exc:  # noqa: BLE001 - shown to the user
                self.load_tested.emit(exc)

        threading.Thread(target=work, name="load-test", daemon=True).start()

    def _load_test_done(self, result: Any) -> None:
        self.load_button.setEnabled(self.serving)
        if isinstance(result, Exception):
            self.load_result.setText(f"The load test stopped: {type(result).__name__}: {result}")
        else:
            self.load_result.setText(load_test_text(result))

    @property
    def serving(self) -> bool:
        return self.job_id is not None

    def start(self, ref: dict[str, Any], title: str, host: str | None = None) -> None:
        """Serve ``ref`` on any free loopback port, here or on the SSH host ``host`` (forwarded here)."""
        if self.serving or self._starting:
            return
        self.url, self._starting = "", True
        self._set(f"Starting a server for {title}" + (f" on {host} (copying the model there)…" if host else "…"),
                  busy=True)
        since = self._client.last_seq  # the job's events all come after this

        def failed(err: Any) -> None:
            self._starting = False
            self._set(f"Could not serve: {err}")

        spec: dict[str, Any] = {"model": ref, "port": 0, **({"host": host} if host else {})}
        self._client.request("jobs.start", {"kind": SERVE, "spec": spec, "name": title},
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
        if data.get("api_key_file"):
            self.key_file = str(data["api_key_file"])
        if self.url:
            line = f"Serving {data.get('model', '')} at {self.url} (OpenAI-compatible)"
            if data.get("host"):
                line += f", on {data['host']} ({data.get('remote_url')} there, forwarded here)"
            if self.key_file:
                line += f", listening on {data.get('bind') or 'every address'}; clients send the API key in {self.key_file}"
            if data.get("tokens_per_s") is not None:
                self.last_speed = float(data["tokens_per_s"])
            self._set(line + (f"\n{figures_text(data, self.last_speed)}" if "requests" in data else ""), busy=False)
        if "requests_per_s" in data:
            now = time.monotonic()
            self._t0 = self._t0 if self._t0 is not None else now
            x = int(round(now - self._t0))
            if data.get("tokens_per_s") is not None:  # a point per report in which answers ended
                self.chart.append("tokens/s", x, float(data["tokens_per_s"]))
            self.chart.append("requests/s", x, float(data.get("requests_per_s") or 0))
            self.chart.setVisible(self.details_button.isChecked())

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
        if self.url:
            self.ended.emit(self.url)
        if self._sub is not None:
            self._client.unsubscribe(self._sub)
        self._sub, self.job_id, self._t0, self.key_file = None, None, None, ""
        self.chart.clear()
        self.chart.hide()
        self.details_button.setChecked(False)

    def _set(self, text: str, busy: bool = False) -> None:
        show_text(self.text, text)
        self.setVisible(bool(text))
        self.copy_button.setVisible(bool(self.url) and self.serving)
        self.stop_button.setVisible(self.serving)
        self.stop_button.setEnabled(self.serving and (not busy or bool(self.url)))
        self.details_button.setVisible(self.serving and bool(self.url))
        self._show_details(self.details_button.isChecked())

    def _show_details(self, on: bool) -> None:
        shown = on and self.serving and bool(self.url)
        for w in self._test_row:
            w.setVisible(shown)
        self.chart.setVisible(shown and self.chart.count("requests/s") > 0)
        self.changed.emit()
