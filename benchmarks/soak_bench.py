"""Soak: many short jobs queued at once, two clients subscribed, against a real engine.

    python benchmarks/soak_bench.py [--jobs 20] [--samples 20] [--finetunes 0]

Every job is a real job process: `system.probe` jobs that take utilisation
samples (some stopped and some cancelled while they run or wait), and optionally
a few tiny digits fine-tunes. Prints jobs completed per final state, the events
each subscriber saw against the events stored, the engine's RSS and open file
descriptors before and after, and processes left behind. Targets: 0 jobs lost,
0 processes and fds leaked, RSS growth under 10 %.

`tests/faults/test_soak.py` runs the same function with the same targets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from engine.api.job_terms import FINAL_STATES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.api import paths as paths_mod  # noqa: E402
from engine.cli.client import BlockingClient, EngineNotRunning  # noqa: E402

RSS_GROWTH_TARGET = 0.10
TINY_FINETUNE = {"task": "image_classification", "method": {"kind": "full"}, "device": "cpu",
                 "max_steps": 4, "batch_size": 8, "eval_every": 4, "checkpoint_every": 4}


def start_engine(home: Path) -> tuple[subprocess.Popen, paths_mod.Paths]:
    env = dict(os.environ, EMBER_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("EMBER_RUNTIME_DIR", None)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "engine.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "engine", "serve"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    old = os.environ.get("EMBER_HOME")
    os.environ["EMBER_HOME"] = str(home)
    try:
        p = paths_mod.resolve()
    finally:
        if old is None:
            os.environ.pop("EMBER_HOME", None)
        else:
            os.environ["EMBER_HOME"] = old
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited with {proc.returncode}: {(home / 'engine.log').read_text()[-2000:]}")
        with contextlib.suppress(EngineNotRunning, ConnectionError, FileNotFoundError):
            BlockingClient.connect(p, client="soak-probe").close()
            return proc, p
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("engine did not start")


class Subscriber(threading.Thread):
    """A second client that only watches: it must see every job reach its final state."""

    def __init__(self, p: paths_mod.Paths, name: str):
        super().__init__(daemon=True, name=name)
        self.client = BlockingClient.connect(p, client=name, timeout=30)
        self.client.subscribe(["jobs", "run/*/sample"])
        self.final: dict[str, str] = {}
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            ev = self.client.next_event(timeout=0.2)
            if ev is None:
                continue
            if ev["topic"] == "jobs" and ev["data"].get("state") in FINAL_STATES:
                self.final[ev["data"]["id"]] = ev["data"]["state"]
            elif ev["topic"].endswith("/sample"):
                self.samples += 1

    def close(self) -> None:
        self.done.set()
        self.join(10)
        self.client.close()


def job_processes(home: Path) -> list[int]:
    """Job processes (and their workers) of this data dir still alive."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
            if str(home) in cmd or env.get("EMBER_HOME") == str(home) and "EMBER_RUN_ID" in env:
                found.append(proc.info["pid"])
    return found


def engine_usage(pid: int) -> dict[str, int]:
    proc = psutil.Process(pid)
    return {"rss": proc.memory_info().rss, "fds": proc.num_fds(), "children": len(proc.children(recursive=True))}


def wait_all_final(c: BlockingClient, ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = {i: c.call("jobs.get", id=i) for i in ids}
        if all(r["state"] in FINAL_STATES for r in runs.values()):
            return runs
        time.sleep(0.2)
    left = {i: r["state"] for i, r in runs.items() if r["state"] not in FINAL_STATES}
    raise TimeoutError(f"jobs not final after {timeout:.0f} s: {left}")


def soak(home: Path, n_jobs: int = 20, samples: int = 20, finetunes: int = 0,
         timeout: float = 600.0) -> dict[str, Any]:
    """Queue ``n_jobs`` at once, stop/cancel some, wait for all; return what was seen and what leaked."""
    proc, p = start_engine(home)
    subs: list[Subscriber] = []
    try:
        with BlockingClient.connect(p, client="soak-driver", timeout=60) as c:
            # Warm-up: one job first, so the start figures include what any engine holds after a job.
            warm = c.call("jobs.start", kind="system.probe", spec={})
            wait_all_final(c, [warm["id"]], 120)
            subs = [Subscriber(p, f"soak-watcher-{i}") for i in range(2)]
            for s in subs:
                s.start()
            time.sleep(0.5)
            before = engine_usage(proc.pid)
            t0 = time.monotonic()
            ids: list[str] = []
            for i in range(n_jobs):
                if i < finetunes:
                    ids.append(c.call("jobs.start", kind="train.finetune", spec=TINY_FINETUNE,
                                      name=f"soak-ft-{i}")["id"])
                else:
                    ids.append(c.call("jobs.start", kind="system.probe", name=f"soak-{i}",
                                      spec={"samples": samples, "interval_s": 0.05})["id"])
            # The last two: one cancelled while it waits, one stopped once it runs.
            c.call("jobs.cancel", id=ids[-1])
            stop_id = ids[-2]
            deadline = time.monotonic() + timeout
            while c.call("jobs.get", id=stop_id)["state"] == "queued" and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(Exception):  # it may have ended already on a fast machine
                c.call("jobs.stop", id=stop_id)
            runs = wait_all_final(c, ids, timeout)
            wall = time.monotonic() - t0
            stored_samples = sum(len(c.call("events.query", topics=[f"run/{i}/sample"], limit=100_000)["events"])
                                 for i in ids)
            deadline = time.monotonic() + 10
            while any(len(s.final) < n_jobs for s in subs) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)  # let the engine settle (finished watchers, closed log files)
            after = engine_usage(proc.pid)
        states: dict[str, int] = {}
        for r in runs.values():
            states[r["state"]] = states.get(r["state"], 0) + 1
        seen = [{i: s.final.get(i) for i in ids} for s in subs]
        expected = {i: r["state"] for i, r in runs.items()}
        return {
            "jobs": n_jobs, "states": states, "wall_s": wall,
            "lost": sum(1 for r in runs.values() if r["state"] not in FINAL_STATES),
            "subscribers_agree": all(s == expected for s in seen),
            "subscriber_samples": [s.samples for s in subs], "stored_samples": stored_samples,
            "rss_start": before["rss"], "rss_end": after["rss"],
            "rss_growth": (after["rss"] - before["rss"]) / before["rss"],
            "fds_start": before["fds"], "fds_end": after["fds"],
            "engine_children_end": after["children"],
            "leaked_processes": job_processes(home),
            "unexpected_failures": {i: r.get("error") for i, r in runs.items()
                                    if r["state"] == "failed"},
        }
    finally:
        for s in subs:
            s.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def report(r: dict[str, Any]) -> str:
    mb = 1 << 20
    return "\n".join([
        f"jobs queued at once      {r['jobs']}  ({r['wall_s']:.1f} s until all final)",
        f"final states             {json.dumps(r['states'], sort_keys=True)}",
        f"jobs lost                {r['lost']}",
        f"both subscribers agree   {r['subscribers_agree']}  "
        f"(samples seen {r['subscriber_samples']}, stored {r['stored_samples']})",
        f"engine RSS               {r['rss_start'] / mb:.1f} MiB -> {r['rss_end'] / mb:.1f} MiB "
        f"({r['rss_growth'] * 100:+.1f} %, target under {RSS_GROWTH_TARGET * 100:.0f} %: "
        f"ratio {r['rss_end'] / r['rss_start']:.3f}x)",
        f"engine fds               {r['fds_start']} -> {r['fds_end']} (leaked {r['fds_end'] - r['fds_start']})",
        f"leaked processes         {len(r['leaked_processes'])} {r['leaked_processes'] or ''}".rstrip(),
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--samples", type=int, default=20, help="utilisation samples per probe job")
    ap.add_argument("--finetunes", type=int, default=0, help="how many of the jobs are tiny digits fine-tunes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ember-soak-") as tmp:
        r = soak(Path(tmp) / "home", args.jobs, args.samples, args.finetunes)
    print(report(r))
    ok = (r["lost"] == 0 and not r["leaked_processes"] and r["fds_end"] <= r["fds_start"]
          and r["rss_growth"] < RSS_GROWTH_TARGET and r["subscribers_agree"])
    print("targets met" if ok else "TARGETS MISSED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
