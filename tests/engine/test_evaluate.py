"""engine/evaluate: runners, metrics, interleaved latency, model facts, peak memory and evaluate_pair.

Real models throughout: the digits CNN and the built-in MiniLM classifier (max_length 32),
exported to ONNX here with torch.onnx.export and run in real ONNX Runtime sessions.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.api.train_spec import TrainSpec
from engine.evaluate import latency, metrics
from engine.evaluate.facts import file_bytes, torch_facts
from engine.evaluate.pair import Candidate, EvalSettings, evaluate_pair, write
from engine.evaluate.peak_memory import peak_memory, save_module
from engine.evaluate.runners import TASK_INPUTS, OrtRunner, TorchRunner, resolve_threads
from engine.tasks import get_task
from engine.training.context import JobFailed

SPECS = {
    "image_classification": {"task": "image_classification", "method": {"kind": "full"}, "device": "cpu"},
    "text_classification": {"task": "text_classification", "method": {"kind": "full"}, "data": {"max_length": 32},
                            "device": "cpu"},
}


def export(model, task_name: str, batch: dict, path) -> str:
    """The model as ONNX (legacy TorchScript exporter: torch.export cannot trace MiniLM's masking here)."""
    import torch

    names = [k for k in TASK_INPUTS[task_name] if k in batch]

    class Wrap(torch.nn.Module):
        """Positional inputs in, logits out: what the exporter traces."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            if task_name == "image_classification":
                return self.model(args[0])
            return self.model(**dict(zip(names, args, strict=True))).logits

    wrapper = Wrap().eval()  # a wrapper left in train mode would leave the model in train mode after export
    axes = {k: ({0: "batch"} if k == "pixel_values" else {0: "batch", 1: "seq"}) for k in names}
    torch.onnx.export(wrapper, tuple(batch[k] for k in names), str(path), input_names=names, output_names=["logits"],
                      dynamic_axes={**axes, "logits": {0: "batch"}}, opset_version=17, dynamo=False)
    model.eval()
    return str(path)


class Built:
    def __init__(self, task_name: str, tmp):
        import torch

        torch.manual_seed(0)
        spec = TrainSpec.model_validate(SPECS[task_name])
        task = get_task(spec.task)
        self.task_name = task_name
        self.data = task.load_data(spec)
        self.model = task.build_model(spec, self.data).eval()
        self.batch = self.data.collate([self.data.val[i] for i in range(8)])
        self.onnx = export(self.model, task_name, self.batch, tmp / f"{task_name}.onnx")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> Built:
    return Built("image_classification", tmp_path_factory.mktemp("cnn"))


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Built:
    return Built("text_classification", tmp_path_factory.mktemp("minilm"))


# ---------------------------------------------------------------- runners


@pytest.mark.parametrize("which", ["cnn", "minilm"])
def test_torch_and_ort_runners_give_the_same_logits(which, request):
    built: Built = request.getfixturevalue(which)
    t = TorchRunner(built.model, built.task_name, threads=1, label="parent")
    o = OrtRunner(built.onnx, built.task_name, threads=1)
    assert (t.runtime, o.runtime, t.label, t.threads, o.threads) == ("torch-eager", "onnxruntime-cpu", "parent", 1, 1)
    a, b = t.run(built.batch), o.run(built.batch)  # the batch carries labels too: neither runner may feed them
    assert a.dtype == b.dtype == np.float32
    assert a.shape == b.shape == (8, built.data.info["num_labels"])
    assert np.abs(a - b).max() < 1e-4
    assert np.abs(a).max() > 1e-3  # real logits, not zeros
    assert not built.model.training


def test_threads_zero_means_every_core_and_cuda_needs_its_provider(cnn):
    import onnxruntime as ort

    assert resolve_threads(0) >= 1 and resolve_threads(3) == 3
    assert OrtRunner(cnn.onnx, cnn.task_name).threads == resolve_threads(0)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(JobFailed) as err:
            OrtRunner(cnn.onnx, cnn.task_name, provider="cuda")
        assert "onnxruntime-cpu" in err.value.hint
    with pytest.raises(JobFailed):
        OrtRunner(cnn.onnx, "speech_recognition")


# ---------------------------------------------------------------- metrics


def test_classification_metrics_by_hand():
    # Probabilities chosen per row; logits = log(p) so softmax gives p back exactly.
    p = np.array([[0.7, 0.2, 0.1, 0.0], [0.3, 0.6, 0.1, 0.0], [0.1, 0.8, 0.1, 0.0],
                  [0.2, 0.5, 0.3, 0.0], [0.1, 0.1, 0.8, 0.0], [0.5, 0.25, 0.25, 0.0]]) + 1e-12
    labels = [0, 0, 1, 1, 2, 2]  # predicted: 0, 1, 1, 1, 2, 0; class "d" never occurs nor is predicted
    m = metrics.classification(np.log(p), labels, ["a", "b", "c", "d"])
    assert m["confusion"] == [[1, 1, 0, 0], [0, 2, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
    assert m["labels"] == ["a", "b", "c", "d"]
    assert m["accuracy"] == pytest.approx(4 / 6)
    by = {c["label"]: c for c in m["per_class"]}
    assert (by["a"]["precision"], by["a"]["recall"], by["a"]["f1"], by["a"]["support"]) == pytest.approx((0.5, 0.5, 0.5, 2))
    assert (by["b"]["precision"], by["b"]["recall"], by["b"]["f1"]) == pytest.approx((2 / 3, 1.0, 0.8))
    assert (by["c"]["precision"], by["c"]["recall"], by["c"]["f1"]) == pytest.approx((1.0, 0.5, 2 / 3))
    assert (by["d"]["f1"], by["d"]["support"]) == (0.0, 0)
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)  # "d" is absent from labels and predictions
    expected_loss = -np.mean(np.log([0.7, 0.3, 0.8, 0.5, 0.8, 0.25]))
    assert m["loss"] == pytest.approx(expected_loss, abs=1e-9)
    with pytest.raises(ValueError):
        metrics.classification(np.zeros((2, 3)), [0, 1], ["a", "b"])


def test_language_model_perplexity_is_exp_of_the_mean_loss():
    m = metrics.language_model(6.0, 3)
    assert m["loss"] == pytest.approx(2.0) and m["perplexity"] == pytest.approx(math.exp(2.0))
    # One row, 4 positions, vocab 2; the last is padding, so two pairs count: position 0 predicting
    # token 1 (id 0, p 0.9) and position 1 predicting token 2 (id 1, p 0.75).
    logits = np.log(np.array([[[0.9, 0.1], [0.25, 0.75], [0.5, 0.5], [0.5, 0.5]]]))
    ids, mask = np.array([[1, 0, 1, 0]]), np.array([[1, 1, 1, 0]])
    loss_sum, tokens = metrics.lm_sums(logits, ids, mask)
    assert tokens == 2 and loss_sum == pytest.approx(-math.log(0.9) - math.log(0.75))
    assert metrics.lm_predictions(logits, mask).tolist() == [0, 1]
    assert metrics.agreement([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    with pytest.raises(ValueError):
        metrics.language_model(1.0, 0)


# ---------------------------------------------------------------- latency


class _Recording:
    """A real runner that also records the order of the calls made to it."""

    def __init__(self, runner, name: str, calls: list):
        self.runner, self.name, self.calls = runner, name, calls

    def run(self, batch):
        self.calls.append(self.name)
        return self.runner.run(batch)


def test_latency_measures_two_runners_interleaved(cnn):
    calls: list[str] = []
    batch = {"pixel_values": cnn.batch["pixel_values"]}
    runners = [_Recording(TorchRunner(cnn.model, cnn.task_name, 1), "t", calls),
               _Recording(OrtRunner(cnn.onnx, cnn.task_name, 1), "o", calls)]
    out = latency.measure(runners, batch, warmup=2, repeats=6)
    assert calls[:4] == ["t", "t", "o", "o"]  # each one's warm-up first
    timed = calls[4:]
    assert timed == ["t", "o", "o", "t"] * 3  # one call each per round, the first rotating
    for r in out:
        assert (r["batch"], r["repeats"], r["warmup"]) == (8, 6, 2)
        assert 0 < r["p50"] <= r["p95"] < 10_000 and r["mean"] > 0


# ---------------------------------------------------------------- facts


def test_torch_facts_params_and_macs_by_hand(cnn):
    import torch

    tiny = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 10))
    facts = torch_facts(tiny, {"pixel_values": torch.zeros(2, 1, 8, 8)})
    # conv: 6x6 outputs x 4 channels x (1 x 3 x 3) taps = 1296; linear: 144 x 10 = 1440 (per example).
    assert facts == {"params": 4 * 9 + 4 + 144 * 10 + 10, "macs": 1296 + 1440}
    facts = torch_facts(cnn.model, {"pixel_values": cnn.batch["pixel_values"]})
    assert facts["params"] == sum(p.numel() for p in cnn.model.parameters())
    # digits CNN on 32x32: stem 3->16 stride 2 (16x16 out), blocks 16->32 @16x16, 32->64 @8x8, 64->128 @4x4, head 128->10
    by_hand = 16 * 16 * 16 * 3 * 9 + 16 * 16 * 32 * 16 * 9 + 8 * 8 * 64 * 32 * 9 + 4 * 4 * 128 * 64 * 9 + 128 * 10
    assert facts["macs"] == by_hand == 3_650_816


def test_file_bytes_of_a_file_and_a_folder(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(b"x" * 10)
    (tmp_path / "d" / "b.bin").write_bytes(b"x" * 5)
    assert file_bytes(tmp_path / "d" / "a.bin") == 10 and file_bytes(tmp_path / "d") == 15
    with pytest.raises(JobFailed):
        file_bytes(tmp_path / "missing")


# ---------------------------------------------------------------- memory


def test_peak_memory_of_a_larger_model_is_larger(cnn, minilm, tmp_path):
    batch = {k: v for k, v in minilm.batch.items() if k != "labels"}
    small = peak_memory(cnn.onnx, cnn.task_name, {"pixel_values": cnn.batch["pixel_values"]}, threads=1)
    large = peak_memory(minilm.onnx, minilm.task_name, batch, threads=1)
    weights = sum(p.numel() * 4 for p in minilm.model.parameters())  # ~91 MB of fp32 weights
    assert 0 <= small < large
    assert large > 0.5 * weights
    pickled = peak_memory(save_module(minilm.model, tmp_path / "minilm.pt"), minilm.task_name, batch, threads=1)
    assert pickled > 0.5 * weights and pickled > small


# ---------------------------------------------------------------- evaluate_pair


def test_evaluate_pair_of_a_model_against_itself(cnn, tmp_path):
    threads = 1
    parent = Candidate("rparent", "fp32", OrtRunner(cnn.onnx, cnn.task_name, threads), size_path=cnn.onnx,
                       params=10, macs=20, memory_file=cnn.onnx)
    variant = Candidate("rvariant", "same model", OrtRunner(cnn.onnx, cnn.task_name, threads), size_path=cnn.onnx,
                        memory_file=cnn.onnx)
    settings = EvalSettings(samples=32, batch_size=8, warmup=2, repeats=30, threads=threads,
                            runtime="onnxruntime-cpu")
    lines: list[str] = []
    doc = evaluate_pair(parent, variant, cnn.data, cnn.task_name, settings, log=lines.append)
    assert lines
    assert doc["agreement"] == 1.0
    assert doc["parent"]["metrics"] == doc["variant"]["metrics"]
    assert sum(map(sum, doc["parent"]["metrics"]["confusion"])) == 32 == doc["samples"]
    assert doc["delta"]["accuracy"] == 0.0 and doc["delta"]["size_ratio"] == 1.0
    # The same model twice: the ratio is 1 up to noise, which on two shared, loaded cores is large for
    # millisecond calls (measured here: 0.9-1.1 mostly, 2.6 once in six tries at 20 repeats).
    assert 0.25 < doc["delta"]["latency_ratio"] < 4.0

    path = write(tmp_path / "run", doc)
    back = json.loads(path.read_text(encoding="utf-8"))
    assert back == doc and not (tmp_path / "run" / "evaluation.json.tmp").exists()
    assert set(back) == {"version", "task", "samples", "settings", "parent", "variant", "agreement", "delta"}
    assert back["version"] == 1 and back["task"] == "image_classification"
    assert back["settings"] == {"threads": 1, "warmup": 2, "repeats": 30, "batch_sizes": [1, 8],
                                "runtime": "onnxruntime-cpu", "seq_len": None}
    assert set(back["delta"]) == {"accuracy", "latency_ratio", "size_ratio"}
    for side, run_id in (("parent", "rparent"), ("variant", "rvariant")):
        e = back[side]
        assert set(e) == {"run_id", "label", "runtime", "metrics", "latency_ms", "throughput_per_s", "size_bytes",
                          "params", "macs", "peak_memory_bytes"}
        assert e["run_id"] == run_id and e["runtime"] == "onnxruntime-cpu"
        assert set(e["metrics"]) == {"accuracy", "macro_f1", "loss", "per_class", "confusion", "labels"}
        assert set(e["metrics"]["per_class"][0]) == {"label", "precision", "recall", "f1", "support"}
        assert e["latency_ms"]["b1"]["batch"] == 1 and e["latency_ms"]["bN"]["batch"] == 8
        for b in ("b1", "bN"):
            assert set(e["latency_ms"][b]) == {"batch", "p50", "p95", "mean"}
            assert 0 < e["latency_ms"][b]["p50"] <= e["latency_ms"][b]["p95"]
        assert e["throughput_per_s"] == pytest.approx(8 / (e["latency_ms"]["bN"]["p50"] / 1000))
        assert e["size_bytes"] == file_bytes(cnn.onnx) and e["peak_memory_bytes"] > 0
    assert (back["parent"]["params"], back["parent"]["macs"], back["variant"]["params"]) == (10, 20, None)


def test_evaluate_pair_refuses_mixed_runtimes_and_threads(cnn):
    onnx = Candidate("a", "onnx", OrtRunner(cnn.onnx, cnn.task_name, 1))
    eager = Candidate("b", "torch", TorchRunner(cnn.model, cnn.task_name, 1))
    with pytest.raises(JobFailed, match="torch-eager"):
        evaluate_pair(onnx, eager, cnn.data, cnn.task_name, EvalSettings(threads=1), log=lambda _: None)
    with pytest.raises(JobFailed, match="threads"):
        evaluate_pair(onnx, onnx, cnn.data, cnn.task_name, EvalSettings(threads=2), log=lambda _: None)


def test_evaluate_pair_of_a_causal_lm_scores_perplexity(ember_home):
    import torch
    import torch.nn.functional as F

    spec = TrainSpec.model_validate({"task": "causal_lm", "method": {"kind": "full"}, "data": {"max_length": 64},
                                     "device": "cpu"})
    task = get_task(spec.task)
    data = task.load_data(spec)
    model = task.build_model(spec, data).eval()
    runner = TorchRunner(model, "causal_lm", threads=1)
    doc = evaluate_pair(Candidate("p", "fp32", runner), Candidate("v", "fp32 again", runner), data, "causal_lm",
                        EvalSettings(samples=6, batch_size=3, warmup=1, repeats=2, threads=1, runtime="torch"),
                        log=lambda _: None)
    assert doc["agreement"] == 1.0 and doc["delta"]["perplexity"] == 0.0
    assert set(doc["delta"]) == {"perplexity", "latency_ratio", "size_ratio"} and doc["delta"]["size_ratio"] is None
    assert doc["settings"]["runtime"] == "torch-eager" and doc["settings"]["seq_len"] > 0
    m = doc["parent"]["metrics"]
    assert set(m) == {"loss", "perplexity"} and m["perplexity"] == pytest.approx(math.exp(m["loss"]))
    # The same figure straight from torch: next-token cross-entropy where both positions are real tokens.
    total, count = 0.0, 0
    for i in range(0, 6, 3):
        batch = data.collate([data.val[j] for j in range(i, i + 3)])
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
        keep = (batch["attention_mask"][:, 1:] * batch["attention_mask"][:, :-1]).bool()
        total += float(F.cross_entropy(logits[keep], batch["input_ids"][:, 1:][keep], reduction="sum"))
        count += int(keep.sum())
    assert m["loss"] == pytest.approx(total / count, rel=1e-5)
