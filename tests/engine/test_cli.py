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


def ember_on_a_terminal(*args, timeout=240):
    """``ember`` with stdout on a pseudo-terminal, as a person runs it; returns (exit code, bytes shown)."""
    import pty
    import select
    import time

    env = dict(os.environ, COLUMNS="160", TERM="xterm",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "engine", *args], stdin=subprocess.DEVNULL, stdout=child_fd,
                            stderr=subprocess.STDOUT, env=env)
    os.close(child_fd)
    shown, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([main_fd], [], [], 0.5)[0]:
                try:
                    chunk = os.read(main_fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=10), shown.decode()
    finally:
        os.close(main_fd)
        if proc.poll() is None:
            proc.kill()


def test_run_shows_a_progress_bar_on_a_terminal_and_json_lines_when_asked(ember_home, tmp_path):
    import json

    from tests.engine.test_cli_progress import screen

    job = tmp_path / "tiny.yaml"
    job.write_text("kind: train.finetune\nname: tiny digits\nspec:\n  task: image_classification\n"
                   "  method: {kind: full}\n  max_steps: 4\n  eval_every: 2\n  log_every: 1\n  device: cpu\n")
    probe = tmp_path / "probe.yaml"
    probe.write_text("kind: system.probe\nname: probe\nspec:\n  samples: 3\n  interval_s: 0.05\n")
    try:
        code, shown = ember_on_a_terminal("run", str(job))
        assert code == 0, shown
        assert "\r" in shown and "\x1b[K" in shown and '{"' not in shown  # redrawn in place, no raw events
        lines = screen(shown)
        assert lines[0].startswith("started r") and "(train.finetune)" in lines[0]
        assert any(ln.startswith("eval at step 2: accuracy ") for ln in lines), lines
        bar = next(ln for ln in lines if ln.startswith("[####################] step 4/4  100%  loss "))
        assert " samples/s  elapsed " in bar
        summary = next(i for i, ln in enumerate(lines) if ln.startswith("Fine-tune 'tiny digits' succeeded in "))
        assert lines[summary + 1].startswith("  best accuracy ") and " at step " in lines[summary + 1]
        assert lines[summary + 2].startswith("  model: ") and lines[summary + 2].endswith("/model")

        out = ember("run", str(probe), "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        rows = [json.loads(line) for line in out.stdout.splitlines()]  # stdout is JSON only
        assert rows[0]["job"]["kind"] == "system.probe" and rows[-1]["job"]["state"] == "succeeded"
        run_id = rows[0]["job"]["id"]
        samples = [r["data"]["step"] for r in rows[1:-1] if r["topic"] == f"run/{run_id}/sample"]
        assert samples == [0, 1, 2]
        assert all(r["topic"] in ("jobs", f"run/{run_id}/status", f"run/{run_id}/result", f"run/{run_id}/sample")
                   for r in rows[1:-1])
        assert all(r["data"]["id"] == run_id for r in rows[1:-1] if r["topic"] == "jobs")  # not other jobs'
    finally:
        ember("stop")
        kill_job_groups(ember_home.home)
