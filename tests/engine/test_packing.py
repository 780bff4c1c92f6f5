"""Sequence packing for causal LM: same loss and logits as unpacked, boundaries kept, every token kept."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from engine.api.train_spec import TrainSpec
from engine.tasks import causal_lm as lm
from engine.tasks import packing

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lm.make_tiny_model_folder(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def load(folder: Path, attention: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32,
                                                 attn_implementation=attention)
    model.config.use_cache = False
    return model.eval()


def examples(n: int, seed: int = 0, vocab: int = 900) -> list[dict[str, list[int]]]:
    """Token rows of varied length; labels -100 on a prompt part, like encode() makes them."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(3, 40)
        ids = [rng.randrange(3, vocab) for _ in range(length)]
        prompt = rng.randint(1, length - 1)
        out.append({"input_ids": ids, "labels": [lm.IGNORE] * prompt + ids[prompt:]})
    return out


# ---------------------------------------------------------------- best-fit decreasing


def test_best_fit_never_overflows_keeps_every_example_and_is_deterministic():
    rng = random.Random(1)
    lengths = [rng.randint(1, 128) for _ in range(500)]
    bins = packing.best_fit_decreasing(lengths, 128)
    assert sorted(i for b in bins for i in b) == list(range(500))
    assert all(sum(lengths[i] for i in b) <= 128 for b in bins)
    assert len(bins) < 0.62 * len(lengths)  # about two examples a row at mean length ~64
    lower = -(-sum(lengths) // 128)
    assert len(bins) <= lower * 1.05 + 1  # best-fit decreasing is close to the least possible
    assert packing.best_fit_decreasing(lengths, 128) == bins
    assert packing.best_fit_decreasing([5, 3, 4, 2], 7) == [[0, 3], [2, 1]]  # 5+2, 4+3
    with pytest.raises(ValueError, match="does not fit"):
        packing.best_fit_decreasing([9], 8)


def test_packed_rows_keep_every_token_and_mask_each_first_label():
    rows = examples(60)
    packed, info = packing.pack(rows, 64, batch_size=4)
    seen = []
    for r in range(len(packed)):
        row = packed[r]
        assert len(row["input_ids"]) <= 64 and sum(row["seq_lens"]) == len(row["input_ids"])
        start = 0
        for j, n in zip(packed.bins[r], row["seq_lens"], strict=True):
            assert row["input_ids"][start:start + n] == rows[j]["input_ids"]
            assert row["labels"][start] == lm.IGNORE  # the previous example's last token predicts nothing
            assert row["labels"][start + 1:start + n] == rows[j]["labels"][1:]
            start += n
            seen.append(j)
    assert sorted(seen) == list(range(60))
    assert info["packed_rows"] == len(packed) < 60
    assert info["examples_per_row"] == round(60 / len(packed), 3)
    assert info["padding_frac_packed"] < info["padding_frac_unpacked"]


def test_collator_positions_restart_per_example_and_padding_is_ignored():
    rows = [packing.pack_row([{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}, {"input_ids": [8, 9], "labels": [-100, 9]}]),
            packing.pack_row([{"input_ids": [4], "labels": [4]}])]
    batch = packing.PackedCollator(pad_id=0)(rows)
    assert "attention_mask" not in batch  # a 2D mask would make transformers ignore the packing
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0, 0, 0], [4, 0, 0, 0, 0, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2], [0, 0, 1, 2, 3, 4, 5, 6]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, 9, -100, -100, -100], [-100] + [-100] * 7]
    assert batch["row_tokens"].tolist() == [5, 1] and batch["row_examples"].tolist() == [2, 1]
    plain = packing.PackedCollator(0, plain=lm.Collator(0))([{"input_ids": [5, 6], "labels": [5, 6]}])
    assert plain["attention_mask"].tolist() == [[1, 1, 0, 0, 0, 0, 0, 0]]  # plain rows collate unpacked


# ---------------------------------------------------------------- packed == unpacked


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_loss_and_logits_equal_unpacked(tiny: Path, attention: str):
    torch.manual_seed(0)
    model = load(tiny, attention)
    rows = examples(12, seed=3)
    packed, _ = packing.pack(rows, 64, batch_size=4)
    assert len(packed) < len(rows)
    pbatch = packing.PackedCollator(0)([packed[i] for i in range(len(packed))])
    ubatch = lm.Collator(0)(rows)
    with torch.no_grad():
        p_loss, p_stats = lm.forward(model, pbatch)
        u_loss, u_stats = lm.forward(model, ubatch)
        p_logits = lm.logits(model, pbatch)
        u_logits = lm.logits(model, ubatch)
    assert abs(float(p_loss) - float(u_loss)) <= 1e-5 * abs(float(u_loss))
    assert p_stats["target_tokens"] == u_stats["target_tokens"] > 0
    assert p_stats["samples"] == u_stats["samples"] == 12
    assert p_stats["tokens"] == u_stats["tokens"] == sum(len(r["input_ids"]) for r in rows)
    assert p_stats["positions"] == pbatch["input_ids"].numel() < u_stats["positions"] == ubatch["input_ids"].numel()
    for r in range(len(packed)):
        start = 0
        for j, n in zip(packed.bins[r], packed[r]["seq_lens"], strict=True):
            torch.testing.assert_close(p_logits[r, start:start + n], u_logits[j, :n], rtol=1e-5, atol=1e-5)
            start += n
    # the boundaries matter: the same rows without position_ids let examples see each other
    with torch.no_grad():
        mixed = model(input_ids=pbatch["input_ids"], use_cache=False).logits
    second = packed[0]["seq_lens"][0]
    assert (mixed[0, second:second + 3] - p_logits[0, second:second + 3]).abs().max() > 1e-3


def test_packed_gradients_equal_unpacked(tiny: Path):
    rows = examples(8, seed=5)
    packed, _ = packing.pack(rows, 64, batch_size=4)
    grads = []
    for batch in (packing.PackedCollator(0)([packed[i] for i in range(len(packed))]), lm.Collator(0)(rows)):
        model = load(tiny, "sdpa")
        loss, _ = lm.forward(model, batch)
        loss.backward()
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_check_boundaries_passes_for_llama_and_catches_a_leak(tiny: Path):
    model = load(tiny, "sdpa")
    assert packing.check_boundaries(model, lm.logits) is None

    def leaky(model, batch):  # a model path that drops the packing information
        return model(input_ids=batch["input_ids"], use_cache=False).logits

    assert "see each other" in packing.check_boundaries(model, leaky)

    def cached(model, batch):  # with a KV cache transformers does not read packed position ids
        kwargs = {"position_ids": batch["position_ids"]} if "position_ids" in batch else {}
        return model(input_ids=batch["input_ids"], use_cache=True, **kwargs).logits

    assert packing.check_boundaries(model, cached) is not None


# ---------------------------------------------------------------- the task, end to end


def test_load_data_packs_builtin_data_and_the_packed_forward_runs(home: Path):
    spec = TrainSpec(task="causal_lm", data={"packing": True, "max_length": 256}, batch_size=4,
                     method={"kind": "lora"}, speed={"attention": "sdpa"})
    data = lm.load_data(spec)
    plain = lm.load_data(TrainSpec(task="causal_lm", data={"max_length": 256}, batch_size=4))
    info = data.info
    assert info["packing"] is True and len(data.train) == info["packed_rows"] < len(plain.train) == 205
    assert info["examples_per_row"] > 1.5
    assert info["padding_frac_packed"] < info["padding_frac_unpacked"]
    assert sum(len(data.train[i]["seq_lens"]) for i in range(len(data.train))) == 205
    assert len(data.val) == len(plain.val) == 40 and isinstance(data.val_collate, lm.Collator)
    assert data.lengths is None
    model = lm.build_model(spec, data)
    assert model.config._attn_implementation == "sdpa"
    from engine.training import methods

    model = methods.apply(model, spec, lm)  # LoRA (peft) must pass position_ids through
    batch = data.collate([data.train[i] for i in range(4)])
    loss, stats = lm.forward(model, batch)
    loss.backward()
    assert torch.isfinite(loss) and stats["samples"] > 4 and stats["tokens"] <= stats["positions"]
    assert 1 - stats["tokens"] / stats["positions"] < 0.1
    sums = lm.eval_sums(model, data.val_collate([data.val[i] for i in range(4)]))
    assert sums["tokens"] > 0 and sums["loss_sum"] > 0
    # packed and unpacked batches of the same examples give the same loss through the LoRA model
    idx = data.train.bins[0] + data.train.bins[1]
    with torch.no_grad():
        p, _ = lm.forward(model, data.collate([data.train[0], data.train[1]]))
        u, _ = lm.forward(model, plain.collate([data.train.examples[j] for j in idx]))
    assert abs(float(p) - float(u)) <= 1e-5 * float(u)


def test_grouped_lengths_and_refusals(home: Path):
    grouped = lm.load_data(TrainSpec(task="causal_lm", data={"group_by_length": True}))
    assert grouped.lengths == [len(r["input_ids"]) for r in grouped.train.rows]
    both = lm.load_data(TrainSpec(task="causal_lm", data={"group_by_length": True, "packing": True}))
    assert both.lengths == [both.train.row_length(i) for i in range(len(both.train))]
    issues = lm.validate(TrainSpec(task="causal_lm", data={"packing": True}, method={"kind": "prompt_tuning"}))
    assert any("prompt_tuning" in i.message for i in issues)


def fake_varlen(module, query, key, value, attention_mask, scaling=None, dropout=0.0, cu_seq_lens_q=None, **kwargs):
    """A stand-in for flash attention's varlen kernel (no flash-attn without a CUDA GPU): causal
    attention within each [cu[i], cu[i+1]) span of the flattened batch, the contract flash_attn_varlen_func has."""
    b, h, t, d = query.shape
    q, k, v = (x.transpose(1, 2).reshape(b * t, x.shape[1], d) for x in (query, key, value))
    k, v = (x.repeat_interleave(h // x.shape[1], 1) for x in (k, v))
    cu = cu_seq_lens_q.tolist() if cu_seq_lens_q is not None else list(range(0, b * t + 1, t))
    out = torch.empty_like(q)
    for a, z in zip(cu[:-1], cu[1:], strict=True):
        out[a:z] = torch.nn.functional.scaled_dot_product_attention(
            q[a:z].transpose(0, 1), k[a:z].transpose(0, 1), v[a:z].transpose(0, 1), is_causal=True,
            scale=scaling).transpose(0, 1)
    return out.reshape(b, t, h, d), None


def test_varlen_kernels_get_the_sequence_lengths_of_the_whole_batch(tiny: Path, monkeypatch: pytest.MonkeyPatch):
    """Flash attention infers packing from position ids only for a one-row batch; model_kwargs hands it
    cu_seq_lens for every row. Checked with a CPU stand-in for the kernel (named as fake)."""
    from transformers import AttentionInterface

    AttentionInterface.register("fake_varlen", fake_varlen)
    monkeypatch.setattr(packing, "VARLEN_KERNELS", ("flash", "fake_varlen"))
    model, ref = load(tiny, "fake_varlen"), load(tiny, "sdpa")
    rows = examples(10, seed=8)
    packed, _ = packing.pack(rows, 64, batch_size=4)
    batch = packing.PackedCollator(0)([packed[i] for i in range(len(packed))])
    kwargs = packing.model_kwargs(model, batch)
    cu = kwargs["cu_seq_lens_q"].tolist()
    width = batch["input_ids"].shape[1]
    assert cu[0] == 0 and cu[-1] == batch["input_ids"].numel() and kwargs["max_length_q"] <= width
    assert width in cu  # the second row starts a new sequence
    with torch.no_grad():
        loss, _ = lm.forward(model, batch)
        expected, _ = lm.forward(ref, lm.Collator(0)(rows))
    assert abs(float(loss) - float(expected)) <= 1e-5 * float(expected)
    assert packing.check_boundaries(model, lm.logits) is None
    monkeypatch.setattr(packing, "VARLEN_KERNELS", ("flash",))  # without the lengths, rows run as one sequence
    assert packing.check_boundaries(model, lm.logits) is not None


def test_build_model_takes_the_attention_from_the_spec(home: Path):
    spec = TrainSpec(task="causal_lm", speed={"attention": "eager"})
    data = lm.load_data(spec)
    assert lm.build_model(spec, data).config._attn_implementation == "eager"
    try:
        import flash_attn  # noqa: F401
    except ImportError:  # without the package: an error that says which setting to change
        spec = TrainSpec(task="causal_lm", speed={"attention": "flash_attention_2"})
        with pytest.raises(lm.InputError) as err:
            lm.build_model(spec, data)
        assert "speed.attention flash_attention_2" in str(err.value) and err.value.hint == "set speed.attention to auto"
