"""A really full disk (a small tmpfs as EMBER_HOME, so the store sits on it too).

The fine-tune fails with a message naming the disk and its free space (no traceback), written into the
space it kept past the end of its events.jsonl (engine.api.events_file), the last
good checkpoint and the store stay intact, the engine keeps answering while its own store cannot
grow, and once the disk is grown (remount) one jobs.resume finishes the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

from engine.daemon import store_guard
from engine.training import checkpoint
from tests.conftest import alive, wait_for
from tests.faults.conftest import (
    digits,
    file_events,
    loss_steps,
    mount_tmpfs,
    wait_final,
)

pytestmark = pytest.mark.slow


def _fill(path: Path) -> int:
    """Write until the filesystem refuses (ENOSPC), down to the last bytes; returns the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (64 * 1024, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    written += os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return written


def test_a_full_disk_fails_the_run_cleanly_and_it_resumes_once_space_is_freed(ember_home, start_engine,
                                                                                fault_report):
    home = ember_home.home
    why = mount_tmpfs(home, 48 * 1024)
    if why:
        pytest.skip(why)
    try:
        eng = start_engine(**{checkpoint.FAULT_DELAY_ENV: "0.5"})
        with eng.client() as c:
            job = c.call("jobs.start", kind="train.finetune", spec=digits(max_steps=80, checkpoint_every=20))
            run_dir = Path(job["run_dir"])
            wait_for(lambda: (run_dir / "checkpoints" / "step-00000020").is_dir(), timeout=90,
                     what="the first checkpoint")
            filled = _fill(home / "filler.bin")
            with pytest.raises(OSError) as full:
                (home / "probe").write_bytes(b"x" * 8192)
            assert full.value.errno == errno.ENOSPC
            pid = c.call("jobs.get", id=job["id"])["pid"]
            wait_for(lambda: not alive(pid), timeout=60, what="the job to end on the full disk")
            # The engine answers while its store cannot grow, and the store is intact.
            assert c.call("engine.status")["store"]["integrity"] == "ok"
            assert c.call("jobs.get", id=job["id"])["id"] == job["id"]
            assert store_guard.check(ember_home.db) == "ok"
            last = file_events(run_dir)[-1]
            assert last["kind"] == "status" and last["state"] == "failed", last
            assert last["message"].startswith("The disk is full: ") and "free on the disk holding" in last["message"]
            assert "Traceback" not in last["message"] and "resume" in last["hint"]
            ckpts = run_dir / "checkpoints"
            latest = ckpts / (ckpts / "latest").read_text()
            assert checkpoint.verify(latest) is None and not list(ckpts.glob(".step-*.tmp"))

            # Space freed: the filesystem is grown; the engine records the end, then one call resumes.
            subprocess.run(["mount", "-o", f"remount,size={96 * 1024}k", str(home)], check=True)
            failed = wait_final(c, job["id"])
            assert failed["state"] == "failed" and failed["error"]["message"] == last["message"]
            c.call("jobs.resume", id=job["id"])
            done = wait_final(c, job["id"])
            assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
            steps = loss_steps(c, job["id"])
            # The space the job kept past the end of its events.jsonl (for its last events) is given back.
            events = os.stat(run_dir / "events.jsonl")
            assert events.st_blocks * 512 < events.st_size + 64 * 1024, (events.st_size, events.st_blocks)
        assert steps == list(range(1, 81))
        assert store_guard.check(ember_home.db) == "ok"
        fault_report("4 disk full", f"tmpfs EMBER_HOME filled ({filled // 1024} kB filler)",
                     f"clean error, {latest.name} + store intact, resumed", "80 loss rows", f"{len(steps)} loss rows")
    finally:
        subprocess.run(["umount", "-l", str(home)], capture_output=True)


def test_torch_saves_short_write_is_a_full_disk_only_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    """torch.save reports a short write as "unexpected pos" without an errno: full disk or not, by free space."""
    import collections

    from engine.training import context

    usage = collections.namedtuple("usage", "total used free")
    err = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
    monkeypatch.setattr(context.shutil, "disk_usage", lambda _p: usage(10**9, 10**9, 4096))
    full = context.disk_full(err, tmp_path, "writing a checkpoint")
    assert full is not None and str(full).startswith("The disk is full: writing a checkpoint failed (4 kB free")
    monkeypatch.setattr(context.shutil, "disk_usage", lambda _p: usage(10**12, 10**11, 9 * 10**11))
    assert context.disk_full(err, tmp_path, "writing a checkpoint") is None  # a short write on a roomy disk
    assert context.disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path, "x") is not None
