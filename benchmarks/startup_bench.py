"""GUI startup: seconds from spawning `python -m app` to the main window's first paint.

    python benchmarks/startup_bench.py [--runs 5]

Each run starts `python -m app --measure-startup --exit-after-paint`, which
prints `EMBER_FIRST_PAINT <unix time> torch_loaded=<bool>` when the window
first paints. The first run finds no engine and starts one (as a user's first
launch does); later runs attach to it. Prints median and min against the 1.5 s
target, checks torch was never imported, runs the import-linter contracts
(`lint-imports`), and stops the engine it started. Uses a temporary
EMBER_HOME, and QT_QPA_PLATFORM=offscreen when there is no display.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.api import paths as paths_mod  # noqa: E402
from engine.api.protocol import RpcError  # noqa: E402
from engine.cli.client import BlockingClient, EngineNotRunning  # noqa: E402

TARGET_S = 1.5


def one_run(env: dict[str, str]) -> tuple[float, bool]:
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "app", "--measure-startup", "--exit-after-paint"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    for line in done.stdout.splitlines():
        if line.startswith("EMBER_FIRST_PAINT "):
            _, stamp, torch_flag = line.split()
            return float(stamp) - started, torch_flag == "torch_loaded=True"
    raise SystemExit(f"no EMBER_FIRST_PAINT line (exit {done.returncode}):\n{done.stderr[-2000:]}")


def lint_imports() -> tuple[bool, str]:
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        return False, "lint-imports not found (pip install import-linter)"
    summary = [line for line in done.stdout.splitlines() if line.startswith("Contracts:")]
    return done.returncode == 0, summary[-1] if summary else done.stdout[-500:]


def stop_engine(paths: paths_mod.Paths) -> str:
    """Stop every engine of this EMBER_HOME, including one still starting up."""
    import psutil

    pids = set()
    with contextlib.suppress(EngineNotRunning, OSError, RpcError):
        with BlockingClient.connect(paths, client="startup-bench", timeout=10) as c:
            pids.add(int(c.call("engine.status")["pid"]))
            c.call("engine.shutdown")
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (proc.info["cmdline"] or [])[-3:] == ["-m", "engine", "serve"] and \
                    proc.environ().get("EMBER_HOME") == str(paths.home):
                pids.add(proc.info["pid"])
                proc.terminate()  # an orderly stop, like engine.shutdown
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    _gone, alive = psutil.wait_procs(procs, timeout=15)
    for proc in alive:
        proc.kill()
    if not pids:
        return "no engine was running"
    return f"stopped engine pid {', '.join(map(str, sorted(pids)))}" + \
        (f" (killed {len(alive)} that did not stop in 15 s)" if alive else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="ember-startup-"))
    env = dict(os.environ, EMBER_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("EMBER_RUNTIME_DIR", None)
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.update(EMBER_HOME=str(home))
    os.environ.pop("EMBER_RUNTIME_DIR", None)
    paths = paths_mod.resolve()

    times, torch_seen = [], False
    try:
        for i in range(args.runs):
            seconds, torch_loaded = one_run(env)
            torch_seen |= torch_loaded
            times.append(seconds)
            note = " (started the engine)" if i == 0 else ""
            print(f"run {i + 1}: {seconds:.3f} s to first paint{note}")
    finally:
        print(stop_engine(paths))
        shutil.rmtree(home, ignore_errors=True)

    median, best = statistics.median(times), min(times)
    platform = env.get("QT_QPA_PLATFORM") or f"default (DISPLAY={env.get('DISPLAY')})"
    print(f"Qt platform: {platform}, {os.cpu_count()} CPUs")
    print(f"first paint: median {median:.3f} s, min {best:.3f} s over {len(times)} runs")
    print(f"ratio to the {TARGET_S} s target: median {median / TARGET_S:.2f}, "
          f"min {best / TARGET_S:.2f} (below 1.00 is within target)")
    print(f"torch loaded at startup: {torch_seen}")
    ok, summary = lint_imports()
    print(f"lint-imports: {'ok' if ok else 'FAILED'}: {summary}")
    assert not torch_seen, "the GUI imported torch during startup"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
