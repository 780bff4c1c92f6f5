"""Sequence packing for causal LM fine-tuning: several short examples in one row, kept apart.

The tokenized training examples are packed best-fit decreasing into rows of at most
``data.max_length`` tokens. A packed batch has no ``attention_mask``; instead its
``position_ids`` restart at 0 for each example. transformers (5.x, ``masking_utils``)
reads that as packed sequences when the 2D mask is None and no KV cache is in use
(``use_cache=False``): sdpa and eager get a block-diagonal causal mask built from the
position ids, so no example attends to another and each gets the positions it would
have alone. Flash attention only infers the boundaries from position ids for a single
row, so ``model_kwargs`` hands it the cumulative sequence lengths of the whole batch.
Padding at the end of a row is one more "example" with label -100 throughout.

The loss never crosses a boundary: the label of each example's first token is -100,
so the shifted target of the previous example's last token is ignored.
``check_boundaries`` proves, on the loaded model, that its attention keeps packed
examples apart (an architecture that ignores position ids for masking would not).
"""

from __future__ import annotations

import bisect
import random
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

IGNORE = -100
PAD_TO = 8  # row width is a multiple of this: tensor-core friendly, fewer compiled shapes
# Attention implementations (substrings of the name) that need cumulative sequence lengths:
# flash_attention_2/3 and the hub flash kernels read packed position ids only when the batch is one row.
VARLEN_KERNELS = ("flash",)


def best_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into bins holding at most ``capacity`` tokens each.

    Longest first, each into the fullest bin it still fits (ties: the earliest length
    index first, the most recently touched bin first), so the result depends on the
    lengths alone. Every index appears exactly once; within a bin, longest first.
    """
    if any(n > capacity for n in lengths):
        raise ValueError(f"an example of {max(lengths)} tokens does not fit in a row of {capacity}")
    bins: list[list[int]] = []
    spaces: list[int] = []  # sorted distinct free-space values that some bin has
    by_space: dict[int, list[int]] = {}  # free space -> bins with exactly that much
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        need = lengths[i]
        k = bisect.bisect_left(spaces, need)
        if k == len(spaces):
            b, free = len(bins), capacity
            bins.append([])
        else:
            free = spaces[k]
            b = by_space[free].pop()
            if not by_space[free]:
                del by_space[free]
                spaces.pop(k)
        bins[b].append(i)
        left = free - need
        if left not in by_space:
            by_space[left] = []
            bisect.insort(spaces, left)
        by_space[left].append(b)
    return bins


def pack_row(examples: list[dict[str, list[int]]]) -> dict[str, list[int]]:
    """One packed row: the examples' tokens end to end, their labels with each first label -100."""
    ids: list[int] = []
    labels: list[int] = []
    seq_lens: list[int] = []
    for e in examples:
        ids += e["input_ids"]
        labels += [IGNORE] + list(e["labels"][1:])
        seq_lens.append(len(e["input_ids"]))
    return {"input_ids": ids, "labels": labels, "seq_lens": seq_lens}


class PackedRows:
    """Map-style dataset of packed rows; rows are assembled on access (torch-free, pickles to workers)."""

    def __init__(self, examples: Any, bins: list[list[int]]):
        self.examples, self.bins = examples, bins

    def __len__(self) -> int:
        return len(self.bins)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return pack_row([self.examples[j] for j in self.bins[i]])

    def row_length(self, i: int) -> int:
        return sum(len(self.examples[j]["input_ids"]) for j in self.bins[i])


class PackedCollator:
    """Right-pads packed rows: input_ids, labels (-100 on padding), position_ids restarting per example.

    Also ``row_tokens`` (real tokens per row) and ``row_examples`` (examples per row) for the stats.
    There is deliberately no ``attention_mask``: a 2D mask would make transformers ignore the packing.
    Plain examples (no ``seq_lens``, as evaluation and export code pass validation rows) go to
    ``plain``, the task's padding collator, so ``data.collate`` works for them as before.
    """

    def __init__(self, pad_id: int, multiple_of: int = PAD_TO, plain: Any = None):
        self.pad_id, self.multiple_of, self.plain = pad_id, multiple_of, plain

    def __call__(self, rows: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        import torch

        if self.plain is not None and rows and "seq_lens" not in rows[0]:
            return self.plain(rows)
        longest = max(len(r["input_ids"]) for r in rows)
        width = -(-longest // self.multiple_of) * self.multiple_of
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        positions = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[r, :n] = torch.tensor(row["input_ids"])
            labels[r, :n] = torch.tensor(row["labels"])
            # the padding is its own segment (0, 1, ...), so it never joins the last example
            pos = [p for length in row["seq_lens"] for p in range(length)] + list(range(width - n))
            positions[r] = torch.tensor(pos)
        return {"input_ids": ids, "labels": labels, "position_ids": positions,
                "row_tokens": torch.tensor([len(r["input_ids"]) for r in rows]),
                "row_examples": torch.tensor([len(r["seq_lens"]) for r in rows])}


def model_kwargs(model: Any, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What the model needs to keep a packed batch's examples apart.

    sdpa/eager/flex: position_ids with no attention_mask (transformers builds the
    block-diagonal mask). Flash attention: also the cumulative sequence lengths over the
    flattened batch, since it infers them from position ids only for a single row.
    """
    kwargs: dict[str, Any] = {"position_ids": batch["position_ids"]}
    impl = str(getattr(getattr(model, "config", None), "_attn_implementation", "") or "")
    if any(k in impl for k in VARLEN_KERNELS):
        import torch

        flat = batch["position_ids"].reshape(-1)
        starts = (flat == 0).nonzero().view(-1)
        cu = torch.cat([starts, torch.tensor([flat.numel()], device=flat.device)]).to(torch.int32)
        longest = int(cu.diff().max())
        kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest)
    return kwargs


def padding_fraction(lengths: list[int], batches: list[list[int]], multiple_of: int = PAD_TO) -> float:
    """Share of the computed positions that are padding when each batch is padded to its longest (rounded up)."""
    real = computed = 0
    for b in batches:
        if not b:
            continue
        longest = max(lengths[i] for i in b)
        computed += len(b) * (-(-longest // multiple_of) * multiple_of)
        real += sum(lengths[i] for i in b)
    return 1.0 - real / computed if computed else 0.0


def random_batches(n: int, batch_size: int, seed: int) -> list[list[int]]:
    """A seeded random order cut into batches: the baseline the padding figures compare against."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def pack(examples: Any, max_length: int, batch_size: int, seed: int = 0) -> tuple[PackedRows, dict[str, Any]]:
    """Pack ``examples`` (dicts with input_ids and labels) into rows; and the figures for data.info."""
    lengths = [len(examples[i]["input_ids"]) for i in range(len(examples))]
    bins = best_fit_decreasing(lengths, max_length)
    rows = PackedRows(examples, bins)
    row_lengths = [rows.row_length(i) for i in range(len(rows))]
    info = {
        "packed_rows": len(rows),
        "examples_per_row": round(len(lengths) / max(1, len(rows)), 3),
        "row_fill": round(sum(row_lengths) / max(1, len(rows) * max_length), 4),
        "padding_frac_unpacked": round(padding_fraction(lengths, random_batches(len(lengths), batch_size, seed)), 4),
        "padding_frac_packed": round(padding_fraction(row_lengths, random_batches(len(rows), batch_size, seed)), 4),
    }
    return rows, info


def check_boundaries(model: Any, logits_fn: Any) -> str | None:
    """None when the model keeps packed examples apart; else what goes wrong.

    Runs a packed batch of two rows (three short examples and padding) through
    ``logits_fn(model, batch)``, the same path training takes, and compares each
    example's logits with those of the example alone. A leak shows as a difference
    about as large as running the examples with no boundary at all.
    """
    import torch

    vocab = int(getattr(model.config, "vocab_size", 0) or 0) or 32
    seqs = [[(7 * k + 3) % vocab for k in range(n, n + length)] for n, length in ((1, 6), (20, 5), (40, 4))]
    rows = [pack_row([{"input_ids": seqs[0], "labels": seqs[0]}, {"input_ids": seqs[1], "labels": seqs[1]}]),
            pack_row([{"input_ids": seqs[2], "labels": seqs[2]}])]
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in PackedCollator(0)(rows).items()}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = logits_fn(model, batch).float()
            alone = [logits_fn(model, {"input_ids": torch.tensor([s], device=device)}).float()[0] for s in seqs]
            joined = logits_fn(model, {"input_ids": torch.tensor([seqs[0] + seqs[1]], device=device)}).float()[0]
    finally:
        model.train(was_training)
    got = [packed[0, :6], packed[0, 6:11], packed[1, :4]]
    leak = float((joined[6:] - alone[1]).abs().max())
    worst = max(float((g - a).abs().max()) for g, a in zip(got, alone, strict=True))
    if worst <= max(1e-4, 0.02 * leak):
        return None
    return (f"with attention {getattr(model.config, '_attn_implementation', '?')}, packed examples see each other "
            f"(logits differ by {worst:.3g} from the examples alone)")
