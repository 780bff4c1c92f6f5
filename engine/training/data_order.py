"""Deterministic, resumable data order for every rank.

Epoch ``e`` is a permutation drawn from ``seed + e``; rank ``r`` of ``w`` takes
every ``w``-th index of it (the tail is cut so each rank gets as many batches).
A position is (epoch, micro-batch index), so a resumed run continues with the
exact batch it would have seen next.

With ``lengths`` (data.group_by_length) batches hold examples of similar length, so
little of each batch is padding: the epoch's permutation is cut into mega-batches of
``MEGA`` global batches, each sorted by length and cut into global batches (one
micro-batch for every rank, each rank a contiguous slice, so ranks see similar
lengths and finish their steps together); the global batches are then shuffled, with
the one holding the longest example first, so a batch too big for memory fails at the
first step rather than hours in. The same seed gives the same batches, so resuming
works the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

MEGA = 50  # global batches per length-sorted mega-batch: enough to group well, few enough to stay random


class ResumableOrder:
    def __init__(self, n: int, batch_size: int, rank: int, world: int, seed: int, shuffle: bool = True,
                 lengths: list[int] | None = None):
        if n < batch_size * world:
            raise ValueError(f"{n} training examples are fewer than one batch on each of {world} "
                             f"process(es) at batch size {batch_size}")
        if lengths is not None and len(lengths) != n:
            raise ValueError(f"{len(lengths)} lengths for {n} examples")
        self.n, self.batch_size, self.rank, self.world, self.seed, self.shuffle = n, batch_size, rank, world, seed, shuffle
        self.lengths = lengths
        self.batches_per_epoch = n // (batch_size * world)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        import torch

        g = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(self.n, generator=g).tolist() if self.shuffle else list(range(self.n))
        if self.lengths is not None:
            return self._grouped(order, g)
        mine = order[self.rank::self.world][: self.batches_per_epoch * self.batch_size]
        return [mine[i:i + self.batch_size] for i in range(0, len(mine), self.batch_size)]

    def _grouped(self, order: list[int], g: object) -> list[list[int]]:
        import torch

        lengths, size = self.lengths, self.batch_size * self.world
        assert lengths is not None
        span = MEGA * size
        ordered: list[int] = []
        for i in range(0, len(order), span):  # sorted() is stable: equal lengths keep their random order
            ordered += sorted(order[i:i + span], key=lambda j: lengths[j])
        groups = [ordered[b * size:(b + 1) * size] for b in range(self.batches_per_epoch)]
        if self.shuffle:
            perm = torch.randperm(len(groups), generator=g).tolist()  # type: ignore[arg-type]
            groups = [groups[p] for p in perm]
            longest = max(range(len(groups)), key=lambda b: (max(lengths[j] for j in groups[b]), -b))
            groups.insert(0, groups.pop(longest))
        lo = self.rank * self.batch_size
        return [batch[lo:lo + self.batch_size] for batch in groups]

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
