"""Space kept at the end of a job's events.jsonl, so a job on a full disk can still write why it failed.

The job allocates the blocks past the end of the file without changing its size (Linux ``fallocate`` with
FALLOC_FL_KEEP_SIZE); later appends land in them, so the last events need no free space at all, and
nothing else on the disk (the engine's store growing, another job) can take that space first. The engine
gives the blocks back once every process of the job has ended (``release_tail``): only then can no rank
still be appending. Where the filesystem or the system has no such call, both do nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

_KEEP_SIZE, _PUNCH_HOLE = 0x01, 0x02
_TAIL_MAX = 1 << 30  # what release_tail punches past the end: more than a job ever keeps there
_fallocate = None


def _call(fd: int, mode: int, offset: int, length: int) -> bool:
    global _fallocate
    if _fallocate is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).fallocate
        except (OSError, AttributeError):
            fn = False
        else:
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
            fn.restype = ctypes.c_int
        _fallocate = fn
    return bool(_fallocate) and _fallocate(fd, mode, offset, length) == 0


def keep_tail(fd: int, size: int, nbytes: int) -> bool:
    """Allocate ``nbytes`` after ``size`` (the file's length now) without growing the file."""
    return _call(fd, _KEEP_SIZE, size, nbytes)


def release_tail(path: Path) -> None:
    """Give back the blocks kept past the end of ``path``; its content and length stay as they are."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY)
        try:
            _call(fd, _PUNCH_HOLE | _KEEP_SIZE, os.fstat(fd).st_size, _TAIL_MAX)
        finally:
            os.close(fd)
