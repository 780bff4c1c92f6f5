"""Which share of the work each process holds: pipeline stages x data-parallel replicas x tensor-parallel
slices.

Ranks are laid out with the tensor-parallel dimension innermost and the pipeline outermost
(rank = (pp_index * dp + dp_index) * tp + tp_index), as torchtitan does: the processes that split one
model's matrices talk on every layer and sit next to each other, on one machine when nodes are filled in
order; pipeline stages talk least, once per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.training import dist

ORDER = ["pp", "dp", "tp"]


@dataclass(frozen=True)
class Layout:
    pp: int  # pipeline stages' processes: each holds part of the layers
    dp: int  # data-parallel replicas: each trains on its own batches
    tp: int  # processes that split one stage's matrices
    pp_rank: int
    dp_rank: int
    tp_rank: int
    device_mesh: Any = None  # torch's DeviceMesh ("pp", "dp", "tp") when the model is split

    @property
    def share(self) -> float:
        """This rank's share of its replica's per-batch figures (samples, tokens, FLOPs): every process of a
        replica sees the same batch, so summing over every rank counts each batch once."""
        return 1.0 / (self.tp * self.pp)

    @property
    def loss_share(self) -> float:
        """This rank's share of its replica's loss: the loss is computed on the last pipeline stage, by each of
        that stage's tp processes; the other stages have none to report."""
        return 1.0 / self.tp if self.pp_rank == self.pp - 1 else 0.0

    @property
    def split(self) -> bool:
        return self.tp > 1 or self.pp > 1

    def coords(self, rank: int) -> dict[str, int]:
        return {"pp": rank // (self.dp * self.tp), "dp": (rank // self.tp) % self.dp, "tp": rank % self.tp}

    def reports(self, rank: int) -> bool:
        """Whether ``rank`` reports its replica's loss and evaluation sums: the first tp slice of the last
        pipeline stage (where the loss is computed)."""
        c = self.coords(rank)
        return c["tp"] == 0 and c["pp"] == self.pp - 1

    def pp_ends(self) -> list[list[int]]:
        """For each (dp, tp) place, the ranks holding the first and the last pipeline stage."""
        return [[(0 * self.dp + d) * self.tp + t, ((self.pp - 1) * self.dp + d) * self.tp + t]
                for d in range(self.dp) for t in range(self.tp)]

    def describe(self) -> dict[str, Any]:
        return {"pp": self.pp, "dp": self.dp, "tp": self.tp, "order": ORDER}


def build(world: dist.World, tensor_parallel: int, pipeline_parallel: int = 1) -> Layout:
    """The layout for this world; a DeviceMesh only when the model is split (DDP and FSDP alone need none)."""
    tp, pp = tensor_parallel, pipeline_parallel
    if tp == 1 and pp == 1:
        return Layout(1, world.size, 1, 0, world.rank, 0)
    if world.size % (tp * pp):
        from engine.training.context import JobFailed

        raise JobFailed(f"tensor_parallel {tp} x pipeline_parallel {pp} does not divide the {world.size} processes "
                        "this run has", f"Start it with a multiple of {tp * pp} processes, or change the split.")
    from torch.distributed.device_mesh import init_device_mesh

    dp = world.size // (tp * pp)
    mesh = init_device_mesh("cuda" if world.device.startswith("cuda") else "cpu", (pp, dp, tp),
                            mesh_dim_names=tuple(ORDER))
    layout = Layout(pp, dp, tp, 0, 0, 0, mesh)
    c = layout.coords(world.rank)
    return Layout(pp, dp, tp, c["pp"], c["dp"], c["tp"], mesh)
