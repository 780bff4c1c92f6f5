"""Download a model (or a dataset) from the Hugging Face Hub into the standard cache, resumably, with progress.

huggingface_hub's own downloader writes each file to a temporary name and deletes it when the
transfer fails, so a stopped or broken download starts again from zero. Here each file is fetched
into ``blobs/<etag>.incomplete`` in the cache (the name earlier huggingface_hub versions used) and
continued with an HTTP ``Range`` request, within a run when the link drops and in the next run after
a stop. A finished file is checked against its hash (sha256 for LFS files, the git blob id for the
others) before it takes its place as ``blobs/<etag>``; ``snapshot_download`` then finds every blob
present and only writes the snapshot's links, refs and file listing. The result is the cache
layout every Hugging Face library reads, under ``HF_HOME`` (or ``HF_HUB_CACHE``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK_BYTES = 256 * 1024  # a dropped link loses at most this much of what had arrived
ATTEMPTS = 5  # tries per file without progress before giving up
REPORT_EVERY_S = 0.5
SPEED_WINDOW_S = 5.0
DISK_MARGIN_BYTES = 64 * 1024 * 1024  # left free beyond the download, for the cache's links and the run's files

Progress = Callable[[dict[str, Any]], None]


class Stopped(Exception):
    """The user asked the job to stop: the partial file stays for the next run."""


@dataclass
class Plan:
    name: str  # path in the repo
    url: str
    etag: str
    size: int | None


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds + 0.5)
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Meter:
    """Bytes done of the total, the speed over the last few seconds, and an ETA; reported at most twice a second."""

    def __init__(self, total: int, done: int, report: Progress | None, now: Callable[[], float] = time.monotonic):
        self.total, self.done, self.report, self.now = total, done, report, now
        self.file = ""
        self.samples: list[tuple[float, int]] = [(now(), done)]
        self.last_report = 0.0

    def add(self, n: int) -> None:
        self.done += n
        t = self.now()
        self.samples.append((t, self.done))
        while len(self.samples) > 2 and t - self.samples[0][0] > SPEED_WINDOW_S:
            self.samples.pop(0)
        if t - self.last_report >= REPORT_EVERY_S:
            self.send()

    def speed(self) -> float:
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else 0.0

    def fields(self) -> dict[str, Any]:
        speed = self.speed()
        left = max(0, self.total - self.done)
        eta = left / speed if speed > 0 and left else None
        fraction = self.done / self.total if self.total else 1.0
        message = f"{human_bytes(self.done)} of {human_bytes(self.total)}"
        if speed > 0 and left:
            message += f", {human_bytes(speed)}/s, ETA {clock(eta)}"
        if self.file and left:
            message += f" ({self.file})"
        return {"stage": "download", "fraction": round(min(fraction, 1.0), 4), "bytes_done": self.done,
                "bytes_total": self.total, "speed_bps": round(speed, 1), "eta_s": None if eta is None else round(eta, 1),
                "file": self.file, "message": message}

    def send(self) -> None:
        self.last_report = self.now()
        if self.report is not None:
            self.report(self.fields())


def git_blob_sha1(path: Path) -> str:
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def matches_etag(path: Path, etag: str) -> bool:
    """True when the file's hash is its etag (sha256 for LFS files, the git blob id for the others);
    also True for an etag of another form, which says nothing checkable."""
    if len(etag) == 64 and all(c in "0123456789abcdef" for c in etag):
        return sha256(path) == etag
    if len(etag) == 40 and all(c in "0123456789abcdef" for c in etag):
        return git_blob_sha1(path) == etag
    return True


def check_space(where: Path, needed: int, repo_id: str) -> None:
    from engine.training.context import JobFailed

    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed + DISK_MARGIN_BYTES > free:
        raise JobFailed(f"Not enough disk space to download {repo_id}: it needs {human_bytes(needed)} more, "
                        f"and {human_bytes(free)} is free on the disk holding {probe}",
                        "Free space on that disk, or set HF_HOME (or HF_HUB_CACHE) to a folder on a bigger disk "
                        "and start again; what is already downloaded is kept and continued.")


def fetch_file(plan: Plan, part: Path, meter: Meter, should_stop: Callable[[], bool],
               log: Callable[[str], None]) -> None:
    """Fetch ``plan.url`` into ``part``, continuing from the bytes already there; Stopped on request."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

    failures = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        if plan.size is not None and have > plan.size:  # not this file: start it again
            part.unlink()
            meter.add(-have)
            have = 0
        if plan.size is not None and have == plan.size:
            return
        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"  # the byte offsets are of the file itself
        if have:
            headers["Range"] = f"bytes={have}-"
        got = 0
        try:
            with http_stream_backoff("GET", plan.url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
                                     max_retries=0, retry_on_exceptions=(), retry_on_status_codes=()) as response:
                hf_raise_for_status(response)
                mode = "ab"
                if have and response.status_code == 200:  # the server ignored the range: the whole file again
                    meter.add(-have)
                    mode, have = "wb", 0
                with open(part, mode) as fh:
                    for chunk in response.iter_bytes(chunk_size=CHUNK_BYTES):
                        fh.write(chunk)
                        got += len(chunk)
                        meter.add(len(chunk))
                        if should_stop():
                            raise Stopped()
            if plan.size is None:
                return
        except (httpx2.TransportError, OSError) as exc:
            from engine.training.context import disk_full

            if disk_full(exc, part, "") is not None or not isinstance(exc, httpx2.TransportError):
                raise
            failures = 0 if got else failures + 1
            if failures >= ATTEMPTS:
                raise
            log(f"the connection dropped while downloading {plan.name} ({type(exc).__name__}); "
                f"continuing from byte {have + got:,}")
            time.sleep(min(0.2 * 2 ** failures, 5.0))


def download(repo_id: str, revision: str | None, report: Progress | None = None,
             should_stop: Callable[[], bool] = lambda: False, log: Callable[[str], None] = lambda _m: None,
             repo_type: str = "model") -> Path:
    """Download the repo (``repo_type`` model or dataset) into the Hugging Face cache and return its snapshot folder.

    Raises Stopped when ``should_stop`` turned true (the partial file is kept), and huggingface_hub's
    errors (GatedRepoError, RepositoryNotFoundError, connection errors) as they come.
    """
    from huggingface_hub import (
        HfApi,
        constants,
        get_hf_file_metadata,
        hf_hub_url,
        snapshot_download,
    )
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import (
        WeakFileLock,
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    info = HfApi().repo_info(repo_id, repo_type=repo_type, revision=revision, files_metadata=True,
                             timeout=constants.HF_HUB_ETAG_TIMEOUT)
    commit = info.sha
    storage = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type=repo_type)
    blobs = storage / "blobs"
    plans = []
    for sibling in info.siblings or []:
        url = hf_hub_url(repo_id, sibling.rfilename, repo_type=repo_type, revision=commit)
        meta = get_hf_file_metadata(url, timeout=constants.HF_HUB_ETAG_TIMEOUT)
        plans.append(Plan(sibling.rfilename, meta.location, meta.etag or "", meta.size or sibling.size))
    total = sum(p.size or 0 for p in plans)
    done = 0
    for p in plans:
        blob, part = blobs / p.etag, blobs / f"{p.etag}.incomplete"
        done += (p.size or 0) if blob.exists() else (part.stat().st_size if part.exists() else 0)
    check_space(blobs, total - done, repo_id)
    log(f"{repo_id} at {commit}: {len(plans)} files, {human_bytes(total)}"
        + (f", {human_bytes(done)} of it already here" if done else ""))
    meter = Meter(total, done, report)
    meter.send()
    blobs.mkdir(parents=True, exist_ok=True)
    locks = Path(constants.HF_HUB_CACHE) / ".locks" / storage.name
    locks.mkdir(parents=True, exist_ok=True)
    for p in plans:
        if should_stop():
            raise Stopped()
        blob, part = blobs / p.etag, blobs / f"{p.etag}.incomplete"
        # Several processes (the ranks of one fine-tune) may fetch the same model: one writes each file.
        with WeakFileLock(locks / f"{p.etag}.lock"):
            if blob.exists():
                continue
            meter.file = p.name
            fetch_file(p, part, meter, should_stop, log)
            if not matches_etag(part, p.etag):
                size = part.stat().st_size
                part.unlink()
                meter.add(-size)
                raise OSError(f"{p.name} arrived damaged (its hash is not {p.etag}); it was deleted, "
                              "start the download again")
            with contextlib.suppress(OSError):
                os.chmod(part, 0o644)
            os.replace(part, blob)
    meter.file = ""
    meter.send()
    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # every blob is here: this only writes the snapshot's links, refs and listing
    try:
        folder = snapshot_download(repo_id, repo_type=repo_type, revision=revision)
    finally:
        if not quiet:
            enable_progress_bars()
    return Path(folder)
