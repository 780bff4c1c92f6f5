"""Ember's training overhead: the same fine-tune as a plain PyTorch loop and as an Ember run.

    python benchmarks/overhead_bench.py [--task text_classification|image_classification] [--steps 60] [--rounds 2]

Same model, data, batch, optimizer, schedule and steps, in one process, rounds
interleaved (plain, ember, plain, ember, ...) so machine noise hits both alike.
The Ember run writes its events to a real events.jsonl and checkpoints at the
default interval (every 50 steps); evaluation is left out of both (it is work,
not overhead). Throughput is measured from the end of step 1 to the end of the
last step. Prints the median samples/s of each and the ratio Ember/plain
(target: at least 0.98).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 0.98


def make_spec(task: str, steps: int):
    from engine.train_spec import TrainSpec

    base = {"task": task, "max_steps": steps, "eval_every": 10**6, "seed": 0}
    if task == "text_classification":
        base.update(method={"kind": "lora"}, batch_size=16, data={"max_length": 64}, optim={"lr": 0.002})
    else:
        base.update(method={"kind": "full"}, batch_size=64, optim={"lr": 0.003})
    return TrainSpec.model_validate(base)


def plain_loop(spec) -> float:
    """A hand-written loop: what a user would write without Ember."""
    import torch
    from torch.utils.data import DataLoader

    from engine import methods
    from engine.tasks import get_task
    from engine.train_loop import make_optimizer, make_schedule, seed_everything

    seed_everything(spec.seed)
    task = get_task(spec.task)
    data = task.load_data(spec)
    model = methods.apply(task.build_model(spec, data), spec, task)
    opt = make_optimizer([p for p in model.parameters() if p.requires_grad], spec)
    sched = make_schedule(opt, spec, spec.max_steps)
    loader = DataLoader(data.train, batch_size=spec.batch_size, shuffle=True, drop_last=True,
                        collate_fn=data.collate, generator=torch.Generator().manual_seed(0))
    model.train()
    it, marks, samples = iter(loader), [], 0
    for _ in range(spec.max_steps):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        loss, stats = task.forward(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.optim.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        float(loss)  # a plain loop prints or logs its loss too
        samples += stats["samples"]
        marks.append((time.perf_counter(), samples))
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    return (s1 - s0) / (t1 - t0)


def ember_run(spec) -> float:
    from engine import dist
    from engine.recipes.finetune import RankContext
    from engine.train_loop import Trainer

    run_dir = Path(tempfile.mkdtemp(prefix="ember-overhead-"))
    world = dist.World(0, 0, 1, "cpu", "bench")
    rc = RankContext(run_dir, world)
    marks: list[tuple[float, float]] = []
    real_emit = rc.emit

    def emit(kind, **data):
        real_emit(kind, **data)
        if kind == "train":
            marks.append((time.perf_counter(), data["step"]))

    rc.emit = emit  # type: ignore[method-assign]
    rc.log = lambda message: None  # type: ignore[method-assign]
    Trainer(spec, world, rc, run_dir).run()
    (t0, k0), (t1, k1) = marks[0], marks[-1]
    return (k1 - k0) * spec.batch_size / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="text_classification", choices=["text_classification", "image_classification"])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("EMBER_HOME", tempfile.mkdtemp(prefix="ember-bench-home-"))
    spec = make_spec(args.task, args.steps)
    plain, ember = [], []
    for r in range(args.rounds):
        plain.append(plain_loop(spec))
        ember.append(ember_run(spec))
        print(f"round {r + 1}: plain {plain[-1]:.1f} samples/s, ember {ember[-1]:.1f} samples/s")
    p, e = statistics.median(plain), statistics.median(ember)
    print(f"{args.task}, {args.steps} steps, batch {spec.batch_size}, {spec.method.kind}, checkpoint every "
          f"{spec.checkpoint_every} steps, events to events.jsonl")
    print(f"median: plain {p:.1f} samples/s, ember {e:.1f} samples/s -> ember/plain ratio {e / p:.3f} "
          f"({'meets' if e / p >= TARGET else 'MISSES'} the {TARGET} target)")


if __name__ == "__main__":
    main()
