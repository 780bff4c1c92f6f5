"""Jobs forked from the warm server (engine/launch/forkserver.py) run as a fresh ``python -m`` process would:
their own session, folder, output file, environment, thread cap and command line, and their exit code or
signal comes back to the engine."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from engine.launch import forkserver, local
from tests.conftest import wait_for

PROBE = """
import json, os, sys, time
import torch
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "x": os.environ.get("EMBER_PROBE"),
                  "own_session": os.getsid(0) == os.getpid(), "threads": torch.get_num_threads(),
                  "path0": sys.path[0], "main": __name__, "pid": os.getpid(), "rank": os.environ.get("RANK")}),
      flush=True)
time.sleep(float(os.environ.get("EMBER_PROBE_SLEEP", "0")))
sys.exit(int(os.environ.get("EMBER_PROBE_CODE", "0")))
"""


@pytest.fixture
def server(tmp_path):
    """This user's server, started by the first request (which it does not run) and warm after PyTorch's import."""
    if forkserver.socket_path({}) is None:
        pytest.skip("no fork on this platform")
    (tmp_path / "probe_job.py").write_text(PROBE)

    def start(**env: str):
        return forkserver.start("probe_job", ["--run-dir", str(tmp_path)], tmp_path,
                                local.job_env(OMP_NUM_THREADS="1", **env), tmp_path / "stdout.log")

    wait_for(lambda: forkserver.ready(local.job_env()) or start(EMBER_PROBE_CODE="0") and False, timeout=120,
             interval=0.5, what="the fork server to listen")
    return start


def output(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "stdout.log").read_text().splitlines() if line.startswith("{")]


def test_a_forked_job_sees_its_own_folder_environment_and_session_and_its_exit_code_returns(server, tmp_path):
    assert forkserver.warm(local.job_env())  # up: what the peak-memory measurement asks before it forks
    started = time.monotonic()
    proc = server(EMBER_PROBE="seen", EMBER_PROBE_CODE="3")
    assert proc is not None
    code = wait_for(lambda: proc.poll(), timeout=60, interval=0.05, what="the forked job to end")
    assert code == 3
    (seen,) = [o for o in output(tmp_path) if o["x"] == "seen"]
    assert seen["argv"] == [str(tmp_path / "probe_job.py"), "--run-dir", str(tmp_path)]
    assert seen["cwd"] == seen["path0"] == str(tmp_path) and seen["main"] == "__main__"
    assert seen["own_session"] and seen["threads"] == 1  # OMP_NUM_THREADS=1 applied after the fork
    # Started and ended in far less than a fresh PyTorch import takes on a busy machine (about 10 s here).
    print(f"forked job: {time.monotonic() - started:.2f} s from request to exit")  # noqa: T201


def test_a_signal_and_the_command_line_are_the_jobs_own(server, tmp_path):
    proc = server(EMBER_PROBE_SLEEP="30")
    cmdline = wait_for(lambda: "probe_job" in (c := " ".join(psutil.Process(proc.pid).cmdline())) and c,
                       timeout=10, interval=0.05, what="the job's command line")
    assert f"-m probe_job --run-dir {tmp_path}" in cmdline  # what `ps` shows, and the tests' cleanup finds
    os.killpg(proc.pid, signal.SIGTERM)  # as the engine stops a job: its process group
    assert wait_for(lambda: proc.poll(), timeout=30, interval=0.05, what="the job to end") == -signal.SIGTERM


def test_a_job_whose_load_time_environment_differs_goes_to_another_server(server, tmp_path, monkeypatch):
    # OpenMP reads its wait policy when it is loaded: that job needs a server started with its value.
    passive = local.job_env(OMP_WAIT_POLICY="PASSIVE")
    assert forkserver.socket_path(passive) != forkserver.socket_path(local.job_env())
    assert forkserver.socket_path(local.job_env(OMP_NUM_THREADS="7")) == forkserver.socket_path(local.job_env())
    # Read after the fork, or set by a job's own imports: the same server.
    same = local.job_env(TORCHELASTIC_RUN_ID="r1", RANK="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path))
    assert forkserver.socket_path(same) == forkserver.socket_path(local.job_env())
    # A job started by a job (a peak-memory measurement, a chain's stage) has its parent's PYTHONPATH, not a longer one.
    monkeypatch.setenv("PYTHONPATH", local.job_env()["PYTHONPATH"])
    assert forkserver.socket_path(local.job_env()) == forkserver.socket_path(same)
    assert server(EMBER_FORKSERVER="0") is None  # off: every job starts as a fresh Python process


def test_a_torchrun_worker_is_forked_tied_to_its_stand_in(server, tmp_path):
    """torchrun starts engine/launch/forked_worker.py for each worker: the worker is forked with torchrun's
    variables, the stand-in ends as the worker ends, passes signals on, and its death kills the worker."""
    import subprocess
    import sys

    def worker(**env: str) -> subprocess.Popen:
        env = local.job_env(OMP_NUM_THREADS="1", RANK="1", TORCHELASTIC_RUN_ID=str(time.monotonic()), **env)
        return subprocess.Popen([sys.executable, "-m", "engine.launch.forked_worker", "probe_job", "--run-dir",
                                 str(tmp_path)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)

    proc = worker(EMBER_PROBE="code", EMBER_PROBE_CODE="4")
    out, _ = proc.communicate(timeout=60)
    (seen,) = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 4 and seen["rank"] == "1" and seen["x"] == "code"
    assert seen["pid"] != proc.pid  # forked by the server (torchrun's per-worker variables do not key it)

    def forked_pid(proc: subprocess.Popen) -> int:
        return json.loads(proc.stdout.readline())["pid"]

    proc = worker(EMBER_PROBE_SLEEP="60")
    pid = forked_pid(proc)
    os.killpg(proc.pid, signal.SIGTERM)  # as torchrun stops its workers
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert wait_for(lambda: not psutil.pid_exists(pid), timeout=10, interval=0.05, what="the worker to end")

    proc = worker(EMBER_PROBE_SLEEP="60")
    pid = forked_pid(proc)
    proc.kill()  # the stand-in dies (a SIGKILL to torchrun's tree): the server kills the worker
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert wait_for(lambda: not psutil.pid_exists(pid), timeout=10, interval=0.05, what="the worker killed")


ECHO = """
import sys
data = sys.stdin.read()
sys.stdout.write(data.upper())
sys.stderr.write("to stderr")
sys.exit(5)
"""


def test_a_check_or_a_worker_gets_its_pipes(server, tmp_path, monkeypatch):
    import asyncio

    (tmp_path / "echo_job.py").write_text(ECHO)
    monkeypatch.chdir(tmp_path)  # the check and the Playground's workers run in the engine's folder

    async def run():
        proc = await forkserver.start_piped("echo_job", [], local.job_env(), pipe_stderr=True)
        assert proc is not None and proc.pid != os.getpid()
        return await proc.communicate(b"a question"), proc.returncode

    (out, err), code = asyncio.run(run())
    assert (out, err, code) == (b"A QUESTION", b"to stderr", 5)


def test_a_socket_folder_others_may_write_is_never_used(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"ember-{os.getuid()}"
    folder.mkdir(mode=0o700)
    if forkserver.socket_path({}) is None:
        pytest.skip("no fork on this platform")
    folder.chmod(0o777)  # another local user could have put a server of theirs there, to read jobs' secrets
    assert forkserver.socket_path({}) is None and forkserver.start("x", [], tmp_path, {}, tmp_path / "o") is None
