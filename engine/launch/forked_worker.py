"""What torchrun starts for each worker of a multi-process run on this machine: ``python -m
engine.launch.forked_worker MODULE ARGS...`` stands in for ``python -m MODULE ARGS...``.

It asks this user's fork server (engine/launch/forkserver.py, PyTorch already imported) for the worker, with
its own stdin, stdout, stderr, folder and environment (torchrun's RANK, WORLD_SIZE, ... included), tied to
its connection; then it passes on every signal torchrun sends and ends as the worker ended (the same exit
code, or killed by the same signal), so torchrun restarts, stops and reports workers as it always does. If it
is killed, its connection closes and the server kills the worker. With no server to ask, it becomes the worker
itself (``exec``), as a fresh process.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from engine.launch import forkserver

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m engine.launch.forked_worker MODULE [ARGS...]")
    module, args = argv[0], argv[1:]
    # Signals that arrive before the worker exists are held, then passed on.
    pending: list[int] = []
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _frame: pending.append(s))
    forked = forkserver.start(module, args, Path.cwd(), dict(os.environ), fds=(0, 1, 2), tied=True)
    if forked is None:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.execv(sys.executable, [sys.executable, "-u", "-m", module, *args])

    def forward(sig: int, _frame: object = None) -> None:
        # The worker leads its own session (its DataLoader workers in its group), once it has made it: in its
        # first instant it is still in the server's group, and only the worker itself is signalled.
        for send in (os.killpg, os.kill):
            try:
                send(forked.pid, sig)
                return
            except (ProcessLookupError, PermissionError):
                continue

    for sig in FORWARDED:
        signal.signal(sig, forward)
    for sig in pending:
        forward(sig)
    code = forked.wait()
    if code == "unknown":
        sys.exit(1)  # the server died before the worker: its exit code is lost
    if int(code) < 0:  # killed by a signal: end the same way, so torchrun reports what it would have
        signal.signal(-int(code), signal.SIG_DFL)
        os.kill(os.getpid(), -int(code))
    sys.exit(int(code))


if __name__ == "__main__":
    main(sys.argv[1:])
