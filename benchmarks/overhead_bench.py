"""Ember's training overhead: the same fine-tune as a plain PyTorch loop and as an Ember run.

    python benchmarks/overhead_bench.py [--task text_classification|image_classification] [--steps 60] [--rounds 2]

Same model, data, batches (in the same order), optimizer, schedule and steps, in one process, rounds
interleaved (plain, ember, plain, ember, ...) so machine noise hits both alike.
The Ember run writes its events to a real events.jsonl and checkpoints at the
default interval (every 50 steps); evaluation is left out of both (it is work,
not overhead). Throughput is the batch size over the median step time (from one
train event to the next for Ember, which includes its events, memory reports and
checkpoints), so a stray slow step on a noisy machine does not decide the figure. After one untimed round of each, rounds alternate which goes first;
prints each round's ratio Ember/plain and their median (target: at least 0.98).
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
    from engine.api.train_spec import TrainSpec

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

    from engine.tasks import get_task
    from engine.training import methods
    from engine.training.loop import make_optimizer, make_schedule, seed_everything

    seed_everything(spec.seed)
    task = get_task(spec.task)
    data = task.load_data(spec)
    model = methods.apply(task.build_model(spec, data), spec, task)
    opt = make_optimizer([p for p in model.parameters() if p.requires_grad], spec)
    sched = make_schedule(opt, spec, spec.max_steps)
    # The same batches as the Ember run: with dynamic padding, another order is another amount of work.
    from engine.training.data_order import ResumableOrder

    order = ResumableOrder(len(data.train), spec.batch_size, 0, 1, spec.seed)
    batches = [b for e in range(spec.max_steps // order.batches_per_epoch + 1) for b in order.epoch_batches(e)]
    loader = DataLoader(data.train, batch_sampler=batches, collate_fn=data.collate)
    model.train()
    it, durations = iter(loader), []
    for _ in range(spec.max_steps):
        t0 = time.perf_counter()
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
        durations.append(time.perf_counter() - t0)
    return spec.batch_size / statistics.median(durations[1:])


def ember_run(spec) -> float:
    from engine.recipes.finetune import RankContext
    from engine.training import dist
    from engine.training.loop import Trainer

    run_dir = Path(tempfile.mkdtemp(prefix="ember-overhead-"))
    world = dist.World(0, 0, 1, "cpu", "bench")
    rc = RankContext(run_dir, world)
    marks: list[float] = []
    real_emit = rc.emit

    def emit(kind, **data):
        real_emit(kind, **data)
        if kind == "train":
            marks.append(time.perf_counter())

    rc.emit = emit  # type: ignore[method-assign]
    rc.log = lambda message: None  # type: ignore[method-assign]
    Trainer(spec, world, rc, run_dir).run()
    # Step to step, everything Ember does between two train events counts (events, memory, checkpoints).
    return spec.batch_size / statistics.median(b - a for a, b in zip(marks, marks[1:], strict=False))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="text_classification", choices=["text_classification", "image_classification"])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("EMBER_HOME", tempfile.mkdtemp(prefix="ember-bench-home-"))
    spec = make_spec(args.task, args.steps)
    # One untimed round of each first: the first run pays for caches, page faults and clock ramp-up.
    plain_loop(spec)
    ember_run(spec)
    plain, ember, ratios = [], [], []
    for r in range(args.rounds):
        first, second = (plain_loop, ember_run) if r % 2 == 0 else (ember_run, plain_loop)
        a, b = first(spec), second(spec)
        p_r, e_r = (a, b) if first is plain_loop else (b, a)
        plain.append(p_r)
        ember.append(e_r)
        ratios.append(e_r / p_r)
        print(f"round {r + 1}: plain {p_r:.1f} samples/s, ember {e_r:.1f} samples/s, ratio {ratios[-1]:.3f}")
    ratio = statistics.median(ratios)
    print(f"{args.task}, {args.steps} steps, batch {spec.batch_size}, {spec.method.kind}, checkpoint every "
          f"{spec.checkpoint_every} steps, events to events.jsonl")
    print(f"median: plain {statistics.median(plain):.1f} samples/s, ember {statistics.median(ember):.1f} samples/s; "
          f"median of per-round ratios ember/plain {ratio:.3f} "
          f"({'meets' if ratio >= TARGET else 'MISSES'} the {TARGET} target)")


if __name__ == "__main__":
    main()
