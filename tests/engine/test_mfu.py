"""MFU: the FLOPs formula against a hand count and against what torch really computes, the GPU peak
table, the CPU peak measurement and the MFU arithmetic (engine/training/mfu.py)."""

from __future__ import annotations

import pytest

from engine.tasks.causal_lm import forward as causal_forward
from engine.training import mfu

# A tiny Llama: 3 layers, width 64, 4 query heads of 16, MLP 160, vocabulary 128.
TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
        "num_attention_heads": 4, "max_position_embeddings": 64, "attn_implementation": "eager"}
BATCH, SEQ = 2, 16


def llama(**overrides):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**TINY, **overrides}))


def token_batch(vocab: int = 128) -> dict:
    import torch

    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def counted_training_flops(model, batch: dict) -> int:
    """FLOPs torch really runs for one training step: forward (with the loss) and backward."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        model(input_ids=batch["input_ids"], labels=batch["labels"]).loss.backward()
    return counter.get_total_flops()


# ---------------------------------------------------------------- (1) the formula by hand


def test_formula_matches_a_hand_counted_tiny_llama_with_and_without_grouped_query_attention():
    h, ffn, layers, vocab, seq = 64, 160, 3, 128, SEQ
    # Multi-head attention: q, k, v, o are each h x h; the MLP's gate, up, down are h x ffn.
    per_layer = 4 * h * h + 3 * h * ffn  # 16,384 + 30,720 = 47,104
    n = layers * per_layer + h * vocab  # 141,312 + lm_head 8,192 = 149,504
    assert n == 149_504
    attention = 12 * layers * h * seq  # QK^T and AV: 2 x 2 x seq x 64 forward per layer, x 3 for training = 36,864
    assert mfu.transformer_flops_per_token(matmul_params=n, trainable_matmul_params=n, n_layers=layers,
                                           attn_width=h, seq_len=seq) == 6 * 149_504 + 36_864 == 933_888
    # LoRA: frozen weights get no weight gradients, so 4N plus twice the (small) trainable count.
    assert mfu.transformer_flops_per_token(matmul_params=n, trainable_matmul_params=1_000, n_layers=layers,
                                           attn_width=h, seq_len=seq) == 4 * 149_504 + 2_000 + 36_864

    # The same counts read from real modules: flop_model must find every matmul and nothing else.
    fm = mfu.flop_model(llama(num_key_value_heads=4), "causal_lm", token_batch(), causal_forward)
    assert fm.per_token(seq) == 933_888
    assert fm.per_sample() == 933_888 * seq  # one row of the sample batch's width
    assert "analytic" in fm.basis

    # Grouped-query attention, 2 key/value heads: k and v shrink to h x 32; the scores still span all 4 query heads.
    per_layer_gqa = 2 * h * h + 2 * h * 32 + 3 * h * ffn  # 8,192 + 4,096 + 30,720 = 43,008
    n_gqa = layers * per_layer_gqa + h * vocab  # 129,024 + 8,192 = 137,216
    fm = mfu.flop_model(llama(num_key_value_heads=2), "causal_lm", token_batch(), causal_forward)
    assert fm.per_token(seq) == 6 * n_gqa + attention == 860_160
    assert fm.per_token(2 * seq) == 6 * n_gqa + 2 * attention  # attention grows with the sequence, the rest does not

    # Tied embeddings: the input lookup is no matmul, but the LM head still multiplies by the same matrix.
    fm_tied = mfu.flop_model(llama(num_key_value_heads=2, tie_word_embeddings=True), "causal_lm", token_batch(), causal_forward)
    assert fm_tied.per_token(seq) == 860_160


# ---------------------------------------------------------------- (2) the formula against torch


def test_full_fine_tune_formula_equals_the_flops_torch_counts_over_forward_and_backward():
    # head_dim 24 makes the attention width (96) differ from the hidden size (64): the formula must use the former.
    model = llama(num_key_value_heads=2, head_dim=24)
    batch = token_batch()
    fm = mfu.flop_model(model, "causal_lm", batch, causal_forward)
    real = counted_training_flops(model, batch)
    predicted = fm.per_token(SEQ) * BATCH * SEQ
    assert real == pytest.approx(predicted, rel=0.03), (real, predicted)


def test_lora_formula_is_near_4n_plus_2n_trainable_and_the_gap_is_the_first_layers_frozen_inputs():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(llama(num_key_value_heads=2), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    batch = token_batch()
    fm = mfu.flop_model(model, "causal_lm", batch, causal_forward)
    h, r, tokens = 64, 4, BATCH * SEQ
    n = 137_216 + 3 * (h * r + r * h + h * r + r * 32)  # base weights + LoRA A/B of q (64->4->64) and v (64->4->32)
    trainable = 3 * (h * r + r * h + h * r + r * 32)  # 3 x 896 = 2,688
    assert fm.per_token(SEQ) == 4 * n + 2 * trainable + 12 * 3 * h * SEQ
    real = counted_training_flops(model, batch)
    predicted = fm.per_token(SEQ) * tokens
    assert real == pytest.approx(predicted, rel=0.05), (real, predicted)
    # What the formula counts and torch skips: layer 0 reads the frozen embeddings, so its q, k, v projections
    # and its LoRA A matrices need no input gradient, and neither does its key (k_proj has no LoRA).
    no_input_grad = 2 * tokens * (h * h + h * 32 + h * 32 + 2 * h * r)
    key_grad = 2 * BATCH * 4 * SEQ * SEQ * 16  # the QK^T gradient towards K: batch x heads x seq x seq x head_dim
    assert predicted - real == no_input_grad + key_grad


def test_wrappers_are_looked_through_and_the_analytic_path_runs_no_forward():
    import torch

    model = llama()
    plain = mfu.flop_model(model, "causal_lm", token_batch(), causal_forward)
    compiled = torch.compile(model)  # compiles lazily, on the first call; flop_model must not make that call
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    assert mfu.unwrap(compiled) is model
    assert mfu.flop_model(compiled, "causal_lm", token_batch(), causal_forward).per_token(SEQ) == plain.per_token(SEQ)
    assert calls == []


# ---------------------------------------------------------------- (3) models that are not transformers


def small_cnn():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Dropout(0.1), nn.Linear(16, 5))


def image_batch(n: int = 4) -> dict:
    import torch

    gen = torch.Generator().manual_seed(2)
    return {"pixel_values": torch.rand(n, 3, 16, 16, generator=gen), "labels": torch.randint(0, 5, (n,), generator=gen)}


def test_cnn_full_fine_tune_is_three_forwards_and_the_run_state_is_untouched():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model, batch = small_cnn(), image_batch()
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        model(batch["pixel_values"])
    # By hand: conv1 2 x 16x16 x 8 x 27, conv2 2 x 8x8 x 16 x 72, linear 2 x 16 x 5, per image.
    per_image = 2 * 256 * 8 * 27 + 2 * 64 * 16 * 72 + 2 * 16 * 5
    assert forward.get_total_flops() == 4 * per_image
    model.train()
    stats = model[1].running_mean.clone()
    rng = torch.get_rng_state()
    from engine.tasks import image_classification

    fm = mfu.flop_model(model, "image_classification", batch, image_classification.forward)
    assert fm.per_sample() == 3 * per_image
    assert fm.per_token(16) is None  # images have no tokens
    assert "counted" in fm.basis
    # The count ran in eval mode: batch norm statistics, train flags and the random stream are as they were.
    assert torch.equal(model[1].running_mean, stats) and model.training and model[8].training
    assert torch.equal(torch.get_rng_state(), rng)
    # Against a real training step: the backward skips only conv1's input gradient (the images need none).
    with FlopCounterMode(display=False) as step:
        torch.nn.functional.cross_entropy(model(batch["pixel_values"]), batch["labels"]).backward()
    assert step.get_total_flops() == 4 * (3 * per_image - 2 * 256 * 8 * 27)


def test_frozen_backbone_adds_weight_gradients_only_for_the_layers_that_train():
    model, batch = small_cnn(), image_batch()
    for p in model.parameters():
        p.requires_grad_(False)
    model[9].weight.requires_grad_(True)
    per_image = 2 * 256 * 8 * 27 + 2 * 64 * 16 * 72 + 2 * 16 * 5
    from engine.tasks import image_classification

    fm = mfu.flop_model(model, "image_classification", batch, image_classification.forward)
    assert fm.per_sample() == pytest.approx(2 * per_image + 2 * 16 * 5)


def test_custom_text_model_is_counted_per_position():
    import types

    import torch
    from torch import nn

    class BagOfWords(nn.Module):  # no transformers config: the counted path, with tokens
        def __init__(self):
            super().__init__()
            self.embed, self.mix, self.out = nn.Embedding(128, 32), nn.Linear(32, 32), nn.Linear(32, 3)

        def forward(self, input_ids, attention_mask):
            return types.SimpleNamespace(logits=self.out(self.mix(self.embed(input_ids)).mean(1)))

    batch = token_batch()
    batch["labels"] = torch.zeros(BATCH, dtype=torch.long)
    from engine.tasks import text_classification

    fm = mfu.flop_model(BagOfWords(), "text_classification", batch, text_classification.forward)
    forward = BATCH * SEQ * 2 * 32 * 32 + BATCH * 2 * 32 * 3  # mix on every position, out once per row
    assert fm.per_sample() == 3 * forward / BATCH
    assert fm.per_token(SEQ) == fm.per_token(4 * SEQ) == 3 * forward / (BATCH * SEQ)


# ---------------------------------------------------------------- (4) the GPU table


@pytest.mark.parametrize(("name", "half", "peak", "row"), [
    ("NVIDIA H200", True, 989.0, "H200"),
    ("NVIDIA H200 NVL", True, 835.0, "H200 NVL"),
    ("NVIDIA GH200 480GB", True, 989.0, "H200"),
    ("NVIDIA H100 80GB HBM3", True, 989.0, "H100"),
    ("NVIDIA H100 80GB HBM3", False, 67.0, "H100"),
    ("NVIDIA H100 PCIe", True, 756.0, "H100 PCIe"),
    ("NVIDIA H100 NVL", True, 835.0, "H100 NVL"),
    ("NVIDIA A100-SXM4-80GB", True, 312.0, "A100"),
    ("NVIDIA A100-SXM4-80GB", False, 19.5, "A100"),
    ("NVIDIA A10", True, 125.0, "A10"),
    ("NVIDIA L4", True, 121.0, "L4"),
    ("NVIDIA L40S", True, 362.0, "L40S"),
    ("NVIDIA L40", True, 181.0, "L40"),
    ("NVIDIA GeForce RTX 4090", True, 165.0, "RTX 4090"),
    ("Tesla T4", True, 65.0, "T4"),
    ("Orin (nvgpu)", True, 42.5, "Orin"),
    ("Orin (NVIDIA Jetson AGX Orin Developer Kit)", True, 42.5, "AGX Orin"),
    ("Orin (NVIDIA Jetson Orin NX Engineering Reference Developer Kit)", True, 15.0, "Orin NX"),
    ("Orin (NVIDIA Jetson Orin Nano Developer Kit)", True, 10.2, "Orin Nano"),
    ("Some Future GPU", True, mfu.GPU_DEFAULT[0], "unknown GPU"),
])
def test_gpu_peak_table(name, half, peak, row):
    assert mfu.gpu_peak(name, half) == (peak, row)


def test_the_estimator_reads_the_same_table():
    from engine.estimate import throughput

    assert throughput.gpu_peak is mfu.gpu_peak and throughput.GPU_PEAK_TFLOPS is mfu.GPU_PEAKS


# ---------------------------------------------------------------- (5) device peaks


@pytest.fixture
def fresh_peaks(ember_home, monkeypatch):
    """No peak known yet: a private data folder and an empty per-process memory."""
    monkeypatch.setattr(mfu, "_PEAKS", {})
    return ember_home.home / mfu.CPU_PEAKS_FILE


def test_cpu_peak_is_measured_and_the_override_wins(fresh_peaks):
    import torch

    rng = torch.get_rng_state()
    peak, source = mfu.device_peak("cpu", "fp32", None)
    assert peak is not None and 0 < peak < 1000  # TFLOP/s: a real CPU is far below a petaflop
    assert "measured fp32" in source and "matmul" in source and f"best of {mfu.CPU_PEAK_ROUNDS} rounds" in source
    assert torch.equal(torch.get_rng_state(), rng)  # the measurement leaves a seeded run's random stream alone
    assert mfu.device_peak("cpu", "fp32", None) == (peak, source)  # once per process
    assert mfu.device_peak("cpu", "fp32", 2.5) == (2.5, "speed.peak_tflops in the spec (2.5 TFLOP/s per device)")
    assert mfu.device_peak("cuda:0", "bf16", 400.0)[0] == 400.0  # no GPU needed: the override is taken as given
    assert mfu.device_peak("mps", "fp32", None)[0] is None


def test_measure_cpu_peak_runs_in_about_the_time_asked():
    import time

    t0 = time.perf_counter()
    assert mfu.measure_cpu_peak("fp32", seconds=0.05) > 0
    assert time.perf_counter() - t0 < 5


def test_cpu_peak_is_the_best_of_several_rounds(monkeypatch):
    """A busy machine slows some rounds: the fastest one is the peak, wherever it falls."""
    rates = iter([2.0e11, 5.0e11, 1.0e11, 4.0e11, 3.0e11])
    asked: list[float] = []

    def one_round(a, b, out, seconds):
        asked.append(seconds)
        return next(rates)

    monkeypatch.setattr(mfu, "_matmul_round", one_round)
    assert mfu.measure_cpu_peak("fp32", seconds=0.5, rounds=5) == pytest.approx(0.5)
    assert asked == pytest.approx([0.1] * 5)  # the time asked is shared between the rounds


def test_cpu_peak_is_remembered_in_the_data_folder_and_only_a_better_one_replaces_it(fresh_peaks, monkeypatch):
    import json

    calls: list[tuple[str, float, int]] = []
    rates = {"first": 0.2, "quick": 0.15}

    def measure(dtype="fp32", seconds=0.3, rounds=mfu.CPU_PEAK_ROUNDS):
        calls.append((dtype, seconds, rounds))
        return rates["first"] if len(calls) == 1 else rates["quick"]

    monkeypatch.setattr(mfu, "measure_cpu_peak", measure)
    assert mfu.cpu_peak("fp32", 2) == (0.2, False)  # first time on this machine: the full measurement
    assert calls == [("fp32", 0.3, mfu.CPU_PEAK_ROUNDS)]
    key = mfu.cpu_peak_key("fp32", 2)
    assert key.endswith("| 2 threads | fp32") and mfu.cpu_name() in key
    assert json.loads(fresh_peaks.read_text())[key]["tflops"] == 0.2

    # Later runs: the remembered figure and one short check; a slower check (a busy moment) changes nothing.
    assert mfu.cpu_peak("fp32", 2) == (0.2, True)
    assert calls[1] == ("fp32", mfu.QUICK_CHECK_S, 1)
    assert json.loads(fresh_peaks.read_text())[key]["tflops"] == 0.2
    # A faster check replaces it: the peak first measured on a busy machine rises to the true one.
    rates["quick"] = 0.3
    assert mfu.cpu_peak("fp32", 2) == (0.3, True)
    assert json.loads(fresh_peaks.read_text())[key]["tflops"] == 0.3
    # Another thread count or dtype is another peak, measured in full.
    assert mfu.cpu_peak("fp32", 1) == (0.3, False) and calls[-1][1:] == (0.3, mfu.CPU_PEAK_ROUNDS)
    assert set(json.loads(fresh_peaks.read_text())) == {key, mfu.cpu_peak_key("fp32", 1)}


def test_a_new_process_reads_the_remembered_peak(fresh_peaks, monkeypatch):
    """device_peak in a later run: the data folder's figure, not a new full measurement that might read low."""
    import torch

    mfu.remember_cpu_peak(mfu.cpu_peak_key("fp32", torch.get_num_threads()), 123.0)
    peak, source = mfu.device_peak("cpu", "fp32", None)
    assert peak == 123.0 and "the best measured on this machine" in source


def test_an_unreadable_or_unwritable_peaks_file_costs_the_memory_not_the_run(fresh_peaks, monkeypatch):
    fresh_peaks.parent.mkdir(parents=True, exist_ok=True)
    fresh_peaks.write_text("{not json")
    assert mfu.remembered_cpu_peaks() == {}
    assert mfu.remember_cpu_peak("k", 0.5) == 0.5
    assert mfu.remembered_cpu_peaks()["k"]["tflops"] == 0.5
    monkeypatch.setattr(mfu.tempfile, "mkstemp", lambda **kw: (_ for _ in ()).throw(PermissionError("read-only")))
    assert mfu.remember_cpu_peak("k", 0.9) == 0.9  # not written, still used for this run
    assert mfu.remembered_cpu_peaks()["k"]["tflops"] == 0.5


@pytest.mark.gpu
def test_cuda_peak_comes_from_the_table_and_the_formula_holds_on_the_gpu():
    peak, source = mfu.device_peak("cuda", "bf16", None)
    assert peak is None or peak > 10, source
    model = llama(num_key_value_heads=2).cuda()
    batch = {k: v.cuda() for k, v in token_batch().items()}
    fm = mfu.flop_model(model, "causal_lm", batch, causal_forward)
    assert counted_training_flops(model, batch) == pytest.approx(fm.per_token(SEQ) * BATCH * SEQ, rel=0.03)


# ---------------------------------------------------------------- (6) the arithmetic


def test_mfu_is_achieved_over_peak():
    assert mfu.mfu(494.5e12, 989.0) == pytest.approx(0.5)
    assert mfu.mfu(30e9, 0.1) == pytest.approx(0.3)
    assert mfu.mfu(1e12, None) is None and mfu.mfu(1e12, 0.0) is None


def test_mfu_is_never_above_one():
    """A peak that reads low (a busy CPU, a wrong speed.peak_tflops) shows 100%, never 113%."""
    assert mfu.mfu(1.13e12, 1.0) == 1.0
    assert mfu.mfu(0.99e12, 1.0) == pytest.approx(0.99)
