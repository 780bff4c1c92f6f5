"""Process-group facts for recipes launched by torchrun (or run as one plain process)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    rank: int
    local_rank: int
    size: int
    device: str  # "cpu" or "cuda:<local_rank>"
    host: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def init(device_pref: str = "auto") -> World:
    """Join the process group torchrun set up (gloo on CPU, NCCL on CUDA)."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    size = int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = device_pref == "cuda" or (device_pref == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        from engine.training.context import JobFailed

        raise JobFailed("device: cuda was asked for, but this machine has no usable CUDA GPU",
                        "Set device to auto or cpu, or run on a host with a GPU.")
    device = f"cuda:{local_rank}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if size > 1 and not dist.is_initialized():
        from datetime import timedelta

        from torch.distributed.rendezvous import rendezvous

        store, rank, size = next(rendezvous("env://", rank=rank, world_size=size, timeout=timedelta(minutes=5)))
        # After torchrun restarts a failed worker group, the store still holds the old group's
        # addresses; a prefix per attempt keeps the new group from dialling dead workers.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"ember/attempt-{attempt}", store)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", store=store, rank=rank, world_size=size,
                                device_id=torch.device(device) if use_cuda else None)
    # A multi-node run names each node by its host profile, so memory per rank shows which host.
    return World(rank, local_rank, size, device, os.environ.get("EMBER_NODE_NAME") or socket.gethostname())


def barrier(world: World) -> None:
    if world.distributed:
        import torch.distributed as dist

        dist.barrier()


def all_sum(world: World, values: list[float]) -> list[float]:
    """Sum a few floats across ranks in one collective."""
    if not world.distributed:
        return values
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64,
                     device=world.device if world.device.startswith("cuda") else "cpu")
    dist.all_reduce(t)
    return t.tolist()


def gather_objects(world: World, obj: object) -> list[object]:
    if not world.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[object] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def shutdown(world: World) -> None:
    if world.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def torch_distributed_ready() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
