"""DeepSpeed ZeRO stage 1, 2 or 3, with optional CPU offload of optimizer state and parameters.

DeepSpeed owns the optimizer step, gradient accumulation and clipping, so the
recipe hands it the optimizer and schedule and calls ``backward``/``step`` on
the engine it returns. On a machine without CUDA it runs on the CPU accelerator
(gloo), which is how the tests exercise every stage.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any


def available() -> str | None:
    """None when DeepSpeed can run here, else why not."""
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        return "DeepSpeed is not installed: pip install 'ember-studio[deepspeed]' (it builds against your torch)"
    return None


def config(spec: Any) -> dict[str, Any]:
    d = spec.distributed
    zero: dict[str, Any] = {"stage": d.zero_stage}
    if d.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if d.offload_params and d.zero_stage == 3:
        zero["offload_param"] = {"device": "cpu"}
    if d.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return {
        "train_micro_batch_size_per_gpu": spec.batch_size,
        "gradient_accumulation_steps": spec.grad_accum,
        "gradient_clipping": spec.optim.grad_clip or 0.0,
        "zero_optimization": zero,
        "bf16": {"enabled": spec.precision == "bf16"},
        "fp16": {"enabled": spec.precision == "fp16"},
        # Ember's own optimizers (AdamW, SGD) rather than DeepSpeed's compiled ones.
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def initialize(model: Any, optimizer: Any, scheduler: Any, world: Any, spec: Any) -> tuple[Any, Any, Any]:
    if not world.device.startswith("cuda"):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch
    import torch.distributed as dist

    if not world.device.startswith("cuda"):
        # On CPU, DeepSpeed's communication backend compiles a shared-memory all-reduce kernel when it starts
        # (about 2 minutes of g++ on two cores, on each machine's first run). Only its inference all-reduce
        # uses that kernel; training reduces through torch.distributed (gloo here), so it is not built.
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

    if not dist.is_initialized():
        # One process: engine.training.dist leaves the process group out, but DeepSpeed needs one.
        # An in-memory store is enough for a group of one (no port, no rendezvous).
        cuda = world.device.startswith("cuda")
        for name, value in (("LOCAL_RANK", world.local_rank), ("RANK", 0), ("WORLD_SIZE", 1)):
            os.environ.setdefault(name, str(value))  # what torchrun would have set; DeepSpeed reads them
        dist.init_process_group(backend="nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=torch.device(world.device) if cuda else None)
    engine, optimizer, _, scheduler = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config(spec), dist_init_required=False)
    return engine, optimizer, scheduler


def wrap(model: Any, world: Any, spec: Any, task: Any) -> Any:
    return model  # the recipe calls initialize() once the optimizer exists


def no_sync(model: Any, sync: bool) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()  # DeepSpeed accumulates by itself


def full_state_dict(engine: Any, world: Any) -> dict[str, Any]:
    """The whole model's weights on rank 0 (ZeRO-3 gathers the partitions)."""
    if engine.zero_optimization_stage() == 3:
        sd = engine._zero3_consolidated_16bit_state_dict()
        return sd if world.is_main else {}
    return engine.module.state_dict()
