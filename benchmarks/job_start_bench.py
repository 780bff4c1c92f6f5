"""How soon a job reads its first row and ends: a job process forked from the warm fork server
(engine/launch/forkserver.py) against the same job started as a fresh ``python -m`` process, side by side.

    python benchmarks/job_start_bench.py [--rounds 4] [--steps 3] [--processes 2]

The job is a fine-tune of the built-in tiny-llama for a few steps (its data and model are on disk: no
download). Each round starts it once each way, alternating, each in a folder of its own, and times from the
start request to its first ``setup`` event (the imports done: what a user waits for after Launch) and to the
process's end (exit code known to the engine). Figures are medians over rounds; the ratios are fresh/forked
(target: the forked job reaches its first row at least 1.5 times sooner).

With ``--processes N`` the job is a DDP run of N processes under torchrun: fresh, torchrun and each worker
import PyTorch; forked, torchrun is forked as the engine forks it and each worker through
engine/launch/forked_worker.py (what the engine's torchrun command runs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 1.5
SPEC = """task: causal_lm
model: {builtin: tiny-llama}
data: {max_length: 64}
method: {kind: full}
device: cpu
batch_size: 4
max_steps: %d
eval_every: 1000
checkpoint_every: 1000
generate_eval: {prompts: 0}
distributed: {nproc: %d, strategy: ddp}
"""


def first_setup(run_dir: Path, t0: float) -> float:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return next(e["t"] for e in events if e["kind"] == "setup") - t0


def main() -> int:
    from engine.launch import forkserver, local

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ember-job-start-"))
    (work / "spec.yaml").write_text(SPEC % (args.steps, args.processes))
    module = "engine.recipes.finetune"
    torchrun = ["--standalone", f"--nproc-per-node={args.processes}", "--max-restarts=0"]
    env = local.job_env(EMBER_HOME=str(work / "home"))
    if forkserver.socket_path(env) is None:
        print("no fork on this platform: nothing to compare")
        return 1
    deadline = time.monotonic() + 180
    while not forkserver.ready(env):  # the first request starts this user's server; it listens once warm
        forkserver.start("engine.recipes.finetune", [], work, env, work / "ignored.log")
        if time.monotonic() > deadline:
            print("the fork server did not start")
            return 1
        time.sleep(1)

    if args.processes > 1:  # the built-in model written once first: ranks that find no folder each write it
        (work / "prepare.yaml").write_text(SPEC % (1, 1))
        subprocess.run([sys.executable, "-m", module, "--config", str(work / "prepare.yaml"), "--run-dir",
                        str(work / "prepare")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    figures: dict[str, dict[str, list[float]]] = {"fresh": {"setup": [], "end": []},
                                                  "forked": {"setup": [], "end": []}}
    for n in range(args.rounds):
        for side in ("fresh", "forked"):
            run_dir = work / f"{side}-{n}"
            run_dir.mkdir()
            argv = ["--config", str(work / "spec.yaml"), "--run-dir", str(run_dir)]
            if args.processes > 1:  # torchrun's module and arguments, its workers' after them
                fresh = ["torch.distributed.run", *torchrun, "-m", module, *argv]
                forked = ["torch.distributed.run", *torchrun, *local.worker(module), *argv]
            else:
                fresh = forked = [module, *argv]
            t0 = time.time()
            if side == "fresh":
                with open(run_dir / "stdout.log", "ab") as out:
                    code = subprocess.run([sys.executable, "-m", *fresh], cwd=run_dir,
                                          env=env, stdout=out, stderr=subprocess.STDOUT).returncode
            else:
                proc = forkserver.start(forked[0], forked[1:], run_dir, env, run_dir / "stdout.log")
                if proc is None:
                    print("the fork server refused the job")
                    return 1
                while (code := proc.poll()) is None:
                    time.sleep(0.02)
            end = time.time() - t0
            if code != 0:
                print(f"{side} job failed ({code}): see {run_dir / 'stdout.log'}")
                return 1
            figures[side]["setup"].append(first_setup(run_dir, t0))
            figures[side]["end"].append(end)
    med = {side: {k: statistics.median(v) for k, v in f.items()} for side, f in figures.items()}
    print(f"tiny-llama, {args.steps} steps, {args.processes} process(es), {args.rounds} rounds (medians)")
    print(f"{'':8} {'first row':>10} {'ended':>8}")
    for side in ("fresh", "forked"):
        print(f"{side:8} {med[side]['setup']:9.2f}s {med[side]['end']:7.2f}s")
    ratio = med["fresh"]["setup"] / med["forked"]["setup"]
    print(f"ratio fresh/forked: first row {ratio:.2f} (target {TARGET}), "
          f"end {med['fresh']['end'] / med['forked']['end']:.2f}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
