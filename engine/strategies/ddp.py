"""DistributedDataParallel: a full replica per process, gradients all-reduced."""

from __future__ import annotations

import contextlib
from typing import Any


def wrap(model: Any, world: Any, spec: Any, task: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    if not world.distributed:
        return model
    device_ids = [world.local_rank] if world.device.startswith("cuda") else None
    # LoRA and prompt tuning leave most parameters frozen; DDP only syncs the trainable ones.
    return DistributedDataParallel(model, device_ids=device_ids,
                                   find_unused_parameters=spec.method.kind == "prompt_tuning")


def no_sync(model: Any, sync: bool) -> contextlib.AbstractContextManager:
    # Skip the gradient all-reduce on accumulation micro-steps.
    if sync or not hasattr(model, "no_sync"):
        return contextlib.nullcontext()
    return model.no_sync()
