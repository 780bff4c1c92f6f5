"""Which share of the work each process holds: data-parallel replicas x tensor-parallel slices.

Ranks are laid out with the tensor-parallel dimension innermost (rank = dp_index * tp + tp_index), so the
processes that split one model's matrices sit next to each other, on one machine when nodes are filled in
order: tensor parallelism talks on every layer, data parallelism once a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.training import dist


@dataclass(frozen=True)
class Layout:
    dp: int  # data-parallel replicas: each trains on its own batches
    tp: int  # processes that split one replica's matrices
    dp_rank: int
    tp_rank: int
    device_mesh: Any = None  # torch's DeviceMesh ("dp", "tp") when tp > 1

    @property
    def counts(self) -> bool:
        """Whether this rank's per-batch figures (samples, tokens, eval sums) count: the tp ranks of one replica
        see the same batch, so only the first of them reports it."""
        return self.tp_rank == 0

    @property
    def share(self) -> float:
        """This rank's share of its replica's figures, so that summing over every rank counts each batch once."""
        return 1.0 / self.tp

    def coords(self, rank: int) -> dict[str, int]:
        return {"dp": rank // self.tp, "tp": rank % self.tp}

    def describe(self) -> dict[str, Any]:
        return {"dp": self.dp, "tp": self.tp, "order": ["dp", "tp"]}


def build(world: dist.World, tensor_parallel: int) -> Layout:
    """The layout for this world; a DeviceMesh only when the model is split (DDP and FSDP need none)."""
    tp = tensor_parallel
    if tp == 1:
        return Layout(world.size, 1, world.rank, 0)
    if world.size % tp:
        from engine.training.context import JobFailed

        raise JobFailed(f"distributed.tensor_parallel {tp} does not divide the {world.size} processes this run has",
                        f"Start it with a multiple of {tp} processes, or change tensor_parallel.")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cuda" if world.device.startswith("cuda") else "cpu", (world.size // tp, tp),
                            mesh_dim_names=("dp", "tp"))
    return Layout(world.size // tp, tp, world.rank // tp, world.rank % tp, mesh)
