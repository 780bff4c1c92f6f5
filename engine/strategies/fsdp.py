"""FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded per block."""

from __future__ import annotations

import contextlib
from typing import Any


def wrap(model: Any, world: Any, spec: Any, task: Any) -> Any:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not world.distributed:
        return model
    mp = None
    if spec.precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if spec.precision == "bf16" else torch.float16
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    kwargs = {"mp_policy": mp} if mp else {}
    block_types = tuple(task.block_types(model))
    for module in model.modules():
        if block_types and isinstance(module, block_types):
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


def no_sync(model: Any, sync: bool) -> contextlib.AbstractContextManager:
    # FSDP2 reduce-scatters on every backward unless told not to.
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()
