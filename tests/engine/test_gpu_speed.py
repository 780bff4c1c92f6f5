"""The speed features on CUDA: bf16 by default, compile, fused AdamW, packing with SDPA, MFU.

Skipped without a GPU; on a GPU machine: ``pytest -m gpu`` (or scripts/gpu_check.sh). The fine-tunes run
Ember's Trainer in this process on the built-in tiny-llama, a few steps each.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def lm_spec(**overrides: Any) -> Any:
    from engine.api.train_spec import TrainSpec

    spec = {"task": "causal_lm", "device": "cuda", "method": {"kind": "full"}, "batch_size": 8, "max_steps": 12,
            "eval_every": 10**6, "checkpoint_every": 10**6, "optim": {"lr": 0.002}, "seed": 0,
            "data": {"num_workers": 0}}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return TrainSpec.model_validate(spec)


def train(spec: Any, run_dir: Path) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    """(the Trainer after its run, its events by kind)."""
    from engine.recipes.finetune import RankContext
    from engine.trainer.loop import Trainer
    from engine.training import dist

    events: dict[str, list[dict[str, Any]]] = {}
    run_dir.mkdir(parents=True, exist_ok=True)
    rc = RankContext(run_dir, dist.World(0, 0, 1, "cuda:0", "test"))
    real_emit = rc.emit

    def emit(kind: str, **data: Any) -> None:
        real_emit(kind, **data)
        events.setdefault(kind, []).append(data)

    rc.emit = emit  # type: ignore[method-assign]
    trainer = Trainer(spec, rc.world, rc, run_dir, save_model=False, checkpoints=False)
    assert trainer.run() == "succeeded", events.get("error")
    return trainer, events


def test_auto_precision_is_bf16_on_a_bf16_gpu(ember_home):
    import torch

    from engine.training import speed

    if torch.cuda.get_device_capability(0)[0] < 8:
        pytest.skip("this GPU has no native bf16 (compute capability below 8.0)")
    resolved, choices = speed.resolve(lm_spec(), "cuda:0")
    assert resolved.precision == "bf16" and choices["precision"] == "bf16"
    assert resolved.speed.compile == "on" and resolved.speed.optimizer_impl == "fused"


def test_compiled_fine_tune_agrees_with_eager(ember_home, tmp_path):
    runs = {}
    for mode in ("off", "on"):
        _, events = train(lm_spec(precision="fp32", speed={"compile": mode}), tmp_path / mode)
        assert events["run_info"][0]["speed"]["compile"] is (mode == "on")
        runs[mode] = [e["loss"] for e in events["train"]]
    assert len(runs["on"]) == len(runs["off"]) == 12
    for eager, compiled in zip(runs["off"], runs["on"], strict=True):
        assert math.isclose(eager, compiled, rel_tol=2e-3), (runs["off"], runs["on"])
    assert runs["on"][-1] < runs["on"][0]


def test_fused_adamw_on_cuda(ember_home, tmp_path):
    trainer, events = train(lm_spec(precision="bf16", speed={"optimizer_impl": "fused", "compile": "off"}), tmp_path)
    assert trainer.optimizer.defaults.get("fused") is True
    assert events["run_info"][0]["speed"]["optimizer_impl"] == "fused"
    losses = [e["loss"] for e in events["train"]]
    assert losses[-1] < losses[0]


def test_packed_batches_with_sdpa_give_the_unpacked_loss(ember_home):
    import torch

    from engine.tasks import causal_lm

    def loss_and_targets(spec: Any) -> tuple[float, int]:
        data = causal_lm.load_data(spec)
        total, targets = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(data.train), 8):
                batch = data.collate([data.train[i] for i in range(start, min(start + 8, len(data.train)))])
                batch = {k: (v.to("cuda") if hasattr(v, "to") else v) for k, v in batch.items()}
                loss, _stats = causal_lm.forward(model, batch)
                n = int((batch["labels"][:, 1:] != causal_lm.IGNORE).sum())
                total, targets = total + float(loss) * n, targets + n
        return total, targets

    common = {"precision": "fp32", "speed": {"attention": "sdpa"}}
    unpacked_spec = lm_spec(**common, data={"max_length": 256, "packing": False})
    packed_spec = lm_spec(**common, data={"max_length": 256, "packing": True})
    model = causal_lm.build_model(packed_spec, causal_lm.load_data(packed_spec)).to("cuda").eval()
    assert model.config._attn_implementation == "sdpa"
    unpacked, n_unpacked = loss_and_targets(unpacked_spec)
    packed, n_packed = loss_and_targets(packed_spec)
    assert n_packed == n_unpacked > 0
    assert math.isclose(packed / n_packed, unpacked / n_unpacked, rel_tol=1e-4), (packed, unpacked)


def test_mfu_is_reported_with_the_gpu_tables_peak(ember_home, tmp_path):
    import torch

    from engine.training import mfu

    _, events = train(lm_spec(precision="bf16", max_steps=15, speed={"compile": "off"}), tmp_path)
    info = events["run_info"][0]
    peak, _source = mfu.gpu_peak(torch.cuda.get_device_name(0), True)
    assert peak > 0 and info["peak_tflops"] == pytest.approx(peak) and info["peak_source"], info
    assert info["flops_per_token"] > 0
    later = events["train"][5:]
    assert all(0 < e["mfu"] < 1 for e in later), [e.get("mfu") for e in later]
    assert all(e["tflops"] == pytest.approx(e["mfu"] * peak, rel=1e-2) for e in later)
