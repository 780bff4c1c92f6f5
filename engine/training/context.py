"""The job side of the engine contract: what every recipe process uses.

A job runs as ``python -m <module> --run-dir DIR``. It reads ``DIR/spec.yaml``,
appends events to ``DIR/events.jsonl`` (one JSON object a line, flushed per
line), may write ``DIR/result.json``, and ends with a ``status`` event. SIGTERM
asks it to stop gracefully (``ctx.stop_requested``). It never needs the engine.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from engine.api import events_file
from engine.api.failures import JobFailed  # noqa: F401 - where a job's code has always found it
from engine.api.specs import Spec, SpecError, validate_spec

# Kept free in the run dir (``.reserve``) and given up when the disk fills, so the job can still
# write why it failed: a job that dies silently on a full disk leaves the user a bare exit code.
RESERVE_BYTES = 256 * 1024
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_WORDS = ("no space left", "disk is full", "disk quota", "file write failed")
# torch.save's zip writer reports a short write as "unexpected pos N vs M" (inline_container.cc), without
# an errno: a full disk when the disk holding the file has (almost) nothing free.
_WRITE_FAILED_WORDS = ("unexpected pos",)
_NEARLY_FULL = 64 << 20


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None, for strict JSON.

    json.dumps writes them as bare NaN/Infinity, which is not JSON: other readers (jq, browsers, most
    languages' parsers) reject the whole line. A diverged run's perplexity is such a number.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def to_json(value: Any, **kwargs: Any) -> str:
    """Strict JSON of ``value``: non-finite numbers as null, anything else unknown as its str()."""
    return json.dumps(json_safe(value), allow_nan=False, default=str, **kwargs)


def _free_text(path: Path) -> str:
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return "unknown"
    return f"{free / 1e9:.2f} GB" if free >= 1e8 else f"{free / 1e6:.1f} MB" if free >= 1e5 else f"{free / 1e3:.0f} kB"


def disk_full(exc: BaseException, path: Path, what: str) -> JobFailed | None:
    """A JobFailed naming the disk and its free space when ``exc`` (or its cause) is a full disk, else None.

    torch.save reports a full disk as a RuntimeError ("file write failed") without an errno, so
    the message is read too.
    """
    seen: BaseException | None = exc
    full = short_write = False
    while seen is not None and not full:
        text = str(seen).lower()
        full = (isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS) or any(w in text for w in _FULL_WORDS)
        short_write = short_write or any(w in text for w in _WRITE_FAILED_WORDS)
        seen = seen.__cause__ or seen.__context__
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    if not full and short_write:
        try:
            full = shutil.disk_usage(path).free < _NEARLY_FULL
        except OSError:
            full = False
    if not full:
        return None
    return JobFailed(f"The disk is full: {what} failed ({_free_text(path)} free on the disk holding {path})",
                     "Free space on that disk (or point EMBER_HOME at a bigger one), then resume the run: "
                     "it continues from its last complete checkpoint.")


class JobContext:
    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.stop_requested = False
        # One unbuffered O_APPEND write per event: a failed write leaves nothing queued to repeat later,
        # and lines from several ranks never interleave.
        self._fd = os.open(self.run_dir / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._torn = False  # a write failed part-way: the next event starts on a fresh line
        self._kept_to = 0  # the end of the space kept past events.jsonl's end (engine.api.events_file)
        self._keep_tail()
        self._reserve = self.run_dir / ".reserve"
        with contextlib.suppress(OSError):
            if not self._reserve.exists():
                with open(self._reserve, "wb") as f:
                    os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)

    def release_reserve(self) -> None:
        """Give the reserved space back (the disk is full): enough for the final events."""
        with contextlib.suppress(OSError):
            self._reserve.unlink()

    def emit(self, kind: str, **data: Any) -> None:
        record = {"t": time.time(), "kind": kind, **data}
        line = ("\n" if self._torn else "") + to_json(record, separators=(",", ":")) + "\n"
        raw = line.encode("utf-8")
        try:
            written = os.write(self._fd, raw)
        except OSError:
            self._torn = True
            raise
        self._torn = written < len(raw)
        if self._torn:
            raise OSError(errno.ENOSPC, f"only {written} of {len(raw)} bytes of an event were written",
                          str(self.run_dir / "events.jsonl"))
        self._keep_tail()

    def _keep_tail(self) -> None:
        """Keep RESERVE_BYTES past the end of events.jsonl, topped up once half is used: the final
        events of a job on a full disk go there (a full disk fails the top-up; what is left stays)."""
        with contextlib.suppress(OSError):
            size = os.fstat(self._fd).st_size
            if self._kept_to - size < RESERVE_BYTES // 2 and events_file.keep_tail(self._fd, size, RESERVE_BYTES):
                self._kept_to = size + RESERVE_BYTES

    def log(self, message: str) -> None:
        """A line for stdout.log, the job's human-readable log."""
        sys.stdout.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        sys.stdout.flush()

    def status(self, state: str, **data: Any) -> None:
        self.emit("status", state=state, **data)

    def write_result(self, result: dict[str, Any]) -> None:
        tmp = self.run_dir / "result.json.tmp"
        tmp.write_text(to_json(result, indent=1), encoding="utf-8")
        os.replace(tmp, self.run_dir / "result.json")

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; returns early (True) when a stop was requested."""
        end = time.monotonic() + seconds
        while not self.stop_requested and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        return self.stop_requested

    def close(self) -> None:
        os.close(self._fd)
        with contextlib.suppress(OSError):
            self._reserve.unlink()  # the job is over: the space is the user's again


def load_spec(run_dir: Path) -> tuple[str, Spec]:
    import yaml

    doc = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8"))
    return doc["kind"], validate_spec(doc["kind"], doc.get("spec") or {})


def record_environment(run_dir: Path) -> None:
    """Versions as the job ran them (for the lineage report): packages, Python, Ember and its git commit."""
    if os.environ.get("RANK", "0") != "0":
        return  # one record per run: torchrun's other ranks run the same code
    from engine.api.versions import code_version, installed_versions

    doc = {"t": time.time(), "python": sys.version.split()[0], "packages": installed_versions(),
           "code": {**code_version(), "recorded": "when the job ran"}}
    tmp = run_dir / ".environment.json.tmp"
    try:
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, run_dir / "environment.json")
    except OSError:  # a full disk is reported by the job's own writes; this record is best effort
        tmp.unlink(missing_ok=True)


def exit_process(code: int) -> NoReturn:
    """End the job's process with ``code``: its exit handlers run and its output is flushed, but Python's
    teardown of every loaded module is skipped (2 s at the end of a job with PyTorch and transformers loaded,
    measured on 2 cores, while the engine still shows it running). A process whose other threads still work,
    or one of several ranks (torchrun and the process group end their own way), exits the usual way."""
    import atexit
    import threading

    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if busy or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run_job(main: Callable[[JobContext, Any], str | None], argv: list[str] | None = None) -> int:
    """Run a recipe's ``main(ctx, spec)``; report its outcome as the final status event."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    ctx = JobContext(args.run_dir)

    def on_term(_signum: int, _frame: Any) -> None:
        ctx.stop_requested = True

    signal.signal(signal.SIGTERM, on_term)
    ctx.status("running", pid=os.getpid())
    record_environment(args.run_dir)
    try:
        _kind, spec = load_spec(args.run_dir)
        final = main(ctx, spec) or ("stopped" if ctx.stop_requested else "succeeded")
        ctx.status(final)
        return 0
    except (JobFailed, SpecError) as exc:
        if disk_full(exc, args.run_dir, "writing"):
            ctx.release_reserve()
        # reason: a word a program can test (e.g. "diverged"), beside the message for people
        reason = {"reason": exc.reason} if getattr(exc, "reason", "") else {}
        ctx.emit("error", message=str(exc), hint=getattr(exc, "hint", ""), **reason)
        ctx.status("failed", message=str(exc), hint=getattr(exc, "hint", ""), **reason)
        return 1
    except Exception as exc:  # noqa: BLE001 - every failure must reach the user as an event
        full = disk_full(exc, args.run_dir, f"writing ({type(exc).__name__}: {exc})")
        if full is not None:
            ctx.release_reserve()
            message, hint = str(full), full.hint
        else:
            traceback.print_exc(file=sys.stderr)
            message = f"{type(exc).__name__}: {exc}"
            hint = "See stdout.log in the run directory for the traceback."
        ctx.emit("error", message=message, hint=hint)
        ctx.status("failed", message=message, hint=hint)
        return 1
    finally:
        ctx.close()
