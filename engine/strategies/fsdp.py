"""FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded per block."""

from __future__ import annotations

import contextlib
from typing import Any


def wrap(model: Any, world: Any, spec: Any, task: Any, dp_mesh: Any = None) -> Any:
    """``dp_mesh``: the data-parallel dimension of a 2D mesh when the model is also split by tensor
    parallelism (FSDP2 x TP); None shards over every process."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not world.distributed or (dp_mesh is not None and dp_mesh.size() == 1):
        return model
    mp = None
    if spec.precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if spec.precision == "bf16" else torch.float16
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    kwargs: dict[str, Any] = {"mp_policy": mp} if mp else {}
    if dp_mesh is not None:
        kwargs["mesh"] = dp_mesh
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
