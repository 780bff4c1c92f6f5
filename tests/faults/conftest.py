"""Fault injection with real processes: helpers, and the per-scenario table printed at the end.

Every test calls ``fault_report(scenario, fault, survived, expected, stored)`` for each fault it
injects; ``pytest tests/faults`` then prints, whatever the capture mode, one line per scenario:
the fault, what survived, and the rows expected against the rows the store holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from engine.api.job_terms import FINAL_STATES
from engine.api.paths import Paths
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process, wait_for


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record one injected fault; tests/conftest.py prints them all at the end (also under xdist,
    where the rows travel to the controller with the test's report)."""
    def report(scenario: str, fault: str, survived: str, expected: Any, stored: Any) -> None:
        request.node.user_properties.append(
            ("fault_report", (scenario, fault, survived, str(expected), str(stored))))

    return report


@pytest.fixture(scope="session")
def digits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in digits images, rendered once for the session (1,797 PNGs: ~10 s each time otherwise)."""
    from engine.tasks.base import build_once
    from engine.tasks.image_classification import write_digits

    return build_once(tmp_path_factory.mktemp("digits") / "digits", write_digits)


@pytest.fixture
def start_engine(ember_home: Paths, monkeypatch: pytest.MonkeyPatch,
                 digits_folder: Path) -> Iterator[Callable[..., RunningEngine]]:
    """Start a real engine (jobs inherit its environment); ``env`` adds variables such as the
    checkpoint delay hook. One OpenMP thread per job: on a 2-core machine that makes a digits
    step ~20 ms instead of ~1 s of threads spinning against each other."""
    engines: list[RunningEngine] = []

    def start(**env: str) -> RunningEngine:
        datasets = ember_home.home / "datasets"
        if not (datasets / "digits").exists():
            datasets.mkdir(parents=True, exist_ok=True)
            (datasets / "digits").symlink_to(digits_folder, target_is_directory=True)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        eng = RunningEngine(ember_home, start_engine_process(ember_home))
        engines.append(eng)
        return eng

    yield start
    for eng in engines:
        eng.stop()
    kill_job_groups(ember_home.home)


def digits(**overrides: Any) -> dict[str, Any]:
    """The built-in digits CNN at 16x16, batch 8: a step takes ~20 ms, a checkpoint ~1 MB."""
    spec = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 8, "max_steps": 60,
            "eval_every": 1000, "checkpoint_every": 20, "optim": {"lr": 0.003}, "data": {"image_size": 16}}
    spec.update(overrides)
    return spec


def wait_final(c: Any, job_id: str, timeout: float = 90) -> dict[str, Any]:
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j, timeout=timeout,
                    interval=0.1, what=f"job {job_id} to end")


def events_of(c: Any, job_id: str, kind: str = "*") -> list[dict[str, Any]]:
    evs = c.call("events.query", topics=[f"run/{job_id}/{kind}"], limit=100_000)["events"]
    return [e["data"] for e in evs]


def loss_steps(c: Any, job_id: str) -> list[int]:
    """The steps of the stored train-loss rows, in order (one row per step when nothing is lost or doubled)."""
    return [m["step"] for m in c.call("jobs.metrics", id=job_id, kind="train")["metrics"] if m["name"] == "loss"]


def file_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """What the job wrote, line by line. A write torn by a full disk leaves a partial line, which the
    engine skips with a warning (the job starts its next event on a fresh line); so does this."""
    events = []
    for line in (Path(run_dir) / "events.jsonl").read_bytes().splitlines():
        with contextlib.suppress(ValueError):
            if line.strip():
                events.append(json.loads(line))
    return events


def kill_tree(pid: int) -> list[psutil.Process]:
    """SIGKILL a job's process and every descendant (torchrun workers sit in sessions of their own)."""
    root = psutil.Process(pid)
    tree = [root, *root.children(recursive=True)]
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return tree


def mount_tmpfs(where: Path, size_kb: int) -> str | None:
    """None when mounted, else why not (the caller skips with that reason)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (CAP_SYS_ADMIN)"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount -t tmpfs was refused: {done.stderr.strip()}"
