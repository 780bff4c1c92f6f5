"""Ember's training overhead: the same fine-tune as a plain PyTorch loop and as an Ember run.

    python benchmarks/overhead_bench.py [--task text_classification|image_classification] [--steps 300] [--rounds 3]

Same model, data, batches (in the same order), optimizer, schedule and steps, in one process. Both do the
same work: load the data and the model, train, evaluate once at the end (Ember's final evaluation) and save
the trained weights. The Ember run also writes its events to a real events.jsonl, memory reports and
checkpoints at the default intervals, and looks up the CPU's peak FLOP/s for MFU as a new job process
does (the figure remembered in the data folder, topped up by one short round; the untimed first round
measures it in full).

The two run in lockstep: after each Ember step (its train event) one plain step runs, and Ember's clock
leaves that step out. A burst of work from another process on a shared machine then slows both sides
alike instead of deciding the figure. Two ratios Ember/plain, each the median over rounds (target: at
least 0.95 each):
- training phase: samples/s from the end of step 1 to the end of the last step, everything between
  included (events, memory reports, checkpoints); not a median step, so periodic costs count;
- whole run: wall time from start (data and model loading) to finish (final evaluation, weights saved).
Start-up and finish are not in lockstep (each side's own, timed on its own), so noise can still move
the whole-run ratio by a few hundredths on a busy machine: read the median with the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 0.95
WARMUP_STEPS = 20


@dataclass
class Timing:
    """One run: samples/s over steps 2..N, seconds from start to the end of step 1, and start to finish."""

    train_rate: float
    first_step_s: float
    wall_s: float


def make_spec(task: str, steps: int):
    from engine.api.train_spec import TrainSpec

    base = {"task": task, "max_steps": steps, "eval_every": 10**6, "seed": 0}
    if task == "text_classification":
        base.update(method={"kind": "lora"}, batch_size=16, data={"max_length": 64}, optim={"lr": 0.002})
    else:
        base.update(method={"kind": "full"}, batch_size=64, optim={"lr": 0.003})
    return TrainSpec.model_validate(base)


class PlainLoop:
    """A hand-written loop: what a user would write without Ember (transformers + peft through the task).

    In three timed parts, so its steps can run in lockstep with Ember's: ``setup``, ``step``, ``finish``."""

    def __init__(self, spec):
        import torch
        from torch.utils.data import DataLoader

        from engine.tasks import get_task
        from engine.trainer.loop import make_optimizer, make_schedule, seed_everything
        from engine.training import methods
        from engine.training.data_order import ResumableOrder

        t0 = time.perf_counter()
        self.spec, self.torch = spec, torch
        seed_everything(spec.seed)
        self.task = task = get_task(spec.task)
        self.data = data = task.load_data(spec)
        self.model = methods.apply(task.build_model(spec, data), spec, task)
        self.opt = make_optimizer([p for p in self.model.parameters() if p.requires_grad], spec)
        self.sched = make_schedule(self.opt, spec, spec.max_steps)
        # The same batches as the Ember run: with dynamic padding, another order is another amount of work.
        order = ResumableOrder(len(data.train), spec.batch_size, 0, 1, spec.seed)
        batches = [b for e in range(spec.max_steps // order.batches_per_epoch + 1) for b in order.epoch_batches(e)]
        self.loader = DataLoader(data.train, batch_sampler=batches, collate_fn=data.collate)
        self.model.train()
        self.it = iter(self.loader)
        self.setup_s = time.perf_counter() - t0
        self.step_s: list[float] = []

    def step(self) -> None:
        t0 = time.perf_counter()
        try:
            batch = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            batch = next(self.it)
        loss, _stats = self.task.forward(self.model, batch)
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec.optim.grad_clip)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        float(loss.detach())  # a plain loop prints or logs its loss too
        self.step_s.append(time.perf_counter() - t0)

    def finish(self) -> Timing:
        """One evaluation over the validation set and the weights saved, as an Ember run ends."""
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        spec, data, model = self.spec, self.data, self.model
        model.eval()
        sums: dict[str, float] = {}
        with self.torch.no_grad():
            for i in range(0, len(data.val), spec.batch_size):
                batch = data.collate([data.val[j] for j in range(i, min(i + spec.batch_size, len(data.val)))])
                for k, v in self.task.eval_sums(model, batch).items():
                    sums[k] = sums.get(k, 0.0) + float(v)
        self.task.finalize_metrics(sums)
        out = Path(tempfile.mkdtemp(prefix="plain-overhead-"))
        save_file({k: v.detach().contiguous().clone() for k, v in model.state_dict().items()},
                  str(out / "weights.safetensors"))
        finish_s = time.perf_counter() - t0
        rate = spec.batch_size * (len(self.step_s) - 1) / sum(self.step_s[1:])
        return Timing(rate, self.setup_s + self.step_s[0], self.setup_s + sum(self.step_s) + finish_s)


def lockstep(spec, plain_first: bool = True) -> tuple[Timing, Timing]:
    """(plain, ember) for one round: Ember's Trainer runs, and after each of its steps one plain step.

    ``plain_first``: the plain loop loads its data and model before Ember starts, else at Ember's first
    step (out of Ember's clock): rounds alternate, so neither side always loads into the other's warm caches."""
    from engine.recipes.finetune import RankContext
    from engine.trainer.loop import Trainer
    from engine.training import dist, mfu

    plain = PlainLoop(spec) if plain_first else None
    mfu.forget_peaks()  # a job is a new process: it looks the CPU peak up again (in the data folder)
    run_dir = Path(tempfile.mkdtemp(prefix="ember-overhead-"))
    start = time.perf_counter()
    world = dist.World(0, 0, 1, "cpu", "bench")
    rc = RankContext(run_dir, world)
    marks: list[float] = []  # Ember's clock: the time spent in plain steps taken out
    plain_time = 0.0
    real_emit = rc.emit

    def emit(kind, **data):
        nonlocal plain, plain_time
        real_emit(kind, **data)
        if kind == "train":
            marks.append(time.perf_counter() - plain_time)
            t0 = time.perf_counter()
            plain = plain or PlainLoop(spec)
            plain.step()
            plain_time += time.perf_counter() - t0

    rc.emit = emit  # type: ignore[method-assign]
    rc.log = lambda message: None  # type: ignore[method-assign]
    Trainer(spec, world, rc, run_dir).run()
    end = time.perf_counter() - plain_time
    # Everything Ember does between the first and the last train event counts (events, memory, checkpoints).
    ember = Timing(spec.batch_size * (len(marks) - 1) / (marks[-1] - marks[0]), marks[0] - start, end - start)
    assert plain is not None
    return plain.finish(), ember


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="text_classification", choices=["text_classification", "image_classification"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write every figure to this file")
    args = ap.parse_args()
    os.environ.setdefault("EMBER_HOME", tempfile.mkdtemp(prefix="ember-bench-home-"))
    spec = make_spec(args.task, args.steps)
    # One short untimed round first: the first run pays for caches (the tokenized data, the CPU peak in the data
    # folder), page faults and clock ramp-up.
    lockstep(make_spec(args.task, min(args.steps, WARMUP_STEPS)))
    train_ratios, wall_ratios, rounds = [], [], []
    for r in range(args.rounds):
        plain, ember = lockstep(spec, plain_first=r % 2 == 0)
        rounds.append({"plain": asdict(plain), "ember": asdict(ember)})
        train_ratios.append(ember.train_rate / plain.train_rate)
        wall_ratios.append(plain.wall_s / ember.wall_s)
        print(f"round {r + 1}: training phase plain {plain.train_rate:.1f} / ember {ember.train_rate:.1f} samples/s "
              f"= {train_ratios[-1]:.3f}; whole run plain {plain.wall_s:.1f} s / ember {ember.wall_s:.1f} s "
              f"= {wall_ratios[-1]:.3f} (start to the end of step 1: plain {plain.first_step_s:.2f} s, "
              f"ember {ember.first_step_s:.2f} s)", flush=True)
    print(f"{args.task}, {args.steps} steps, batch {spec.batch_size}, {spec.method.kind}, checkpoint every "
          f"{spec.checkpoint_every} steps, events to events.jsonl, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    for name, ratios in (("training phase", train_ratios), ("whole run", wall_ratios)):
        ratio = statistics.median(ratios)
        print(f"{name}: ember/plain median {ratio:.3f} (rounds {min(ratios):.3f}..{max(ratios):.3f}; "
              f"{'meets' if ratio >= TARGET else 'MISSES'} the {TARGET} target)")
    if args.json:
        args.json.write_text(json.dumps({
            "task": args.task, "steps": args.steps, "batch_size": spec.batch_size, "target": TARGET,
            "rounds": rounds, "train_ratios": train_ratios, "wall_ratios": wall_ratios,
            "train_ratio": statistics.median(train_ratios), "wall_ratio": statistics.median(wall_ratios),
            "cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}, indent=1))


if __name__ == "__main__":
    main()
