"""train.finetune: fine-tune a model for a task with a method and a strategy.

Run by the engine, or by hand on one machine::

    python -m engine.recipes.finetune --config spec.yaml --run-dir runs/try1
    torchrun --nproc-per-node 2 -m engine.recipes.finetune --config spec.yaml --run-dir runs/try1

``spec.yaml`` is a job file (``kind: train.finetune`` + ``spec:``) or a bare
TrainSpec. Rank 0 writes ``events.jsonl`` (train, eval, memory, checkpoint,
status, error) and ``stdout.log``; checkpoints go to ``checkpoints/`` and the
final weights to ``model/``. SIGTERM stops gracefully: every rank finishes the
current step, a checkpoint is written, and the run can be resumed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from engine.api.job_terms import FINETUNE
from engine.api.specs import SpecError
from engine.api.train_spec import TrainSpec
from engine.evaluate import generation
from engine.tasks.base import InputError
from engine.trainer.loop import Trainer
from engine.training import dist
from engine.training.context import (
    JobContext,
    JobFailed,
    disk_full,
    exit_process,
    record_environment,
)


def load_train_spec(path: Path) -> TrainSpec:
    import yaml

    from engine.api.specs import validate_spec

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if isinstance(doc, dict) and "kind" in doc:
        if doc["kind"] != FINETUNE:
            raise SpecError(f"{path} is a {doc['kind']} job, not train.finetune", [], "Use a train.finetune spec.")
        doc = doc.get("spec") or {}
    spec = validate_spec(FINETUNE, doc)
    assert isinstance(spec, TrainSpec)
    return spec


class RankContext:
    """Rank 0 writes events; other ranks only report errors (one line each, appended whole)."""

    def __init__(self, run_dir: Path, world: dist.World):
        self.world = world
        self.ctx = JobContext(run_dir)
        self.stop_requested = False

    def emit(self, kind: str, **data: Any) -> None:
        if self.world.is_main or kind == "error":
            self.ctx.emit(kind, **({"rank": self.world.rank} if kind == "error" else {}), **data)

    def log(self, message: str) -> None:
        if self.world.is_main:
            self.ctx.log(message)

    def status(self, state: str, **data: Any) -> None:
        if self.world.is_main:
            self.ctx.status(state, **data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, help="run directory (holds spec.yaml when --config is not given)")
    ap.add_argument("--config", type=Path, help="a spec YAML to run (copied into the run dir)")
    args = ap.parse_args(argv)
    run_dir = args.run_dir or Path("runs") / time.strftime("finetune-%Y%m%d-%H%M%S")
    spec_file = args.config or run_dir / "spec.yaml"
    rank = int(os.environ.get("RANK", "0"))
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.config and rank == 0 and not (run_dir / "spec.yaml").exists():
        (run_dir / "spec.yaml").write_text(args.config.read_text(encoding="utf-8"), encoding="utf-8")

    world = None
    rc: RankContext | None = None
    try:
        spec = load_train_spec(spec_file)
        world = dist.init(spec.device)
        rc = RankContext(run_dir, world)
        signal.signal(signal.SIGTERM, lambda *_: setattr(rc, "stop_requested", True))
        restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        rc.status("running", pid=os.getpid(), world_size=world.size, restart=restarts)
        if world.is_main:
            record_environment(run_dir)
        # model.hub not cached yet: downloaded first, with progress events (docs/hub.md)
        from engine.tasks import hub_models

        if not hub_models.ensure_for_spec(spec, rc.emit, lambda: rc.stop_requested, rc.log):
            rc.status("stopped")
            return 0
        final = Trainer(spec, world, rc, run_dir, answer_scorer=generation.score_pairs).run()
        if final == "succeeded" and spec.distill is not None and world.is_main:
            from engine.compress.variant import evaluate_student

            try:
                evaluate_student(rc.ctx, run_dir, spec)
            except Exception as exc:  # noqa: BLE001 - the student is trained and saved; only its scoring failed
                message, hint = describe_failure(exc)
                rc.emit("warning", message=f"The student trained, but scoring it beside its teacher failed: {message}",
                        hint=hint)
        rc.status(final)
        return 0
    except Exception as exc:  # noqa: BLE001 - every failure reaches the user as an event
        message, hint = describe_failure(exc, run_dir)
        full = disk_full(exc, run_dir, "writing")
        if not isinstance(exc, (JobFailed, InputError)) and full is None:
            traceback.print_exc(file=sys.stderr)
        ctx = rc or RankContext(run_dir, world or dist.World(rank, 0, 1, "cpu", ""))
        if full is not None:
            ctx.ctx.release_reserve()  # room for the events that say why
        # reason: a word a program can test (a diverged run's "diverged"), beside the message for people
        reason = {"reason": exc.reason} if isinstance(exc, JobFailed) and exc.reason else {}
        ctx.emit("error", message=message, hint=hint, **reason,
                 **({"issues": [vars(i) for i in exc.issues]} if isinstance(exc, InputError) else {}))
        restarts_left = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) - \
            int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        # A full disk stays full on a restart: fail at once, resumable once space is freed.
        retryable = restarts_left > 0 and full is None and not isinstance(exc, (JobFailed, InputError, SpecError))
        # torchrun will start the group again, and it resumes from the last checkpoint.
        ctx.status("restarting" if retryable else "failed", message=message, hint=hint, **reason)
        return 1
    finally:
        if world is not None:
            dist.shutdown(world)


def describe_failure(exc: BaseException, run_dir: Path | None = None) -> tuple[str, str]:
    """What the user reads: the problem and the next thing to try."""
    if isinstance(exc, (JobFailed, InputError)):
        return str(exc), exc.hint
    if isinstance(exc, SpecError):
        return str(exc), exc.hint
    full = disk_full(exc, run_dir or Path.cwd(), f"writing ({type(exc).__name__}: {exc})".split("\n")[0])
    if full is not None:
        return str(full), full.hint
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return (f"Out of memory: {exc}".split("\n")[0],
                "Try a smaller batch_size (with grad_accum to keep the effective batch), method lora, "
                "distributed.strategy fsdp or deepspeed with zero_stage 3, or activation_checkpointing.")
    return f"{type(exc).__name__}: {exc}", "See stdout.log in the run directory for the traceback."


if __name__ == "__main__":
    exit_process(main())
