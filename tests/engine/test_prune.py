"""Structured pruning (engine.compress.prune) on the real built-in models: the digits CNN and MiniLM.

CPU, tiny batches (4 examples, max_length 32). The pruned MiniLM is checked the way
compress.prune uses it: it runs, exports to ONNX (ONNX Runtime gives the same logits),
pickles whole and loads in a fresh process.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api.train_spec import TrainSpec
from engine.compress.prune import MIN_KEEP, TOLERANCE, prune, prune_steps
from engine.tasks import get_task
from engine.training.context import JobFailed

DIGITS = {"task": "image_classification", "method": {"kind": "full"}, "device": "cpu"}
TEXT = {"task": "text_classification", "method": {"kind": "full"}, "data": {"max_length": 32}, "device": "cpu"}
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _build(doc: dict, home: Path) -> dict:
    import torch

    torch.manual_seed(0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_HOME", str(home))  # the digits dataset is rendered under EMBER_HOME once
        spec = TrainSpec.model_validate(doc)
        task = get_task(spec.task)
        data = task.load_data(spec)
        model = task.build_model(spec, data).eval()
    return {"task": spec.task, "model": model, "batch": data.collate([data.val[i] for i in range(4)]),
            "other": data.collate([data.val[i] for i in range(4, 6)]), "data": data}


def _logits(model, item_task: str, batch: dict):
    import torch

    with torch.no_grad():
        if item_task == "image_classification":
            return model(batch["pixel_values"])
        return model(**{k: v for k, v in batch.items() if k in TEXT_INPUTS}).logits


def _fingerprint(model) -> tuple[int, float]:
    """Parameter count and total magnitude: any pruning or weight change shows."""
    params = [p.detach() for p in model.parameters()]
    return sum(p.numel() for p in params), float(sum(p.double().abs().sum() for p in params))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # The test machine's two cores are shared: two busy-waiting threads run several times slower.
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict:
    return _build(DIGITS, tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> dict:
    return _build(TEXT, tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def pruned_minilm(minilm) -> dict:
    before = _fingerprint(minilm["model"])
    lines: list[str] = []
    model, report = prune(minilm["model"], minilm["task"], minilm["batch"], ratio=0.3, log=lines.append)
    assert _fingerprint(minilm["model"]) == before  # pruned a copy
    return {"model": model.eval(), "report": report, "lines": lines}


# ---------------------------------------------------------------- the digits CNN


def test_digits_cnn_loses_30_percent_of_its_parameters_and_still_runs(digits, tmp_path):
    import torch

    model, batch = digits["model"], digits["batch"]
    before = _fingerprint(model)
    ref = _logits(model, digits["task"], batch)
    pruned, report = prune(model, digits["task"], batch, target="params", ratio=0.3, log=lambda _: None)

    params = sum(p.numel() for p in pruned.parameters())
    assert report["params_before"] == before[0] and report["params_after"] == params
    assert abs(report["achieved"] - 0.3) <= TOLERANCE and abs((1 - params / before[0]) - 0.3) <= TOLERANCE
    assert report["ratio_of"] == "whole_model" and report["macs_after"] < report["macs_before"]
    channels = report["channels"]
    assert channels["head"] == {"before": 10, "after": 10}  # the labels stay
    convs = {k: v for k, v in channels.items() if k != "head"}
    assert convs and all(v["after"] < v["before"] for v in convs.values()), channels
    assert pruned.head.in_features == channels["blocks.2.conv"]["after"] == pruned.blocks[2].bn.num_features

    out = _logits(pruned.eval(), digits["task"], batch)
    assert out.shape == ref.shape and torch.isfinite(out).all()
    assert _fingerprint(model) == before  # the input model is untouched

    torch.save(pruned, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False).eval()
    assert torch.allclose(_logits(loaded, digits["task"], batch), out, atol=1e-6)


def test_resnet18_keeps_its_channel_counts_multiples_of_16(tmp_path):
    """ONNX Runtime's blocked convolutions need channel counts that divide by 16 (AVX-512) or 8 (AVX2):
    pruning rounds each layer's kept channels to a multiple of 16 and still reaches its ratio."""
    from engine.compress.prune import ALIGN

    resnet = _build({**DIGITS, "model": {"arch": "resnet18"}, "data": {"image_size": 32}}, tmp_path)
    pruned, report = prune(resnet["model"], resnet["task"], resnet["batch"], target="params", ratio=0.3,
                           log=lambda _: None)
    assert abs(report["achieved"] - 0.3) <= TOLERANCE
    convs = {k: v for k, v in report["channels"].items() if "conv" in k or "downsample" in k}
    assert len(convs) >= 16 and any(v["after"] < v["before"] for v in convs.values()), convs
    assert all(v["after"] % ALIGN == 0 for v in convs.values()), convs


def test_digits_cnn_by_macs_with_recovery_between_steps(digits):
    """prune_steps: each step reaches its share of the target; the caller trains the same model in between."""
    import torch
    import torch.nn.functional as F

    model, batch = digits["model"], digits["batch"]
    steps = prune_steps(model, digits["task"], batch, target="macs", ratio=0.4, iterative_steps=3, log=lambda _: None)
    seen = []
    for i, (pruned, report) in enumerate(steps, start=1):
        seen.append(pruned)
        assert report["steps"][-1]["step"] == i
        assert abs(report["achieved"] - 0.4 * i / 3) <= TOLERANCE, report["steps"]
        pruned.train()  # a recovery step on the pruned model, in place
        opt = torch.optim.SGD(pruned.parameters(), lr=0.01)
        F.cross_entropy(pruned(batch["pixel_values"]), batch["labels"]).backward()
        opt.step()
    assert len(seen) == 3 and all(m is seen[0] for m in seen)
    assert abs(1 - report["macs_after"] / report["macs_before"] - 0.4) <= TOLERANCE
    assert _logits(seen[0].eval(), digits["task"], batch).shape == (4, 10)


# ---------------------------------------------------------------- MiniLM


def test_minilm_loses_30_percent_in_heads_and_ffn_width(minilm, pruned_minilm):
    import torch

    model, report = pruned_minilm["model"], pruned_minilm["report"]
    params = sum(p.numel() for p in model.parameters())
    assert abs(report["achieved"] - 0.3) <= TOLERANCE and abs(1 - params / report["params_before"] - 0.3) <= TOLERANCE
    assert report["ratio_of"] == "whole_model" and 0.3 < report["max_ratio"] < 0.5
    assert report["heads_before"] == [12] * 6 and report["intermediate_before"] == [1536] * 6
    assert all(1 <= h < 12 for h in report["heads_after"]) and all(n < 1536 for n in report["intermediate_after"])
    assert min(report["heads_after"]) >= 12 * MIN_KEEP
    assert pruned_minilm["lines"] and "step 1/1" in pruned_minilm["lines"][-1]

    hidden = minilm["model"].config.hidden_size
    for i, layer in enumerate(model.bert.encoder.layer):
        att = layer.attention.self
        width = att.num_attention_heads * att.attention_head_size
        assert att.num_attention_heads == report["heads_after"][i] and att.attention_head_size == 32
        assert width == att.all_head_size == att.query.out_features == att.key.out_features == att.value.out_features
        assert layer.attention.output.dense.in_features == width
        assert layer.intermediate.dense.out_features == layer.output.dense.in_features == report["intermediate_after"][i]
        assert att.query.in_features == layer.output.dense.out_features == hidden  # hidden size kept
    assert model.bert.embeddings.word_embeddings.weight.shape == minilm["model"].bert.embeddings.word_embeddings.weight.shape
    assert model.classifier.out_features == minilm["model"].classifier.out_features

    for batch in (minilm["batch"], minilm["other"]):  # two batch sizes and sequence lengths
        out = _logits(model, minilm["task"], batch)
        assert out.shape == _logits(minilm["model"], minilm["task"], batch).shape and torch.isfinite(out).all()


def test_pruned_minilm_exports_to_onnx_with_the_same_logits(minilm, pruned_minilm, tmp_path):
    import numpy as np
    import onnxruntime as ort
    import torch

    model = pruned_minilm["model"]
    batch = minilm["batch"]
    path = tmp_path / "model.onnx"
    torch.onnx.export(model, tuple(batch[n] for n in TEXT_INPUTS), str(path), input_names=list(TEXT_INPUTS),
                      output_names=["logits"], dynamo=False, opset_version=17,
                      dynamic_axes={n: {0: "batch", 1: "sequence"} for n in TEXT_INPUTS})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in (batch, minilm["other"]):
        got = session.run(["logits"], {i.name: feed[i.name].numpy() for i in session.get_inputs()})[0]
        want = _logits(model, minilm["task"], feed).numpy()
        assert got.shape == want.shape and np.abs(got - want).max() <= 1e-3


def test_pruned_minilm_pickles_and_loads_in_another_process(minilm, pruned_minilm, tmp_path):
    import numpy as np
    import torch

    model = pruned_minilm["model"]
    inputs = {k: v for k, v in minilm["batch"].items() if k in TEXT_INPUTS}
    torch.save(model, tmp_path / "model.pt")
    torch.save(inputs, tmp_path / "inputs.pt")
    code = (
        "import sys, numpy, torch\n"
        "m = torch.load(sys.argv[1] + '/model.pt', weights_only=False).eval()\n"
        "x = torch.load(sys.argv[1] + '/inputs.pt')\n"
        "with torch.no_grad():\n"
        "    numpy.save(sys.argv[1] + '/logits.npy', m(**x).logits.numpy())\n"
        "print([l.attention.self.num_attention_heads for l in m.bert.encoder.layer])\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(pruned_minilm["report"]["heads_after"])
    got = np.load(tmp_path / "logits.npy")
    assert np.abs(got - _logits(model, minilm["task"], minilm["batch"]).numpy()).max() <= 1e-5


def test_minilm_in_three_steps_reaches_the_same_target(minilm, pruned_minilm):
    before = _fingerprint(minilm["model"])
    model, report = prune(minilm["model"], minilm["task"], minilm["batch"], ratio=0.3, iterative_steps=3,
                          log=lambda _: None)
    assert [s["step"] for s in report["steps"]] == [1, 2, 3] and report["iterative_steps"] == 3
    for s in report["steps"]:
        assert abs(s["achieved"] - 0.3 * s["step"] / 3) <= TOLERANCE, report["steps"]
    assert abs(report["achieved"] - 0.3) <= TOLERANCE
    assert abs(report["params_after"] - pruned_minilm["report"]["params_after"]) <= TOLERANCE * report["params_before"]
    assert all(h < 12 for h in report["heads_after"])
    assert _logits(model.eval(), minilm["task"], minilm["batch"]).shape == (4, minilm["model"].num_labels)
    assert _fingerprint(minilm["model"]) == before


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"ratio": 0.0}, "between 0 and 1"),
    ({"ratio": 1.0}, "between 0 and 1"),
    ({"ratio": -0.2}, "between 0 and 1"),
    ({"ratio": float("nan")}, "must be a number"),
    ({"ratio": "0.3"}, "must be a number"),
    ({"target": "flops"}, 'Unknown pruning target "flops"'),
    ({"iterative_steps": 0}, "iterative_steps"),
])
def test_bad_arguments_are_refused(digits, kwargs, words):
    before = _fingerprint(digits["model"])
    with pytest.raises(JobFailed) as err:
        prune(digits["model"], digits["task"], digits["batch"], **kwargs)
    assert words in str(err.value) and err.value.hint
    assert _fingerprint(digits["model"]) == before


def test_a_ratio_that_empties_a_layer_is_refused_with_the_largest_that_does_not(digits):
    model, batch = digits["model"], digits["batch"]
    before = _fingerprint(model)
    with pytest.raises(JobFailed) as err:
        prune(model, digits["task"], batch, ratio=0.99)
    message = str(err.value)
    assert "whole layer" in message and "stem.0" in message and "largest ratio" in message, message
    assert _fingerprint(model) == before
    safe = float(re.search(r"largest ratio that keeps .* is (0\.\d+)", message).group(1))
    assert 0.5 < safe < 0.99 and f"{safe:.2f}" in err.value.hint
    pruned, report = prune(model, digits["task"], batch, ratio=safe, log=lambda _: None)  # the advice works
    assert abs(report["achieved"] - safe) <= TOLERANCE
    assert all(v["after"] >= MIN_KEEP * v["before"] for v in report["channels"].values())


def test_too_many_heads_is_refused_naming_the_layer(minilm):
    before = _fingerprint(minilm["model"])
    with pytest.raises(JobFailed) as err:
        prune(minilm["model"], minilm["task"], minilm["batch"], ratio=0.6)
    message = str(err.value)
    assert "whole layer" in message and "bert.encoder.layer.0.attention.self" in message and "heads" in message
    safe = float(re.search(r"largest ratio that keeps .* is (0\.\d+)", message).group(1))
    assert 0.3 < safe < 0.5 and "embeddings" in err.value.hint
    assert _fingerprint(minilm["model"]) == before


def test_models_it_cannot_prune_are_refused_clearly(digits):
    import peft
    import torch

    wrapped = peft.get_peft_model(copy.deepcopy(digits["model"]), peft.LoraConfig(target_modules=["conv"], r=2))
    with pytest.raises(JobFailed, match="PEFT adapters"):
        prune(wrapped, digits["task"], digits["batch"])
    with pytest.raises(JobFailed, match="causal language models is not supported yet"):
        prune(digits["model"], "causal_lm", digits["batch"])

    class BagOfWords(torch.nn.Module):  # a text classifier with no encoder layers
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.EmbeddingBag(100, 8)
            self.out = torch.nn.Linear(8, 2)

        def forward(self, input_ids, **_):
            return self.out(self.emb(input_ids))

    with pytest.raises(JobFailed, match="Does not know how to prune this text model") as err:
        prune(BagOfWords(), "text_classification", {"input_ids": torch.zeros(1, 4, dtype=torch.long)})
    assert "BagOfWords" in str(err.value) and err.value.hint


def test_vocabulary_pruning_keeps_the_logits_of_seen_tokens_and_exports(minilm, tmp_path):
    """MiniLM's 30,522-row embedding table cut to the tokens its training data uses: the same logits for
    text made of those tokens, an unseen one read as the kept token nearest to it (or as [UNK] when asked),
    the same inputs in ONNX, and about half the model."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from engine.compress.vocab import RemappedEmbedding, trim

    data = minilm["data"]
    model = copy.deepcopy(minilm["model"])
    before = sum(p.numel() for p in model.parameters())
    report = trim(model, data.train, data.val, data.info)
    after = sum(p.numel() for p in model.parameters())
    assert isinstance(model.get_input_embeddings(), RemappedEmbedding)
    assert report["vocabulary_before"] == 30522 and report["vocabulary_after"] < 5000
    assert before - after == report["params_removed"] and after < 0.6 * before
    assert 0 <= report["val_tokens_unknown"] < 0.1
    seen = {i for row in data.train for i in row["input_ids"]}
    # Training examples are made of kept tokens only: their logits do not change.
    train_batch = data.collate([data.train[i] for i in range(4)])
    assert torch.allclose(_logits(model, "text_classification", train_batch),
                          _logits(minilm["model"], "text_classification", train_batch), atol=1e-5)
    # An unseen token gives what the seen (non-special) token of the most similar embedding gives in the
    # unpruned model, found here by brute force over the original table.
    unk = data.info["unk_token_id"]
    unseen = next(i for i in range(2000, 30522) if i not in seen)
    table = minilm["model"].get_input_embeddings().weight.detach()
    special = set(data.info["special_token_ids"]) | {unk}
    ordinary = sorted(seen - special)
    cos = torch.nn.functional.cosine_similarity(table[ordinary], table[unseen][None], dim=1)
    nearest = ordinary[int(cos.argmax())]
    ids = train_batch["input_ids"].clone()
    ids[0, 1] = unseen
    swapped = {**train_batch, "input_ids": ids}
    as_nearest = {**train_batch, "input_ids": ids.masked_fill(ids == unseen, nearest)}
    assert torch.allclose(_logits(model, "text_classification", swapped),
                          _logits(minilm["model"], "text_classification", as_nearest), atol=1e-5)
    assert not torch.allclose(_logits(model, "text_classification", swapped),
                              _logits(minilm["model"], "text_classification",
                                      {**swapped, "input_ids": ids.masked_fill(ids == unseen, unk)}), atol=1e-3)
    as_unknown = copy.deepcopy(minilm["model"])
    assert trim(as_unknown, data.train, data.val, data.info, unseen="unknown")["unseen"] == "the unknown token"
    assert torch.allclose(_logits(as_unknown, "text_classification", swapped),
                          _logits(minilm["model"], "text_classification",
                                  {**swapped, "input_ids": ids.masked_fill(ids == unseen, unk)}), atol=1e-5)
    path = tmp_path / "vocab.onnx"
    torch.onnx.export(model, tuple(train_batch[n] for n in TEXT_INPUTS), str(path), input_names=list(TEXT_INPUTS),
                      output_names=["logits"], dynamo=False, opset_version=17,
                      dynamic_axes={n: {0: "batch", 1: "sequence"} for n in TEXT_INPUTS})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {n: swapped[n].numpy() for n in TEXT_INPUTS})[0]
    assert np.abs(got - _logits(model, "text_classification", swapped).numpy()).max() <= 1e-4
