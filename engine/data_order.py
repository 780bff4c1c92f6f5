"""Deterministic, resumable data order for every rank.

Epoch ``e`` is a permutation drawn from ``seed + e``; rank ``r`` of ``w`` takes
every ``w``-th index of it (the tail is cut so each rank gets as many batches).
A position is (epoch, micro-batch index), so a resumed run continues with the
exact batch it would have seen next.
"""

from __future__ import annotations

from collections.abc import Iterator


class ResumableOrder:
    def __init__(self, n: int, batch_size: int, rank: int, world: int, seed: int, shuffle: bool = True):
        if n < batch_size * world:
            raise ValueError(f"{n} training examples are fewer than one batch on each of {world} "
                             f"process(es) at batch size {batch_size}")
        self.n, self.batch_size, self.rank, self.world, self.seed, self.shuffle = n, batch_size, rank, world, seed, shuffle
        self.batches_per_epoch = n // (batch_size * world)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        import torch

        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        mine = order[self.rank::self.world][: self.batches_per_epoch * self.batch_size]
        return [mine[i:i + self.batch_size] for i in range(0, len(mine), self.batch_size)]

    def iterate(self, epoch: int, start_batch: int) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, batch index, indices) forever, from the given position."""
        while True:
            batches = self.epoch_batches(epoch)
            for b in range(start_batch, len(batches)):
                yield epoch, b, batches[b]
            epoch, start_batch = epoch + 1, 0


def eval_shards(n: int, batch_size: int, rank: int, world: int) -> tuple[list[list[int]], int]:
    """This rank's eval batches and the batch count of the largest shard.

    Sharded strategies (FSDP) need every rank to run the same number of
    forwards, so ranks with fewer batches run extra ones whose results are dropped.
    """
    mine = list(range(rank, n, world))
    batches = [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]
    largest = len(range(0, n, world))
    return batches, -(-largest // batch_size)
