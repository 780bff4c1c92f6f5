"""What ``ember run`` prints while it follows a job: a progress bar for a person, JSON lines for a program.

Both are fed the events a subscription delivers, ``{topic, seq, t, data}`` (docs/protocol.md):
``run/<id>/train`` (step, loss, samples_per_s, tokens_per_s, progress, eta_s), ``run/<id>/progress``
(stage, fraction, message: compression and export jobs), ``run/<id>/sample`` (system.probe),
``eval``, ``checkpoint``, ``warning``, ``error``, ``status`` ..., and the job's record on ``jobs``.

On a terminal the bar is one line redrawn in place; warnings, errors and evaluations are printed in
words on their own lines above it. When stdout is not a terminal (a log file, a pipe, CI) the same
line is printed plainly now and then, with no carriage returns or escape codes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from engine.api.job_terms import (
    FAILED,
    FINAL_STATES,
    QUEUED,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    SYSTEM_PROBE,
    kind_noun,
)

PLAIN_EVERY_S = 10.0  # without a terminal: at most one progress line this often (plus the first and last)
BAR_CELLS = 20
ERASE = "\x1b[K"  # clear from the cursor to the end of the line
# Evaluation metrics worth a line; the rest (per-class figures) stay in the events and the GUI.
# What an eval line shows, in this order where present: a classifier's scores, a language model's answers
# (generated at each evaluation), a preference run's rewards, then perplexity and loss.
HEADLINE_METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "f1", "exact_match", "token_f1", "reward_accuracy",
                    "reward_margin", "perplexity", "loss")


class Display(Protocol):
    def started(self, job: dict[str, Any]) -> None: ...
    def event(self, ev: dict[str, Any]) -> None: ...
    def tick(self) -> None: ...
    def finished(self, job: dict[str, Any]) -> None: ...
    def detached(self, job: dict[str, Any]) -> None: ...


def duration(seconds: float | None) -> str:
    """``0:07``, ``12:34``, ``1:02:03``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0, int(seconds + 0.5))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def rate(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}/s" if value >= 100 else f"{value:.1f} {unit}/s"


def metric(name: str, value: Any) -> str:
    if not isinstance(value, (int, float)):
        return f"{name} {value}"
    if ("accuracy" in name or name in ("exact_match", "token_f1")) and 0 <= value <= 1:
        return f"{name} {value:.1%}"
    return f"{name} {value:.4g}"


def headline(metrics: dict[str, Any]) -> str:
    names = [n for n in HEADLINE_METRICS if n in metrics] or list(metrics)[:3]
    return ", ".join(metric(n, metrics[n]) for n in names)


class JsonLines:
    """``--json``: the job record as ``{"job": ...}`` when it starts and ends, each event between as one line."""

    def __init__(self, out: TextIO):
        self.out = out

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
        self.out.flush()

    def started(self, job: dict[str, Any]) -> None:
        self._line({"job": job})

    def event(self, ev: dict[str, Any]) -> None:
        # The subscription id only means something on the connection that asked for it.
        self._line({k: ev[k] for k in ("topic", "seq", "t", "data") if k in ev})

    def tick(self) -> None:
        pass

    def finished(self, job: dict[str, Any]) -> None:
        self._line({"job": job})

    def detached(self, job: dict[str, Any]) -> None:
        pass


class ProgressBar:
    """The human view of one job. ``live``: redraw one line with ``\\r`` (a terminal); else plain lines."""

    def __init__(self, out: TextIO, live: bool, quiet: bool = False, every_s: float = PLAIN_EVERY_S,
                 now: Callable[[], float] = time.time, width: Callable[[], int] | None = None):
        self.out, self.live, self.quiet, self.every_s, self.now = out, live, quiet, every_s, now
        self.width = width or (lambda: shutil.get_terminal_size((100, 24)).columns)
        self.job: dict[str, Any] = {}
        self.state = QUEUED
        self.started_at: float | None = None
        self.mode: str | None = None  # train | stage | sample: what the newest progress event was
        self.step: int | None = None
        self.total: int | None = None
        self.loss: float | None = None
        self.throughput: str | None = None
        self.fraction: float | None = None
        self.message = ""
        self.evaluating = ""  # what an evaluation in progress is doing ("evaluating: generating answers 5/30")
        self.eta_s: float | None = None
        self.eta_at: float | None = None  # when eta_s was true
        self.artifacts: list[tuple[str, str]] = []
        self.said: set[str] = set()  # error messages already printed, not repeated in the summary
        self.drawn = False  # live: the bar is on the screen's last line
        self.last_plain: float | None = None  # plain: when the last progress line was printed
        self.plain_done = False  # plain: the line at 100% is printed

    # ---- what comes in
    def started(self, job: dict[str, Any]) -> None:
        self.job = dict(job)
        self.state = job.get("state") or QUEUED
        self.started_at = job.get("started_at")
        if job.get("kind") == SYSTEM_PROBE:
            self.total = (job.get("spec") or {}).get("samples") or None
        self.note(f"started {job['id']} ({job['kind']}), run dir {job['run_dir']}", always=True)
        if self.state == QUEUED and not self.live:
            self.note(self.line())
        self.draw(changed=False)

    def event(self, ev: dict[str, Any]) -> None:
        data = ev.get("data") or {}
        topic = str(ev.get("topic", ""))
        t = data.get("t") if isinstance(data.get("t"), (int, float)) else ev.get("t")
        if topic == "jobs":
            self.job.update(data)
            was, self.state = self.state, data.get("state") or self.state
            self.started_at = self.started_at or data.get("started_at")
            if self.state == QUEUED and was != QUEUED and not self.live:
                self.note(self.line())  # a log says once that the job waits; a terminal's bar says so
            self.draw(changed=False)
            return
        kind = topic.rsplit("/", 1)[-1]
        if self.state == QUEUED:
            self.state = RUNNING  # the job writes events: it left the queue, whatever was said last
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(data, t)

    def _on_status(self, d: dict[str, Any], t: float | None) -> None:
        self.state = d.get("state") or self.state
        if self.state == RUNNING and self.started_at is None:
            self.started_at = t

    def _on_run_info(self, d: dict[str, Any], t: float | None) -> None:
        self.total = d.get("total_steps") or self.total
        self.step = d.get("start_step", self.step)

    def _on_train(self, d: dict[str, Any], t: float | None) -> None:
        self.mode, self.evaluating = "train", ""
        self.step, self.loss = d.get("step", self.step), d.get("loss", self.loss)
        if d.get("progress") and self.step:
            self.total = self.total or round(self.step / d["progress"])
            self.fraction = d["progress"]
        elif self.step and self.total:
            self.fraction = self.step / self.total
        if d.get("tokens_per_s"):
            self.throughput = rate(d["tokens_per_s"], "tokens")
        elif d.get("samples_per_s"):
            self.throughput = rate(d["samples_per_s"], "samples")
        self.eta_s, self.eta_at = d.get("eta_s"), t
        self.draw(changed=True)

    def _on_progress(self, d: dict[str, Any], t: float | None) -> None:
        self.mode = "stage"
        self.fraction, self.message = d.get("fraction"), str(d.get("message") or d.get("stage") or "")
        self.eta_s = None  # stages are not evenly long: estimated from the fraction, if at all
        self.draw(changed=True)

    def _on_sample(self, d: dict[str, Any], t: float | None) -> None:
        self.mode = "sample"
        self.step = int(d.get("step", 0)) + 1
        self.fraction = self.step / self.total if self.total else None
        self.message = f"CPU {d.get('cpu_percent', 0):.0f}%, memory {d.get('memory_percent', 0):.0f}%"
        self.draw(changed=True)

    def _on_setup(self, d: dict[str, Any], t: float | None) -> None:
        """What a job does before its first step (reading the data, loading the model): a line each."""
        if d.get("stage") and not self.quiet:
            self.note(f"setting up: {d['stage']}")

    def _on_serving(self, d: dict[str, Any], t: float | None) -> None:
        """A serve job's address, said once wherever it was started (ember run, ember jobs start)."""
        url = d.get("url")
        if url and url not in self.said:
            self.said.add(url)
            key = f"; clients send the API key in {d['api_key_file']}" if d.get("api_key_file") else ""
            self.note(f"serving {d.get('model') or 'the model'} at {url} (OpenAI-compatible){key}")

    def _on_evaluating(self, d: dict[str, Any], t: float | None) -> None:
        done, total = d.get("done"), d.get("total")
        count = f" {done}/{total}" if isinstance(done, int) and isinstance(total, int) else ""
        self.evaluating = f"evaluating: {d.get('what') or 'validation'}{count}"
        self.draw(changed=True)

    def _on_eval(self, d: dict[str, Any], t: float | None) -> None:
        self.evaluating = ""
        if not self.quiet:
            self.note(f"eval at step {d.get('step')}: {headline(d.get('metrics') or {})}")

    def _on_checkpoint(self, d: dict[str, Any], t: float | None) -> None:
        if not self.quiet:
            self.note(f"checkpoint at step {d.get('step')}: {d.get('path')}")

    def _on_resumed(self, d: dict[str, Any], t: float | None) -> None:
        self.note(f"resumed from step {d.get('step')} ({d.get('checkpoint')})")

    def _on_early_stop(self, d: dict[str, Any], t: float | None) -> None:
        name = str(d.get("metric"))
        self.note(f"early stop at step {d.get('step')}: {name} stopped improving (best {metric(name, d.get('best'))})")

    def _on_stopped(self, d: dict[str, Any], t: float | None) -> None:
        self.note(f"stopped at step {d.get('step')}; checkpoint {d.get('checkpoint')}")

    def _on_launch(self, d: dict[str, Any], t: float | None) -> None:
        self.note(str(d.get("message", "")))

    def _on_warning(self, d: dict[str, Any], t: float | None) -> None:
        self.note(self._problem("warning", d), always=True)

    def _on_error(self, d: dict[str, Any], t: float | None) -> None:
        self.said.add(str(d.get("message")))
        self.note(self._problem("error", d), always=True)

    def _on_artifact(self, d: dict[str, Any], t: float | None) -> None:
        self.artifacts.append((str(d.get("type", "")), str(d.get("path", ""))))

    @staticmethod
    def _problem(word: str, d: dict[str, Any]) -> str:
        where = f" (rank {d['rank']})" if d.get("rank") else ""
        return f"{word}{where}: {d.get('message')}" + (f"\n  hint: {d['hint']}" if d.get("hint") else "")

    def tick(self) -> None:
        """Called about once a second without events: a live bar's clock keeps moving."""
        if self.live:
            self.draw(changed=False)

    # ---- what goes out
    def elapsed(self) -> float | None:
        return None if self.started_at is None else max(0.0, self.now() - self.started_at)

    def eta(self) -> float | None:
        """Seconds left, or None until they can be estimated; never 0 before the end."""
        if (self.fraction is not None and self.fraction >= 1) or self.state in FINAL_STATES:
            return None
        if self.eta_s is not None and self.eta_at is not None:
            left = self.eta_s - (self.now() - self.eta_at)
        elif self.fraction and self.fraction >= 0.1 and self.elapsed():
            left = self.elapsed() * (1 - self.fraction) / self.fraction
        else:
            return None
        return max(left, 1.0)

    def parts(self) -> list[tuple[int, str]]:
        """The line's parts in order, each with its rank: on a narrow terminal the highest ranks go first."""
        parts: list[tuple[int, str]] = []
        if self.state == QUEUED:
            parts.append((0, "queued: waiting for its turn or for resources (`ember queue` says which)"))
        elif self.mode is None:
            parts.append((0, "running: waiting for the first progress report" if self.state == RUNNING
                          else self.state))
        else:
            if self.mode in ("train", "sample") and self.step is not None:
                word = "step" if self.mode == "train" else "sample"
                parts.append((0, f"{word} {self.step}/{self.total}" if self.total else f"{word} {self.step}"))
            if self.fraction is not None:
                parts.append((1, f"{self.fraction:4.0%}"))
            if self.mode == "train":
                if self.evaluating:
                    parts.append((1, self.evaluating))
                if self.loss is not None:
                    parts.append((3, f"loss {self.loss:.4g}"))
                if self.throughput:
                    parts.append((5, self.throughput))
            elif self.message:
                parts.append((5, self.message))
        if self.started_at is not None:
            parts.append((4, f"elapsed {duration(self.elapsed())}"))
        eta = self.eta()
        if eta is not None and self.state != QUEUED:
            parts.append((2, f"ETA {duration(eta)}"))
        return parts

    def line(self, cols: int | None = None) -> str:
        """The progress line without the bar graphic; within ``cols`` characters when given."""
        parts = self.parts()
        text = "  ".join(p for _, p in parts)
        while cols is not None and len(text) > cols and len(parts) > 1:
            parts.remove(max(parts, key=lambda p: p[0]))
            text = "  ".join(p for _, p in parts)
        return text if cols is None or len(text) <= cols else text[: cols - 3] + "..."

    def bar(self) -> str:
        filled = round(BAR_CELLS * min(max(self.fraction or 0.0, 0.0), 1.0))
        return "[" + "#" * filled + "." * (BAR_CELLS - filled) + "]"

    def draw(self, changed: bool) -> None:
        if self.quiet:
            return
        if self.live:
            cols = max(20, self.width()) - 1  # never reach the last column: the terminal would wrap
            text = self.line()
            if len(text) > cols:
                text = self.line(cols)
            elif self.fraction is not None and len(text) + BAR_CELLS + 3 <= cols:
                text = f"{self.bar()} {text}"
            self.out.write("\r" + text + ERASE)
            self.out.flush()
            self.drawn = True
            return
        now, done = self.now(), (self.fraction or 0) >= 1
        due = self.last_plain is None or now - self.last_plain >= self.every_s or (done and not self.plain_done)
        if changed and due and self.mode is not None:
            self.out.write(self.line() + "\n")
            self.out.flush()
            self.last_plain, self.plain_done = now, done

    def note(self, text: str, always: bool = False) -> None:
        """A line of its own, above the bar."""
        if self.quiet and not always:
            return
        if self.drawn:
            self.out.write("\r" + ERASE)
        self.out.write(text + "\n")
        self.out.flush()
        if self.drawn:
            self.draw(changed=False)

    def _end_bar(self) -> None:
        if self.drawn:
            self.out.write("\n")  # the bar's last state stays on screen
            self.drawn = False

    def finished(self, job: dict[str, Any]) -> None:
        self._end_bar()
        self.out.write(summary(job, self.artifacts, self.said) + "\n")
        self.out.flush()

    def detached(self, job: dict[str, Any]) -> None:
        self._end_bar()
        self.out.write(f"no longer following {job['id']}; the job goes on (`ember logs {job['id']}`, "
                       f"`ember stop {job['id']}`)\n")
        self.out.flush()


def summary(job: dict[str, Any], artifacts: list[tuple[str, str]] = (), said: set[str] = frozenset()) -> str:
    """The lines printed when a job ends: its state and duration, best metric, where its outputs are."""
    state = job.get("state") or "?"
    took = (job["ended_at"] - job["started_at"]) if job.get("ended_at") and job.get("started_at") else None
    when = f" in {duration(took)}" if state == SUCCEEDED else f" after {duration(took)}" if took else ""
    name = f" '{job['name']}'" if job.get("name") else ""
    lines = [f"{kind_noun(job.get('kind', ''))}{name} {state}{when} ({job.get('id')})"]
    best = (job.get("summary") or {}).get("best")
    if best:
        lines.append(f"  best {metric(best['metric'], best['value'])} at step {best['step']}")
    error = job.get("error") or {}
    if state == FAILED and error and error.get("message") not in said:
        lines.append(f"  error: {error.get('message')}")
        if error.get("hint"):
            lines.append(f"  hint: {error['hint']}")
    for kind, path in artifacts:
        lines.append(f"  {kind}: {path}")
    if job.get("run_dir"):
        lines.append(f"  run dir: {job['run_dir']}")
    if state == STOPPED:
        lines.append(f"  continue it with `ember resume {job.get('id')}`")
    return "\n".join(lines)


def display_for(out: TextIO, as_json: bool = False, quiet: bool = False) -> Display:
    """JSON lines when asked; else the bar, redrawn in place only on a terminal."""
    if as_json:
        return JsonLines(out)
    return ProgressBar(out, live=_is_terminal(out), quiet=quiet)


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False

