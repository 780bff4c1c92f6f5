"""The training loop behind train.finetune: setup, train, evaluate, checkpoint.

Kept apart from the recipe's entry point so tests and benchmarks can drive it.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from engine.api.train_spec import TrainSpec
from engine.strategies import get_strategy
from engine.tasks import get_task, task_for
from engine.tasks.base import InputError
from engine.trainer import divergence
from engine.training import checkpoint, dist, mesh, methods, speed
from engine.training.context import JobFailed, disk_full
from engine.training.data_order import ResumableOrder, eval_shards


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def total_steps(spec: TrainSpec, n_train: int, world_size: int) -> int:
    if spec.max_steps is not None:
        return spec.max_steps
    per_epoch = max(1, (n_train // (spec.batch_size * world_size)) // spec.grad_accum)
    return max(1, math.ceil(per_epoch * (spec.epochs or 1)))


def make_schedule(optimizer: Any, spec: TrainSpec, steps: int) -> Any:
    import torch

    o = spec.optim
    if o.schedule == "one_cycle":
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=o.lr, total_steps=max(steps, 2))
    warm = o.warmup_steps

    def factor(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / warm
        progress = min(1.0, (step - warm) / max(1, steps - warm))
        if o.schedule == "linear":
            return max(0.0, 1.0 - progress)
        if o.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def make_optimizer(params: list[Any], spec: TrainSpec) -> Any:
    import torch

    o = spec.optim
    impl = spec.speed.optimizer_impl
    if spec.distributed.tensor_parallel > 1:
        # The split matrices are DTensors, the whole ones (embeddings, norms) plain tensors: the multi-tensor
        # kernels take one kind at a time.
        impl = "for_loop"
    if o.optimizer == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay,
                               **({"foreach": False} if impl == "for_loop" else {}))
    kernel = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for_loop": {"foreach": False}}.get(impl, {})
    return torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay, **kernel)


def memory_record(world: dist.World, coords: dict[str, int] | None = None) -> dict[str, Any]:
    import psutil
    import torch

    rec: dict[str, Any] = {"rank": world.rank, **(coords or {}), "host": world.host, "device": world.device,
                           "rss": psutil.Process().memory_info().rss,
                           "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if world.device.startswith("cuda"):
        rec.update(allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
                   peak=torch.cuda.max_memory_allocated())
    else:
        rec.update(allocated=None, reserved=None, peak=rec["peak_rss"])
    return rec


def _to_device(batch: dict[str, Any], device: str) -> dict[str, Any]:
    non_blocking = device.startswith("cuda")
    return {k: (v.to(device, non_blocking=non_blocking) if hasattr(v, "to") else v) for k, v in batch.items()}


def _scalar(x: Any) -> float:
    if hasattr(x, "full_tensor"):
        x = x.full_tensor()
    return float(x)


class Trainer:
    """One fine-tune. ``initial_model`` (a plain module trained in full) replaces the task's model, and
    ``save_model=False`` / ``checkpoints=False`` leave the output to the caller: how a compression job
    (pruning recovery, QAT) trains in its own process with the same loop and the same live events."""

    def __init__(self, spec: TrainSpec, world: dist.World, rc: Any, run_dir: Path, initial_model: Any = None,
                 save_model: bool = True, checkpoints: bool = True, answer_scorer: Any = None, teacher: Any = None):
        self.spec, self.world, self.rc, self.run_dir = spec, world, rc, Path(run_dir)
        # Scores generated answers (causal LM, spec.generate_eval): engine.evaluate.generation.score_pairs,
        # passed in by the fine-tune recipe because engine.evaluate sits above the trainer. None: no generation.
        self.answer_scorer = answer_scorer
        self.initial_model, self.save_model, self.checkpoints = initial_model, save_model, checkpoints
        # A module to learn from (spec.distill's temperature and alpha) beside initial_model: QAT's fp32 parent.
        self.teacher: Any = teacher
        self.student_info: dict[str, Any] | None = None
        self.ckpt_root = self.run_dir / "checkpoints"
        self.step = 0
        self.position = (0, 0)  # (epoch, micro-batch) of the next batch
        self.best: float | None = None
        self.bad_evals = 0
        self.last_metrics: dict[str, float] = {}
        self.eval_sums: dict[str, float] = {}  # the last evaluation's raw sums, for divergence.check_eval
        # Every step's loss and every evaluation go through it: a diverged run stops and ends failed.
        self.watch = divergence.LossWatch()
        self.last_checkpoint: str | None = None  # kept when the run diverges (the hint names it)

    # ---- setup
    def setup(self) -> None:
        import torch

        world = self.world
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self.spec, self.speed = speed.resolve(self.spec, world.device, local_world)
        spec = self.spec
        seed_everything(spec.seed)
        self.mesh = mesh.build(world, spec.distributed.tensor_parallel, spec.distributed.pipeline_parallel)
        self.pipe: Any = None  # engine.strategies.pipeline.Pipeline when the layers are split into stages
        self.task = task_for(spec)  # the preference task for objective dpo, orpo or kto
        # Stats a task sums over each step (all micro-batches and processes) for its step_metrics.
        self.step_keys: tuple[str, ...] = tuple(getattr(self.task, "STEP_SUMS", ()))
        issues = self.task.validate(spec)
        if issues:
            raise InputError(issues)
        self._stage("reading the data")
        self.data = self.task.load_data(spec)
        if self.initial_model is not None:
            model = methods.apply(self.initial_model, spec, self.task)
            if self.teacher is not None:
                for p in self.teacher.parameters():
                    p.requires_grad_(False)
                self.teacher = self.teacher.to(world.device).eval()
        elif spec.distill is not None:
            model = self._student()
        else:
            self._stage(f"loading the model ({spec.model_name()})")
            model = self.task.build_model(spec, self.data)
            if hasattr(self.task, "prepare_reference"):  # dpo, kto: the base model's log-probs, once, in the rows
                self.task.prepare_reference(model, self.data, spec, world, self.autocast)
            model = methods.apply(model, spec, self.task)
        self.trainable, self.total_params = methods.count_parameters(model)
        if spec.activation_checkpointing:
            self._checkpoint_activations(model)
        if not methods.is_quantized(model):
            model.to(world.device)
        self.speed["attention"] = speed.attention_in_use(model) or spec.speed.attention
        self._measure_flops(model)
        if spec.speed.compile == "on":
            model.compile()  # in place: parameter names (checkpoints, saved weights) stay as they are
        self._stage(f"placing it on {world.device}" + (f" across {world.size} processes"
                                                         if world.distributed else ""))
        self.strategy = get_strategy(spec.distributed.strategy)
        self.deepspeed = spec.distributed.strategy == "deepspeed"
        if self.deepspeed and (reason := self.strategy.available()):
            raise JobFailed(reason, "Or use distributed.strategy ddp or fsdp.")
        if self.mesh.pp > 1:
            self.pipe = self._pipeline(model)
            self.model = self.pipe.model
        elif self.mesh.tp > 1:
            self.model = self._split(model)
        else:
            self.model = self.strategy.wrap(model, world, spec, self.task)
        self.offload = self._offload_hooks()
        params = [p for p in self.model.parameters() if p.requires_grad]
        # Kept for gradient clipping: walking the modules for them each step costs ~2 ms on a small model.
        self.train_params = params
        self.optimizer = make_optimizer(params, spec)
        self.steps = total_steps(spec, len(self.data.train), self.mesh.dp)
        self.scheduler = make_schedule(self.optimizer, spec, self.steps)
        if self.deepspeed:
            self.model, self.optimizer, self.scheduler = self.strategy.initialize(
                self.model, self.optimizer, self.scheduler, world, spec)
        use_scaler = spec.precision == "fp16" and world.device.startswith("cuda")
        self.scaler = torch.amp.GradScaler("cuda") if use_scaler else None
        self.order = ResumableOrder(len(self.data.train), spec.batch_size, self.mesh.dp_rank, self.mesh.dp, spec.seed,
                                    lengths=self.data.lengths if spec.data.group_by_length else None)
        self.trainable_only = spec.method.kind != "full"
        # Split parameters (FSDP shards, tensor-parallel slices) are saved as a distributed checkpoint.
        self.sharded = (spec.distributed.strategy == "fsdp" and world.distributed) or self.mesh.split
        self.layout = "deepspeed" if self.deepspeed else "dcp" if self.sharded else "plain"
        # Imported here: the other tasks' jobs need not import the causal LM task.
        from engine.tasks import lm_generate

        self.answers = lm_generate.for_run(spec, self.data, world, self.answer_scorer, self.rc)
        if self.pipe is not None and self.answers:
            self.answers = None
            self.rc.emit("warning", message="Answers are not generated at evaluations while the layers are split "
                         "into pipeline stages", hint="Evaluate the finished run (Evaluate page or `ember evaluate`) "
                         "for generation metrics.")

    def _stage(self, what: str) -> None:
        """Rank 0 says what the set-up does: a large model loads for minutes before the first step."""
        if self.world.is_main:
            self.rc.emit("setup", stage=what)

    def _split(self, model: Any) -> Any:
        """Tensor parallelism over the mesh's "tp" dimension, then FSDP2 over its "dp" dimension."""
        from engine.strategies import fsdp, tensor_parallel

        issues = tensor_parallel.problems(model, self.mesh.tp)
        if issues:
            raise JobFailed("; ".join(issues), "Or train it with distributed.tensor_parallel 1.")
        model = tensor_parallel.apply(model, self.mesh.device_mesh["tp"], tuple(self.task.block_types(model)))
        if self.spec.distributed.strategy == "fsdp":
            return fsdp.wrap(model, self.world, self.spec, self.task, dp_mesh=self.mesh.device_mesh["dp"])
        return model  # one data-parallel replica (the spec refuses DDP beside tensor_parallel otherwise)

    def _pipeline(self, model: Any) -> Any:
        from engine.strategies import pipeline

        d = self.spec.distributed
        issues = pipeline.problems(model, d.pipeline_parallel, d.pipeline_schedule)
        if self.mesh.tp > 1:
            from engine.strategies import tensor_parallel

            issues += tensor_parallel.problems(model, self.mesh.tp)
        if issues:
            raise JobFailed("; ".join(issues), "Or train it with distributed.pipeline_parallel 1.")
        return pipeline.build(model, self.mesh, self.spec, self.task, self.world,
                              int(self.data.info.get("pad_id") or 0))

    def _offload_hooks(self) -> Any:
        if not self.spec.activation_offload:
            return None
        if not self.world.device.startswith("cuda"):
            self.rc.emit("warning", message="activation_offload is off for this run: it runs on CPU, where the "
                         "activations are in CPU memory already", hint="It applies to runs on a CUDA GPU.")
            return None
        from engine.training import offload

        return offload.hooks()

    def _measure_flops(self, model: Any) -> None:
        """The model's training FLOPs per token (or example) and this device's peak, for MFU.

        A failure here costs the MFU figure, never the run."""
        from engine.training import mfu

        spec, world = self.spec, self.world
        self.flops: Any = None
        try:
            sample = _to_device(self.data.collate([self.data.train[i] for i in range(min(2, len(self.data.train)))]),
                                world.device)
            # The task's own forward (a preference run's model is still a causal LM's).
            self.flops = mfu.flop_model(model, spec.task, sample, get_task(spec.task).forward)
        except Exception as exc:  # noqa: BLE001 - an architecture the counter does not know
            self.rc.log(f"no FLOP count for this model ({type(exc).__name__}: {exc}); MFU is not reported")
        peak, self.peak_source = None, "unknown"
        try:
            peak, self.peak_source = mfu.device_peak(world.device, spec.precision, spec.speed.peak_tflops)
        except Exception as exc:  # noqa: BLE001 - e.g. a device query failing
            self.rc.log(f"could not tell this device's peak FLOP/s ({exc}); MFU is not reported")
        peaks = dist.all_sum(world, [peak or 0.0, 0.0 if peak else 1.0])
        self.peak_tflops = peaks[0] if not peaks[1] else None  # all processes together; none if any lacks one

    def _step_flops(self, batch: dict[str, Any], stats: dict[str, float]) -> float:
        if self.flops is None:
            return 0.0
        if self.task.HAS_TOKENS and "input_ids" in batch:
            per_token = self.flops.per_token(int(batch["input_ids"].shape[-1]))
            if per_token:
                return per_token * stats.get("tokens", 0.0)
        per_sample = self.flops.per_sample()
        return per_sample * stats.get("samples", 0.0) if per_sample else 0.0

    def _student(self) -> Any:
        """The student of ``spec.distill``: the teacher's blocks thinned out, or the spec's own model."""
        from engine.trainer import source

        d = self.spec.distill
        teacher_src = source.open_source(self.run_dir.resolve().parent / d.teacher_run)
        if teacher_src.spec.task != self.spec.task:
            raise JobFailed(f"The teacher run {d.teacher_run} is a {teacher_src.spec.task} model, this run trains "
                            f"{self.spec.task}", "Pick a teacher fine-tuned for the same task.")
        teacher = source.load_model(teacher_src, self.data)
        if d.student_layers is not None:
            from engine.trainer.distill import build_student

            student, self.student_info = build_student(teacher, self.spec.task, d.student_layers)
        else:
            student = self.task.build_model(self.spec, self.data)
        for p in teacher.parameters():
            p.requires_grad_(False)
        self.teacher = teacher.to(self.world.device).eval()
        return methods.apply(student, self.spec, self.task)

    def _forward(self, batch: dict[str, Any]) -> tuple[Any, dict[str, float]]:
        if self.teacher is None:
            return self.task.forward(self.model, batch)
        import torch

        from engine.trainer import kd

        d = self.spec.distill
        with torch.no_grad():
            teacher_logits = kd.logits(self.spec.task, self.teacher, batch)
        student_logits = kd.logits(self.spec.task, self.model, batch)
        loss, _parts = kd.task_loss(self.spec.task, student_logits, teacher_logits, batch,
                                           d.temperature, d.alpha)
        stats = {"samples": float(next(iter(batch.values())).shape[0])}
        if "attention_mask" in batch:
            stats["tokens"] = float(batch["attention_mask"].sum())
        return loss, stats

    def _checkpoint_activations(self, model: Any) -> None:
        if hasattr(model, "gradient_checkpointing_enable") and getattr(model, "supports_gradient_checkpointing", False):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            return
        from functools import partial

        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl,
            apply_activation_checkpointing,
            checkpoint_wrapper,
        )

        blocks = tuple(self.task.block_types(model))
        apply_activation_checkpointing(
            model, checkpoint_wrapper_fn=partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: isinstance(m, blocks))

    def autocast(self) -> contextlib.AbstractContextManager:
        import torch

        if self.spec.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.spec.precision == "bf16" else torch.float16
        return torch.autocast("cuda" if self.world.device.startswith("cuda") else "cpu", dtype=dtype)

    def resume(self) -> None:
        if not self.spec.resume:
            return
        ckpt, notes = checkpoint.find_resumable(self.ckpt_root)
        fallback = f"resuming from {ckpt.name} instead" if ckpt is not None else "starting from step 0 instead"
        for note in notes:
            # The user sees which checkpoint was bad and where the run really continues from.
            self.rc.emit("warning", message=f"{note[0].upper()}{note[1:]}; {fallback}",
                         hint="The damaged checkpoint is left on disk for inspection; delete it to free the space.")
            self.rc.log(f"{note}; {fallback}")
        if self.world.is_main:
            for torn in self.ckpt_root.glob(".step-*.tmp"):  # a save that was killed part-way: never used
                shutil.rmtree(torn, ignore_errors=True)
        if ckpt is None:
            return
        state = checkpoint.load(ckpt, self.model, self.optimizer,
                                {"scheduler": self.scheduler, "scaler": self.scaler}, self.world,
                                self.trainable_only, self.mesh.dp_rank)
        self.step = state["step"]
        self.position = tuple(state["position"])
        self.best, self.bad_evals = state.get("best"), state.get("bad_evals", 0)
        self.rc.emit("resumed", step=self.step, checkpoint=str(ckpt))
        self.last_checkpoint = str(ckpt)
        self.rc.log(f"resumed from {ckpt.name} at step {self.step}")

    def _flops_info(self) -> dict[str, Any]:
        if self.flops is None:
            return {"flops_per_token": None, "flops_per_sample": None, "flops_basis": None}
        seq = self.spec.data.max_length if self.task.HAS_TOKENS else None
        return {"flops_per_token": self.flops.per_token(seq) if seq else None,
                "flops_per_sample": self.flops.per_sample(), "flops_basis": self.flops.basis}

    # ---- the loop
    def run(self) -> str:
        import torch

        self.setup()
        self.resume()
        spec, world, rc = self.spec, self.world, self.rc
        info = {k: v for k, v in self.data.info.items() if isinstance(v, (int, float, str, list, bool, dict))}
        rc.emit("run_info", task=spec.task, model=spec.model_name(), method=spec.method.kind,
                strategy=spec.distributed.strategy, world_size=world.size, device=world.device,
                trainable_params=self.trainable, total_params=self.total_params, total_steps=self.steps,
                mesh=self.mesh.describe(), activation_offload=self.offload is not None,
                pipeline=self.pipe.describe() if self.pipe is not None else None,
                start_step=self.step, n_train=len(self.data.train), n_val=len(self.data.val), data=info,
                speed=self.speed, peak_tflops=self.peak_tflops, peak_source=self.peak_source,
                # The job's share of the cores (engine/threads.py): as the engine gave it, and as PyTorch uses it.
                threads={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads()},
                **self._flops_info())
        rc.log(f"{spec.task}: {spec.model_name()} with {spec.method.kind} on {world.size} process(es) "
               f"({spec.distributed.strategy}, {world.device}); {self.trainable:,} of {self.total_params:,} "
               f"parameters train; {self.steps} steps")
        loader = self._loader()
        batches = iter(loader)
        positions = self.order.iterate(*self.position)
        self.model.train()
        step_times: list[float] = []
        outcome = "succeeded"
        while self.step < self.steps:
            t0 = time.perf_counter()
            loss_sum = torch.zeros((), dtype=torch.float64)
            samples = tokens = slots = flops = 0.0
            extra: dict[str, float] = {}  # a task's own per-step sums, for its step_metrics
            wait = 0.0
            for micro in range(spec.grad_accum):
                tw = time.perf_counter()
                batch = _to_device(next(batches), world.device)
                wait += time.perf_counter() - tw
                epoch, index, _ = next(positions)
                self.position = (epoch, index + 1)  # where a resumed run picks up
                with (self.strategy.no_sync(self.model, micro == spec.grad_accum - 1), self.autocast(),
                      self.offload or contextlib.nullcontext()):
                    if self.pipe is not None:  # forward and backward through every stage, micro-batch by micro-batch
                        pipe_loss, stats = self.pipe.train_step(batch, spec.grad_accum)
                        loss = torch.tensor(pipe_loss)
                    else:
                        loss, stats = self._forward(batch)
                # Every process of a replica sees the same batch: each counts its share of it.
                stats = {k: v * self.mesh.share for k, v in stats.items()} if self.mesh.split else stats
                if self.deepspeed:
                    # DeepSpeed divides by grad_accum itself and steps on the accumulation boundary.
                    self.model.backward(loss)
                    self.model.step()
                elif self.pipe is None:  # (a pipeline's schedule ran the backward pass itself)
                    scaled = loss / spec.grad_accum
                    (self.scaler.scale(scaled) if self.scaler else scaled).backward()
                loss_sum += loss.detach().double().cpu()
                samples += stats.get("samples", 0)
                tokens += stats.get("tokens", 0)
                slots += stats.get("positions", 0)  # padding included
                flops += self._step_flops(batch, stats)
                for k in self.step_keys:
                    extra[k] = extra.get(k, 0.0) + stats.get(k, 0.0)
            local_loss = float(loss_sum) / spec.grad_accum
            finite = math.isfinite(local_loss)
            totals = dist.all_sum(world, [local_loss * self.mesh.loss_share if finite else 0.0, samples, tokens,
                                          0.0 if finite else 1.0, 1.0 if rc.stop_requested else 0.0,
                                          slots, flops, *(extra.get(k, 0.0) for k in self.step_keys)])
            mean_loss = totals[0] / self.mesh.dp
            if totals[3]:
                # With DeepSpeed the step already ran inside the engine: it cannot be skipped.
                skipping = spec.nan_policy == "skip" and not self.deepspeed
                found = self.watch.non_finite(self.step + 1, skipping)
                if found is not None:
                    self._diverge(found, " With DeepSpeed such steps cannot be skipped." if self.deepspeed else
                                  "" if skipping else " Or set nan_policy: skip to skip such steps instead.")
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                rc.emit("warning", step=self.step, message=f"Skipped step {self.step}: the loss was NaN or infinite",
                        hint="If this repeats, lower optim.lr.")
                continue
            grad_norm = self._optimizer_step()
            moved = self.offload.take() if self.offload is not None else 0
            self.step += 1
            dt = time.perf_counter() - t0
            step_times.append(dt)
            if self.step % spec.log_every == 0 or self.step == self.steps:
                recent = step_times[-20:]
                eta = (self.steps - self.step) * (sum(recent) / len(recent))
                event = {"step": self.step, "loss": mean_loss, "lr": self.scheduler.get_last_lr()[0],
                         "grad_norm": grad_norm, "samples_per_s": totals[1] / dt, "step_time_s": dt,
                         "data_wait_frac": wait / dt if dt else 0.0, "epoch": self.position[0],
                         "progress": self.step / self.steps, "eta_s": eta}
                if self.offload is not None:
                    event["offloaded_bytes"] = moved  # saved activations copied to CPU in this step
                if self.task.HAS_TOKENS:
                    event["tokens_per_s"] = totals[2] / dt
                    if totals[5]:
                        event["padding_frac"] = max(0.0, 1.0 - totals[2] / totals[5])
                if totals[6] and dt:
                    event["tflops"] = totals[6] / dt / 1e12
                    if self.peak_tflops:
                        # At most 1, as mfu.mfu: above it the peak is wrong, not the model faster than the device.
                        event["mfu"] = min(1.0, event["tflops"] / self.peak_tflops)
                if self.step_keys:  # e.g. the preference task's reward figures
                    event.update(self.task.step_metrics(dict(zip(self.step_keys, totals[7:], strict=True))))
                rc.emit("train", **event)
            found = self.watch.add(self.step, mean_loss)
            if found is not None:
                self._diverge(found)  # before any checkpoint of this step: the kept ones are from before
            if self.step % spec.memory_every == 0 or self.step == 1:
                coords = self.mesh.coords(world.rank) if self.mesh.split else None
                records = dist.gather_objects(world, memory_record(world, coords))
                rc.emit("memory", step=self.step, ranks=records)
            stopping = bool(totals[4])
            if self.step % spec.eval_every == 0 or self.step == self.steps:
                if self._evaluate_and_check_early_stop():
                    rc.log(f"early stopping at step {self.step}: {spec.early_stopping.metric} did not improve")
                    rc.emit("early_stop", step=self.step, metric=spec.early_stopping.metric, best=self.best)
                    self._checkpoint()
                    break
            if stopping:
                path = self._checkpoint()
                rc.emit("stopped", step=self.step, checkpoint=str(path))
                rc.log(f"stopped at step {self.step}; checkpoint {path.name}")
                outcome = "stopped"
                break
            if self.checkpoints and (self.step % spec.checkpoint_every == 0 or self.step == self.steps):
                self._checkpoint()
        if outcome == "succeeded" and self.save_model:
            self._save_model()
        return outcome

    def _loader(self) -> Any:
        from torch.utils.data import DataLoader

        order = self.order

        class Batches:
            def __init__(self, start: tuple[int, int]):
                self.start = start

            def __iter__(self):
                return (indices for _e, _b, indices in order.iterate(*self.start))

        import torch

        # Its own generator: creating the iterator draws a seed, which must not shift the global
        # RNG (dropout), or a resumed run would diverge from an uninterrupted one.
        generator = torch.Generator().manual_seed(self.spec.seed)
        workers = self.spec.data.num_workers or 0
        prefetch = {"prefetch_factor": self.spec.data.prefetch_factor} if workers else {}
        return DataLoader(self.data.train, batch_sampler=Batches(self.position), collate_fn=self.data.collate,
                          generator=generator, num_workers=workers,
                          pin_memory=self.world.device.startswith("cuda"),
                          persistent_workers=workers > 0, **prefetch)

    def _optimizer_step(self) -> float:
        import torch

        if self.deepspeed:
            norm = self.model.get_global_grad_norm()  # the step itself ran with the last micro-batch
            return float(norm) if norm is not None else float("nan")

        clip = self.spec.optim.grad_clip
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if self.pipe is not None:
            self.pipe.sync_tied()
        params = [p for p in self.train_params if p.grad is not None]
        if self.pipe is not None:
            norm = self.pipe.clip_grad_norm(params, clip if clip else float("inf"))
        elif self.mesh.tp > 1:
            from engine.strategies.tensor_parallel import clip_grad_norm

            norm = clip_grad_norm(params, clip if clip else float("inf"))
        else:
            norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return _scalar(norm)

    def evaluate(self) -> dict[str, float]:
        import torch

        spec, world = self.spec, self.world
        batches, most = eval_shards(len(self.data.val), spec.batch_size, self.mesh.dp_rank, self.mesh.dp)
        sums: dict[str, float] = {}
        collate = self.data.val_collate or self.data.collate  # packed training, unpacked eval
        self.model.eval()
        with torch.no_grad(), self.autocast():
            for i in range(most):
                real = i < len(batches)
                idx = batches[i] if real else batches[0] if batches else [0]
                batch = _to_device(collate([self.data.val[j] for j in idx]), world.device)
                part = self.pipe.eval_sums(batch) if self.pipe is not None else self.task.eval_sums(self.model, batch)
                if real:
                    for k, v in part.items():
                        sums[k] = sums.get(k, 0.0) + float(v)
        self.model.train()
        total: dict[str, float] = {}
        for rank, part in enumerate(dist.gather_objects(world, sums)):
            if not self.mesh.reports(rank):
                continue  # its replica's figures come from the first tp slice of its last stage
            for k, v in part.items():  # type: ignore[union-attr]
                total[k] = total.get(k, 0.0) + v
        self.eval_sums = total
        return self.task.finalize_metrics(total)

    def _diverge(self, found: divergence.Divergence, more_hint: str = "") -> None:
        """Say so (a ``diverged`` event), then end the run failed: no checkpoint or final model of this state."""
        hint = divergence.hint(self.spec, Path(self.last_checkpoint).name if self.last_checkpoint else None)
        hint += more_hint
        self.rc.emit("diverged", step=found.step, loss=found.loss, start_loss=found.start_loss,
                     message=found.message, hint=hint, checkpoint=self.last_checkpoint)
        self.rc.log(f"{found.message}; stopping")
        raise divergence.Diverged(found, hint)

    def _evaluate_and_check_early_stop(self) -> bool:
        if self.world.is_main:  # the next event may be minutes away (a large validation set, generation)
            self.rc.emit("evaluating", step=self.step, what="validation loss")
        metrics = self.evaluate()
        answers = self.answers.run(self.model, self.autocast(), self.step) if self.answers else {}
        metrics.update(answers.pop("metrics", None) or {})  # generation metrics, samples and generation_s
        self.last_metrics = metrics
        self.rc.emit("eval", step=self.step, metrics=metrics, **answers)
        found = self.watch.check_eval(self.step, metrics, self.eval_sums)
        if found is not None:
            self._diverge(found)
        es = self.spec.early_stopping
        if es is None or es.metric not in metrics:
            return False
        value = metrics[es.metric]
        better = self.best is None or (value > self.best if es.mode == "max" else value < self.best)
        if better:
            self.best, self.bad_evals = value, 0
        else:
            self.bad_evals += 1
        return self.bad_evals >= es.patience

    def _checkpoint(self) -> Path:
        if not self.checkpoints:
            return self.ckpt_root  # the caller keeps no checkpoints (a compression job's short fine-tune)
        t0 = time.perf_counter()
        path = checkpoint.save(
            self.ckpt_root, self.step, self.model, self.optimizer,
            {"scheduler": self.scheduler, "scaler": self.scaler},
            {"position": list(self.position), "best": self.best, "bad_evals": self.bad_evals, "mesh": self.mesh.describe(),
             "spec": self.spec.model_dump(mode="json")},
            self.world, self.layout, self.trainable_only, self.spec.keep_checkpoints)
        self.rc.emit("checkpoint", step=self.step, path=str(path), seconds=time.perf_counter() - t0)
        self.last_checkpoint = str(path)
        return path

    def _save_model(self) -> None:
        """Final weights for compression and export: ``model/weights.safetensors`` + ``model/ember_model.json``."""
        import json

        from safetensors.torch import save_file

        if self.sharded:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            if self.pipe is None:
                sd = get_model_state_dict(self.model,
                                          options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            else:
                # Each stage holds its own layers: one process per stage sends them, rank 0 writes them all.
                sd = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
                c = self.mesh.coords(self.world.rank)
                mine = {k: v.detach().cpu() for k, v in sd.items()} if c["dp"] == 0 and c["tp"] == 0 else {}
                sd = {k: v for part in dist.gather_objects(self.world, mine) for k, v in part.items()}  # type: ignore[union-attr]
        else:
            sd = checkpoint.unwrap(self.model).state_dict()
        if self.world.is_main:
            out = self.run_dir / "model"
            try:
                self._write_model(out, sd, save_file, json)
            except Exception as exc:
                full = disk_full(exc, out, "writing the final model")
                if full is not None:
                    raise full from exc
                raise
        dist.barrier(self.world)

    def _write_model(self, out: Path, sd: dict[str, Any], save_file: Any, json: Any) -> None:
        out.mkdir(exist_ok=True)
        save_file({k: v.detach().contiguous().clone() for k, v in sd.items()}, str(out / "weights.safetensors"))
        meta = {"task": self.spec.task, "model": self.spec.model.model_dump(), "method": self.spec.method.model_dump(),
                "data_info": {k: v for k, v in self.data.info.items() if isinstance(v, (int, float, str, list))},
                "metrics": self.last_metrics, "step": self.step}
        if self.student_info is not None:
            meta["student"] = self.student_info
            meta["teacher_run"] = self.spec.distill.teacher_run
        (out / "ember_model.json").write_text(json.dumps(meta, indent=1))
        self.rc.emit("artifact", type="model", path=str(out), step=self.step)
