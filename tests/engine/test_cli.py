"""The headless commands, run as a user would run them."""

import os
import subprocess
import sys

from tests.conftest import ROOT, kill_job_groups


def ember(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_engine_start_status_stop(ember_home):
    try:
        assert ember("status").returncode == 1
        started = ember("start")
        assert started.returncode == 0, started.stderr
        assert "running, pid" in started.stdout
        status = ember("status")
        assert status.returncode == 0 and str(ember_home.home) in status.stdout
        stopped = ember("stop")
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        assert ember("status").returncode == 1
        assert not ember_home.socket.exists() and not ember_home.token.exists()
    finally:
        ember("stop")


def test_run_a_job_file_and_follow_it(ember_home, tmp_path):
    job = tmp_path / "probe.yaml"
    job.write_text("kind: system.probe\nname: nightly check\nspec:\n  samples: 2\n  interval_s: 0.05\n")
    try:
        out = ember("run", str(job))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "sample" in out.stdout and "succeeded" in out.stdout and "nightly check" in out.stdout
        listed = ember("jobs")
        assert "nightly check" in listed.stdout
    finally:
        ember("stop")
        kill_job_groups(ember_home.home)


def test_invalid_job_file_is_reported_before_anything_starts(ember_home, tmp_path):
    job = tmp_path / "bad.yaml"
    job.write_text("kind: system.probe\nspec:\n  samples: -3\n  colour: red\n")
    out = ember("run", str(job))
    assert out.returncode == 2
    assert "samples: Input should be greater than or equal to 0 (use a larger value)" in out.stderr
    assert "colour" in out.stderr
    assert not ember_home.socket.exists()  # nothing was started for a file that cannot run


def test_control_of_an_unknown_job_says_so(ember_home):
    try:
        out = ember("stop", "r-missing")
        assert out.returncode == 2
        assert "No job with id 'r-missing'" in out.stderr and "hint:" in out.stderr
    finally:
        ember("stop")
