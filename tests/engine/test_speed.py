"""The speed options: what "auto" resolves to, optimizer kernels, torch.compile, and the live MFU figures."""

import pytest

from engine.api.train_spec import TrainSpec
from engine.training import dist


class Recorder:
    """Stands in for the rank context: collects what rank 0 would write to events.jsonl."""

    stop_requested = False

    def __init__(self):
        self.events = []
        self.lines = []

    def emit(self, kind, **data):
        self.events.append({"kind": kind, **data})

    def log(self, message):
        self.lines.append(message)

    def of(self, kind):
        return [e for e in self.events if e["kind"] == kind]


def llm_spec(**overrides):
    spec = {"task": "causal_lm", "method": {"kind": "full"}, "batch_size": 4, "max_steps": 3, "eval_every": 100,
            "checkpoint_every": 100, "data": {"max_length": 64}, "optim": {"lr": 0.003}, "seed": 1}
    spec.update(overrides)
    return TrainSpec.model_validate(spec)


def run(spec, tmp_path, name):
    from engine.trainer.loop import Trainer

    rec = Recorder()
    trainer = Trainer(spec, dist.World(0, 0, 1, "cpu", "test"), rec, tmp_path / name)
    assert trainer.run() == "succeeded", rec.lines
    return rec, trainer


def test_auto_on_cpu_picks_fp32_no_compile_foreach_and_no_workers():
    from engine.training import speed

    spec, choices = speed.resolve(TrainSpec(), "cpu")
    assert (spec.precision, spec.speed.compile, spec.speed.optimizer_impl, spec.data.num_workers) == \
        ("fp32", "off", "foreach", 0)
    assert choices["compile"] is False and choices["pin_memory"] is False
    assert any("precision fp32" in n for n in choices["notes"]) and any("torch.compile off (CPU)" in n
                                                                       for n in choices["notes"])
    # The caller's spec is left as it was ("auto" stays in the run's spec.json)
    assert TrainSpec().precision == "auto"


def test_explicit_choices_are_kept():
    from engine.training import speed

    asked = TrainSpec.model_validate({"precision": "bf16", "speed": {"compile": "on", "optimizer_impl": "for_loop"},
                                      "data": {"num_workers": 2}})
    spec, choices = speed.resolve(asked, "cpu")
    assert (spec.precision, spec.speed.compile, spec.speed.optimizer_impl, spec.data.num_workers) == \
        ("bf16", "on", "for_loop", 2)
    assert choices["notes"] == [] and choices["prefetch_factor"] == 2


@pytest.mark.parametrize(("kind", "gpu", "expected"), [
    ("cuda", "NVIDIA H200", "bf16"), ("cuda", "NVIDIA A100-SXM4-80GB", "bf16"), ("cuda", "NVIDIA L4", "bf16"),
    ("cuda", "Tesla T4", "fp32"), ("cuda", "Tesla V100-SXM2-16GB", "fp32"), ("cpu", "", "fp32")])
def test_the_fit_estimate_assumes_what_auto_precision_will_pick(kind, gpu, expected):
    from engine.training import speed

    assert speed.estimated_precision(TrainSpec(), kind, gpu) == expected
    assert speed.estimated_precision(TrainSpec(precision="fp16"), kind, gpu) == "fp16"


def test_spec_refuses_options_that_do_not_apply():
    with pytest.raises(ValueError, match="data.packing applies to causal_lm"):
        TrainSpec.model_validate({"task": "text_classification", "data": {"packing": True}})
    with pytest.raises(ValueError, match="group_by_length applies to text tasks"):
        TrainSpec.model_validate({"task": "image_classification", "data": {"group_by_length": True}})
    with pytest.raises(ValueError, match="fused needs optim.optimizer adamw"):
        TrainSpec.model_validate({"speed": {"optimizer_impl": "fused"}, "optim": {"optimizer": "sgd"}})


def test_fused_foreach_and_for_loop_adamw_take_the_same_steps():
    import torch

    from engine.trainer.loop import make_optimizer

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    results = {}
    for impl in ("fused", "foreach", "for_loop"):
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        model.load_state_dict(base.state_dict())
        opt = make_optimizer(list(model.parameters()),
                             TrainSpec.model_validate({"speed": {"optimizer_impl": impl},
                                                       "optim": {"lr": 0.01, "weight_decay": 0.1}}))
        assert opt.defaults["fused"] is (True if impl == "fused" else None)
        for _ in range(5):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        results[impl] = torch.cat([p.detach().flatten() for p in model.parameters()])
    moved = (results["for_loop"] - torch.cat([p.detach().flatten() for p in base.parameters()])).abs().max()
    assert moved > 1e-3  # the steps did something
    torch.testing.assert_close(results["fused"], results["for_loop"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(results["foreach"], results["for_loop"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_compiled_and_eager_fine_tunes_agree(ember_home, tmp_path):
    """torch.compile (inductor, CPU) gives the eager losses and weights, under the same parameter names."""
    import torch
    from safetensors.torch import load_file

    # Packed rows keep the batch shape steady, so the compiler does not recompile per length.
    data = {"max_length": 64, "packing": True}
    eager, _ = run(llm_spec(speed={"compile": "off"}, data=data), tmp_path, "eager")
    compiled, trainer = run(llm_spec(speed={"compile": "on"}, data=data), tmp_path, "compiled")
    assert compiled.of("run_info")[0]["speed"]["compile"] is True
    assert hasattr(trainer.model, "_compiled_call_impl") and trainer.model._compiled_call_impl is not None
    a = [e["loss"] for e in eager.of("train")]
    b = [e["loss"] for e in compiled.of("train")]
    assert len(a) == len(b) == 3 and a[0] != a[-1]
    assert b == pytest.approx(a, rel=1e-4)
    wa = load_file(str(tmp_path / "eager" / "model" / "weights.safetensors"))
    wb = load_file(str(tmp_path / "compiled" / "model" / "weights.safetensors"))
    assert sorted(wa) == sorted(wb) and not any("_orig_mod" in k for k in wb)
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-3, atol=1e-5)


def test_a_run_reports_its_speed_choices_padding_and_mfu(ember_home, tmp_path):
    from engine.training import mfu

    mfu.forget_peaks()  # as a new job process: the CPU peak is looked up, and remembered in the data folder
    rec, _ = run(llm_spec(max_steps=2), tmp_path, "run")
    assert (ember_home.home / mfu.CPU_PEAKS_FILE).is_file()
    info = rec.of("run_info")[0]
    assert info["speed"]["precision"] == "fp32" and info["speed"]["compile"] is False
    assert info["speed"]["attention"] in ("sdpa", "eager")
    assert info["flops_per_token"] > 6 * 50_000  # 6N, N = the tiny Llama's matmul weights (about 0.16 M)
    assert info["peak_tflops"] > 0 and "measured" in info["peak_source"]
    for step in rec.of("train"):
        assert 0 < step["padding_frac"] < 1  # rows of different lengths padded to the longest
        assert step["tflops"] > 0
        assert 0 < step["mfu"] < 1
        assert step["mfu"] == pytest.approx(step["tflops"] / info["peak_tflops"])


def test_mfu_above_a_wrong_peak_is_reported_as_100_percent(ember_home, tmp_path):
    """A peak far too low (here a wrong speed.peak_tflops) shows MFU 1.0, never above; TFLOP/s stays the real rate."""
    rec, _ = run(llm_spec(max_steps=2, speed={"peak_tflops": 1e-9}), tmp_path, "run")
    steps = rec.of("train")
    assert steps and all(e["mfu"] == 1.0 and e["tflops"] > 1e-6 for e in steps), steps


def test_length_grouping_reaches_the_trainers_batches_and_cuts_padding(ember_home, tmp_path):
    """MiniLM on the built-in tickets: the same 6 steps with and without data.group_by_length."""
    base = {"task": "text_classification", "method": {"kind": "lora"}, "batch_size": 16, "max_steps": 6,
            "eval_every": 100, "checkpoint_every": 100, "data": {"max_length": 128}}
    plain, _ = run(TrainSpec.model_validate(base), tmp_path, "plain")
    grouped, trainer = run(TrainSpec.model_validate({**base, "data": {"max_length": 128, "group_by_length": True}}),
                           tmp_path, "grouped")
    assert trainer.order.lengths is not None and grouped.of("run_info")[0]["speed"]["group_by_length"] is True
    padding = {name: sum(e["padding_frac"] for e in rec.of("train")) / 6 for name, rec in
               (("plain", plain), ("grouped", grouped))}
    assert padding["grouped"] < 0.5 * padding["plain"], padding
