"""A diverging fine-tune stops and ends failed (reason "diverged", a diverged event), a normal one never trips
the rule, and events.jsonl holds only strict JSON (non-finite numbers as null)."""

from __future__ import annotations

import json
import math
import random

import pytest
import yaml

from engine.trainer.divergence import EVAL_FACTOR, LossWatch


def first_divergence(losses):
    """The step (1-based) at which LossWatch flags ``losses``, or None."""
    watch = LossWatch()
    for step, loss in enumerate(losses, start=1):
        found = watch.add(step, loss) if math.isfinite(loss) else watch.non_finite(step, skipping=False)
        if found is not None:
            return found
    return None


def test_a_normal_decreasing_loss_never_trips_the_rule():
    losses = [2.3 * math.exp(-step / 40) + 0.05 for step in range(400)]
    assert first_divergence(losses) is None


def test_a_noisy_loss_with_spikes_never_trips_the_rule():
    rng = random.Random(0)
    losses = [max(0.01, 0.7 - step / 1000 + rng.uniform(-0.6, 0.6)) for step in range(500)]
    losses[100] = 40.0  # one bad batch: the median of five ignores it
    losses[300:302] = [25.0, 30.0]
    assert first_divergence(losses) is None


def test_a_loss_starting_near_zero_tolerates_relative_noise():
    rng = random.Random(1)
    losses = [0.01 * rng.uniform(0.2, 30) for _ in range(300)]  # 0.002 .. 0.3: 150x apart, still tiny
    assert first_divergence(losses) is None
    assert first_divergence([0.01] * 5 + [0.01 * 1.5 ** n for n in range(30)]).loss > 3.0


def test_a_climbing_loss_is_flagged_once_its_median_passes_ten_times_the_start():
    # The run of the report: from 7 to over 4,000.
    losses = [7.0, 6.8, 6.9, 7.1, 6.7] + [7 * 1.5 ** n for n in range(1, 20)]
    found = first_divergence(losses)
    assert found is not None and found.start_loss == 6.7
    assert found.loss > 67 and found.step < len(losses)
    assert "diverged" in found.message and "6.7" in found.message


def test_a_loss_that_explodes_at_once_is_measured_against_the_first_step():
    found = first_divergence([0.69, 500.0, 3000.0, 2000.0, 4000.0, 3500.0])
    assert found is not None and found.step == 5 and found.start_loss == 0.69


def test_a_nan_loss_is_divergence_at_once_or_after_five_skipped_steps():
    found = first_divergence([1.0, 0.9, float("nan")])
    assert found.step == 3 and found.loss is None and found.message == "The loss became NaN or infinite at step 3"
    watch = LossWatch()
    assert [watch.non_finite(s, skipping=True) for s in range(1, 5)] == [None] * 4
    assert "5 steps in a row" in watch.non_finite(5, skipping=True).message
    watch.add(6, 1.0)  # a finite step in between starts the count again
    assert watch.non_finite(7, skipping=True) is None


def test_evaluations_diverge_on_non_finite_sums_or_a_huge_loss_but_not_on_nothing_to_score():
    watch = LossWatch()
    for step in range(1, 6):
        watch.add(step, 2.0)
    assert watch.check_eval(5, {"loss": float("nan"), "perplexity": float("nan")},
                            {"loss_sum": 0.0, "tokens": 0.0}) is None  # an empty validation set
    assert watch.check_eval(5, {"loss": 3.0, "accuracy": 0.5}, {"loss_sum": 30.0, "count": 10.0}) is None
    overflow = watch.check_eval(6, {"loss": 900.0, "perplexity": float("inf")}, {"loss_sum": 9e3, "tokens": 10.0})
    assert overflow is not None and "perplexity" in overflow.message and overflow.loss == 900.0
    nan = watch.check_eval(7, {"loss": float("nan"), "accuracy": 0.5}, {"loss_sum": float("nan"), "count": 4.0})
    assert nan is not None and nan.loss is None
    huge = watch.check_eval(8, {"loss": 2.4e5, "accuracy": 0.5}, {"loss_sum": 2.4e6, "count": 10.0})
    assert huge is not None and huge.loss == 2.4e5 and 2.4e5 > EVAL_FACTOR * 2.0


def test_events_are_strict_json_with_non_finite_numbers_as_null(tmp_path):
    from engine.training.context import JobContext

    ctx = JobContext(tmp_path)
    ctx.emit("eval", step=3, metrics={"loss": float("inf"), "perplexity": float("inf"), "accuracy": 0.5,
                                      "nested": [float("nan"), 1.0]})
    ctx.write_result({"metrics": {"perplexity": float("-inf")}})
    ctx.close()
    line = (tmp_path / "events.jsonl").read_text().splitlines()[0]
    assert "Infinity" not in line and "NaN" not in line
    event = json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name} in events.jsonl"))
    assert event["metrics"] == {"loss": None, "perplexity": None, "accuracy": 0.5, "nested": [None, 1.0]}
    assert json.loads((tmp_path / "result.json").read_text())["metrics"]["perplexity"] is None


def test_a_fine_tune_with_a_huge_learning_rate_ends_failed_as_diverged(ember_home, tmp_path):
    """The built-in text classifier at optim.lr 10: the recipe, in this process, as torchrun would run it."""
    import torch

    from engine.recipes import finetune

    spec = {"task": "text_classification", "method": {"kind": "full"}, "device": "cpu", "batch_size": 8,
            "max_steps": 12, "eval_every": 100, "checkpoint_every": 3, "log_every": 1, "memory_every": 100,
            "data": {"max_length": 16}, "optim": {"lr": 10.0, "schedule": "constant"}}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "spec.yaml").write_text(yaml.safe_dump({"kind": "train.finetune", "spec": spec}))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two shared cores: one busy thread is faster than two fighting
    try:
        assert finetune.main(["--run-dir", str(run_dir)]) == 1
    finally:
        torch.set_num_threads(threads)
    text = (run_dir / "events.jsonl").read_text()
    events = [json.loads(line) for line in text.splitlines()]
    diverged = [e for e in events if e["kind"] == "diverged"]
    assert len(diverged) == 1, [e for e in events if e["kind"] in ("train", "error")]
    d = diverged[0]
    assert d["step"] < 12 and d["loss"] > 10 * d["start_loss"]
    assert "diverged" in d["message"] and "optim.lr" in d["hint"] and "optim.grad_clip" in d["hint"]
    status = events[-1]
    assert status["kind"] == "status" and status["state"] == "failed" and status["reason"] == "diverged"
    assert status["message"] == d["message"]
    assert not (run_dir / "model").exists()  # no final model of a diverged state
    checkpoints = [e["step"] for e in events if e["kind"] == "checkpoint"]
    assert all(step < d["step"] for step in checkpoints)
    if checkpoints:
        assert d["checkpoint"].endswith(f"{checkpoints[-1]:08d}") and "is kept" in d["hint"]
