"""Distillation students and losses, and torchao QAT, on the built-in MiniLM (real weights, CPU, tiny batches)."""

from __future__ import annotations

import copy
import math

import pytest

from engine.api.train_spec import TrainSpec
from engine.compress import qat
from engine.tasks import get_task
from engine.trainer import distill
from engine.training.context import JobFailed

TEXT = {"task": "text_classification", "method": {"kind": "full"}, "data": {"max_length": 32}, "device": "cpu"}


def _inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.fixture(scope="module")
def mini():
    """The MiniLM teacher with its head fitted to pooled features, so its logits carry real decisions.

    Training the whole 6-layer model would take most of the time budget; fitting the
    head alone (features computed once) takes a fraction of a second and turns the
    random head's near-ties (logits within 0.1) into clear decisions that QAT and
    distillation can be checked against.
    """
    import torch
    import torch.nn.functional as F

    # One thread: the test machine's two cores are shared, and two busy-waiting
    # threads on a loaded machine run these tests several times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = TrainSpec.model_validate(TEXT)
    task = get_task(spec.task)
    data = task.load_data(spec)
    model = task.build_model(spec, data).eval()
    fit = data.collate([data.train[i] for i in range(48)])
    with torch.no_grad():
        pooled = model.bert(**_inputs(fit)).pooler_output
    opt = torch.optim.Adam(model.classifier.parameters(), lr=2e-2)
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(model.classifier(pooled), fit["labels"]).backward()
        opt.step()
    model.zero_grad(set_to_none=True)
    train = data.collate([data.train[i] for i in range(8)])
    val = data.collate([data.val[i] for i in range(16)])
    yield {"spec": spec, "task": task, "data": data, "teacher": model, "train": train, "val": val}
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- students


def test_kept_layers_follow_distilbert():
    assert distill.kept_layers(12, 6) == [0, 2, 4, 7, 9, 11]  # DistilBERT's own extraction
    assert distill.kept_layers(6, 3) == [0, 2, 5]
    assert distill.kept_layers(6, 2) == [0, 5]
    assert distill.kept_layers(6, 5) == [0, 1, 2, 4, 5]
    assert distill.kept_layers(6, 1) == [0]
    for total in range(2, 30):
        for k in range(1, total):
            kept = distill.kept_layers(total, k)
            assert len(kept) == k and kept == sorted(set(kept)) and kept[0] == 0 and kept[-1] <= total - 1


def test_build_student_keeps_teacher_layers_and_rebuilds_from_a_fresh_model(mini):
    import torch

    teacher = mini["teacher"]
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student, info = distill.build_student(teacher, "text_classification", 3)
    assert info == {"layers": 3, "kept": [0, 2, 5], "of": 6}

    layers = student.bert.encoder.layer
    assert len(layers) == 3 and student.config.num_hidden_layers == 3
    assert [m.attention.self.layer_idx for m in layers] == [0, 1, 2]  # cache slots follow the new order
    for new, old in enumerate(info["kept"]):
        s_sd, t_sd = layers[new].state_dict(), teacher.bert.encoder.layer[old].state_dict()
        assert s_sd.keys() == t_sd.keys() and all(torch.equal(s_sd[k], t_sd[k]) for k in s_sd)
    assert torch.equal(student.classifier.weight, teacher.classifier.weight)
    assert student.classifier.weight.data_ptr() != teacher.classifier.weight.data_ptr()  # a copy, not shared

    # The teacher is untouched.
    assert len(teacher.bert.encoder.layer) == 6 and teacher.config.num_hidden_layers == 6
    after = teacher.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)

    inputs = _inputs(mini["val"])
    with torch.no_grad():
        logits = student(**inputs).logits
        assert logits.shape == (16, mini["data"].info["num_labels"]) and torch.isfinite(logits).all()
        assert not torch.allclose(logits, teacher(**inputs).logits)  # three layers fewer do change the output

    # The saved student loads into the same skeleton cut from a fresh base model.
    fresh = mini["task"].build_model(mini["spec"], mini["data"]).eval()
    skeleton, info2 = distill.truncate_layers(fresh, "text_classification", 3)
    assert skeleton is fresh and info2 == info
    skeleton.load_state_dict(student.state_dict(), strict=True)
    with torch.no_grad():
        assert torch.equal(skeleton(**inputs).logits, logits)


def _tiny_models():
    import transformers as tf

    small = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "vocab_size": 64}
    return {
        "gpt2": tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=4, n_embd=32, n_head=2, vocab_size=64, n_positions=64,
                                                 bos_token_id=0, eos_token_id=0)),
        "qwen2": tf.Qwen2ForCausalLM(tf.Qwen2Config(num_hidden_layers=4, num_key_value_heads=1, **small)),
        "llama": tf.LlamaForCausalLM(tf.LlamaConfig(num_hidden_layers=4, num_key_value_heads=1, **small)),
        "distilbert": tf.DistilBertForSequenceClassification(
            tf.DistilBertConfig(n_layers=4, dim=32, hidden_dim=64, n_heads=2, vocab_size=64, num_labels=3)),
        "roberta": tf.RobertaForSequenceClassification(tf.RobertaConfig(num_hidden_layers=4, num_labels=3, **small)),
    }


def test_truncation_finds_the_blocks_of_other_transformers():
    """Random tiny configs of five architectures: blocks found, config and cache slots follow, outputs sane."""
    import torch

    torch.manual_seed(0)
    ids = torch.randint(3, 60, (2, 10))
    for name, model in _tiny_models().items():
        causal = name in ("gpt2", "qwen2", "llama")
        student, info = distill.build_student(model.eval(), "causal_lm" if causal else "text_classification", 2)
        assert info == {"layers": 2, "kept": [0, 3], "of": 4}, name
        assert student.config.num_hidden_layers == 2 and model.config.num_hidden_layers == 4, name
        assert len(distill.find_blocks(student)[1]) == 2 and len(distill.find_blocks(model)[1]) == 4, name
        with torch.no_grad():
            logits = student(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        assert logits.shape == ((2, 10, 64) if causal else (2, 3)) and torch.isfinite(logits).all(), name
        if causal:  # the key/value cache has one slot per kept block, in order
            with_cache = student.generate(ids[:, :4], max_new_tokens=4, do_sample=False, use_cache=True,
                                          pad_token_id=0)
            without = student.generate(ids[:, :4], max_new_tokens=4, do_sample=False, use_cache=False,
                                       pad_token_id=0)
            assert torch.equal(with_cache, without), name
    assert student.config.num_hidden_layers == 2
    qwen = _tiny_models()["qwen2"]
    qwen.config.layer_types = ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]
    distill.truncate_layers(qwen, "causal_lm", 2)
    assert qwen.config.layer_types == ["full_attention", "sliding_attention"]  # the types of blocks 0 and 3
    distil = _tiny_models()["distilbert"]
    distill.truncate_layers(distil, "text_classification", 3)
    assert distil.distilbert.transformer.n_layers == 3 and distil.config.n_layers == 3


# ---------------------------------------------------------------- the loss


def test_kd_loss_reduces_to_cross_entropy_and_zero_kd():
    import torch
    import torch.nn.functional as F

    torch.manual_seed(1)
    s, t = torch.randn(6, 5), torch.randn(6, 5)
    y = torch.randint(0, 5, (6,))
    loss, parts = distill.kd_loss(s, t, y, temperature=3.0, alpha=0.0)
    assert torch.allclose(loss, F.cross_entropy(s, y)) and parts["task"] == pytest.approx(float(loss), rel=1e-6)
    assert parts["kd"] > 0

    loss, parts = distill.kd_loss(s, s.clone(), y, temperature=2.0, alpha=0.7)
    assert abs(parts["kd"]) < 1e-6
    assert float(loss) == pytest.approx(0.3 * float(F.cross_entropy(s, y)), rel=1e-5)

    # A mask over examples limits the KD term to them; the task term still covers the batch.
    keep = torch.tensor([True, False, True, True, False, False])
    _, masked = distill.kd_loss(s, t, y, temperature=3.0, alpha=0.5, mask=keep)
    _, subset = distill.kd_loss(s[keep], t[keep], y[keep], temperature=3.0, alpha=0.5)
    assert masked["kd"] == pytest.approx(subset["kd"], rel=1e-6)
    assert masked["task"] == pytest.approx(float(F.cross_entropy(s, y)), rel=1e-6)


def test_kd_loss_t_squared_by_hand():
    import torch
    import torch.nn.functional as F

    # One example, two classes: student [0, 0], teacher [2, 0], T = 2, alpha = 1.
    temp = 2.0
    e = math.exp(2.0 / temp)
    p = [e / (e + 1), 1 / (e + 1)]
    kl = sum(pi * math.log(pi / 0.5) for pi in p)
    loss, parts = distill.kd_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 0.0]]), torch.tensor([0]),
                                  temperature=temp, alpha=1.0)
    assert float(loss) == pytest.approx(temp ** 2 * kl, rel=1e-5)
    assert parts["kd"] == pytest.approx(temp ** 2 * kl, rel=1e-5)
    assert parts["task"] == pytest.approx(math.log(2), rel=1e-5)  # reported even with alpha 1

    # A batch: batch-mean KL at temperature T, times T^2; the teacher gets no gradient.
    torch.manual_seed(2)
    s = torch.randn(4, 3, requires_grad=True)
    t = torch.randn(4, 3, requires_grad=True)
    y = torch.tensor([0, 1, 2, 1])
    temp, alpha = 4.0, 0.25
    pt, ps = F.softmax(t.detach() / temp, -1), F.softmax(s.detach() / temp, -1)
    kl = float((pt * (pt / ps).log()).sum(-1).mean())
    loss, _ = distill.kd_loss(s, t, y, temperature=temp, alpha=alpha)
    expected = alpha * temp ** 2 * kl + (1 - alpha) * float(F.cross_entropy(s.detach(), y))
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert s.grad is not None and s.grad.abs().sum() > 0 and t.grad is None


def test_kd_loss_causal_lm_masked_against_a_direct_computation():
    import torch
    import torch.nn.functional as F

    torch.manual_seed(3)
    b, n, v = 2, 6, 7
    s, t = torch.randn(b, n, v), torch.randn(b, n, v)
    labels = torch.randint(0, v, (b, n))
    labels[0, :3] = -100  # prompt tokens
    labels[1, 4:] = -100  # padding
    attention = torch.ones(b, n, dtype=torch.long)
    attention[1, 4:] = 0
    temp, alpha = 2.0, 0.3

    def direct(keep):
        kls, ces = [], []
        for i in range(b):
            for j in range(n - 1):  # position j predicts token j + 1
                if keep[i, j + 1]:
                    pt, ps = F.softmax(t[i, j] / temp, -1), F.softmax(s[i, j] / temp, -1)
                    kls.append(float((pt * (pt / ps).log()).sum()))
                if labels[i, j + 1] != -100:
                    ces.append(-float(F.log_softmax(s[i, j], -1)[labels[i, j + 1]]))
        kd, ce = temp ** 2 * sum(kls) / len(kls), sum(ces) / len(ces)
        return alpha * kd + (1 - alpha) * ce, kd, ce

    loss, parts = distill.kd_loss(s, t, labels, temperature=temp, alpha=alpha, mask=attention)
    want, kd, ce = direct(attention.bool())
    assert float(loss) == pytest.approx(want, rel=1e-5)
    assert parts["kd"] == pytest.approx(kd, rel=1e-5) and parts["task"] == pytest.approx(ce, rel=1e-5)

    loss, parts = distill.kd_loss(s, t, labels, temperature=temp, alpha=alpha)  # no mask: the target tokens
    want, kd, _ = direct(labels != -100)
    assert float(loss) == pytest.approx(want, rel=1e-5) and parts["kd"] == pytest.approx(kd, rel=1e-5)


def test_distillation_steps_reduce_the_kd_loss(mini):
    import torch

    teacher = mini["teacher"]
    student, _ = distill.build_student(teacher, "text_classification", 3)
    batch = mini["train"]
    inputs = _inputs(batch)
    with torch.no_grad():
        target = teacher(**inputs).logits
    opt = torch.optim.AdamW(student.parameters(), lr=2e-5)
    history = []
    for _ in range(5):  # eval mode: no dropout, so the loss on the fixed batch is comparable step to step
        opt.zero_grad()
        loss, parts = distill.kd_loss(student(**inputs).logits, target, batch["labels"], temperature=2.0, alpha=0.9)
        loss.backward()
        opt.step()
        history.append(parts["kd"])
    with torch.no_grad():
        _, final = distill.kd_loss(student(**inputs).logits, target, batch["labels"], temperature=2.0, alpha=0.9)
    history.append(final["kd"])
    assert all(b < a for a, b in zip(history, history[1:], strict=False)), history
    assert history[-1] < 0.5 * history[0], history
    assert all(p.grad is None for p in teacher.parameters())


# ---------------------------------------------------------------- QAT


def test_qat_trains_the_int8_graph_it_deploys(mini, tmp_path):
    """Fake quantization, straight-through training, and an ONNX Runtime int8 graph that predicts as trained."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    from engine.compress import quantize
    from engine.compress.onnx_export import export_onnx, feeds, session

    model = copy.deepcopy(mini["teacher"])
    data, train = mini["data"], mini["train"]
    with torch.no_grad():
        ref = model(**_inputs(mini["val"])).logits

    assert qat.prepare_qat(model, qat.Scheme("cpu")) is model
    fake = qat.fake_quant_modules(model)
    # q, k, v, attention output, intermediate, output per block, the pooler; word, position and type embeddings
    assert fake == 6 * 6 + 1 + 3
    assert type(model.classifier) is nn.Linear  # the head stays float
    assert qat.prepare_qat(model) is model and qat.fake_quant_modules(model) == fake  # idempotent
    assert model.state_dict().keys() == mini["teacher"].state_dict().keys()
    with pytest.raises(JobFailed, match="before calibration"):
        model(**_inputs(mini["val"]))
    calibration = [_inputs(data.collate([data.train[i]])) for i in range(16)]
    assert qat.calibrate(model, calibration) == 16
    query = model.bert.encoder.layer[0].attention.self.query
    assert 0 < int(query.act_zero) < 255 and float(query.act_scale) > 0  # uint8 asymmetric: LayerNorm output
    with torch.no_grad():
        faked = model(**_inputs(mini["val"])).logits
    diff = (faked - ref).abs().max()
    # int8 rounding of 37 layers' inputs and weights and of the embedding tables: a visible change, not a new model.
    assert 0 < diff < 0.25 * ref.abs().max(), (diff, ref.abs().max())
    assert (faked.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.75
    # The weights sit on ORT's 7-bit grid: 2 * max|w| / 128 per output row.
    w = query.fake_weight().detach()
    steps = w / (query.weight.detach().abs().amax(dim=1, keepdim=True) / 64)
    assert torch.allclose(steps, steps.round(), atol=1e-3) and steps.abs().max() <= 64

    w0 = query.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(2):
        opt.zero_grad()
        loss = F.cross_entropy(model(**_inputs(train)).logits, train["labels"])
        loss.backward()
        assert torch.isfinite(loss)
        assert query.weight.grad is not None and query.weight.grad.abs().sum() > 0  # straight-through gradients
        opt.step()
    assert not torch.equal(query.weight, w0)
    model.eval()
    val = data.collate([data.val[i] for i in range(len(data.val))])
    with torch.no_grad():
        trained_logits = model(**_inputs(val)).logits
    layers = qat.trained_layers(model)
    assert len(layers) == fake

    assert qat.convert_qat(model) is model
    assert qat.fake_quant_modules(model) == 0
    assert all(type(m) in (nn.Linear, nn.Embedding) for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding)))
    assert model.state_dict().keys() == mini["teacher"].state_dict().keys()

    float_onnx = tmp_path / "float.onnx"
    export_onnx(model, "text_classification", data.collate([data.val[i] for i in range(4)]), float_onnx)
    deploy = qat.deployment(layers, float_onnx)
    assert len(deploy.nodes) == fake and deploy.layers["bert.encoder.layer.0.attention.self.query"].endswith("MatMul")
    names = [i.name for i in session(float_onnx, threads=1).get_inputs()]
    out = tmp_path / "int8.onnx"
    report = quantize.quantize_static(float_onnx, out, [feeds(names, b) for b in calibration[:8]], target="cpu",
                                      only_nodes=deploy.nodes, overrides=deploy.overrides)
    assert report["quantized_nodes"] == fake and report["float_nodes"] == 0
    (got,) = session(out, threads=1).run(["logits"], feeds(names, val))
    agreement = float((np.argmax(got, -1) == trained_logits.argmax(-1).numpy()).mean())
    assert agreement >= 0.99, agreement
    # The same arithmetic: most examples' logits agree to float precision. The rest differ where torch's and
    # ONNX Runtime's float ops (GELU, LayerNorm) differ in the last bit at a rounding boundary: one int8 step,
    # carried on through the later layers.
    exact = (np.abs(got - trained_logits.numpy()).max(-1) < 1e-3).mean()
    assert exact >= 0.5, exact  # 0.64 here

    stray = qat.TrainedLayer("stray", "linear", "(3, 3):0", 1.0, 0, "cpu")
    with pytest.raises(JobFailed, match="no matching MatMul, Gemm or Gather"):
        qat.deployment([*layers, stray], float_onnx)


# ---------------------------------------------------------------- bad input


def test_qat_percentile_calibration_clips_the_outliers_min_max_keeps(mini):
    """Percentile ranges hold 99.999% of a layer's inputs: never wider than min/max, narrower where a few
    values stand out, computed as ONNX Runtime computes a range's scale; entropy is refused by name."""
    import torch

    from engine.api.specs import QatSpec

    data = mini["data"]
    calibration = [_inputs(data.collate([data.train[i]])) for i in range(16)]
    scales = {}
    for method in ("minmax", "percentile"):
        model = qat.prepare_qat(copy.deepcopy(mini["teacher"]), qat.Scheme("cpu"))
        assert qat.calibrate(model, calibration, method) == 16
        scales[method] = {name: float(m.act_scale) for name, m in qat._linears(model)}
        if method == "percentile":
            attention = model.bert.encoder.layer[0].attention.self
            assert attention.query.samples is None  # the sample is dropped once the range is set
            # q, k and v read one tensor: one range, as the int8 graph has one scale for that tensor
            assert float(attention.query.act_scale) == float(attention.key.act_scale) == \
                float(attention.value.act_scale)
            with torch.no_grad():
                assert torch.isfinite(model(**_inputs(mini["val"])).logits).all()
    assert scales["minmax"].keys() == scales["percentile"].keys()
    assert all(scales["percentile"][k] <= scales["minmax"][k] * (1 + 1e-6) for k in scales["minmax"])
    assert any(scales["percentile"][k] < 0.9 * scales["minmax"][k] for k in scales["minmax"])
    assert sum(scales["percentile"].values()) < sum(scales["minmax"].values())
    with pytest.raises(JobFailed, match="not 'entropy'"):
        qat.calibrate(qat.prepare_qat(copy.deepcopy(mini["teacher"])), calibration, "entropy")
    with pytest.raises(ValueError, match="QAT calibrates with minmax or percentile"):
        QatSpec.model_validate({"source_run": "r1", "calibration": {"method": "entropy"}})


def test_bad_inputs_fail_with_hints(mini):
    import torch
    from torch import nn

    teacher = mini["teacher"]
    for layers in (0, 6, 7, -1, True, 2.5):
        with pytest.raises(JobFailed, match="between 1 and 5") as err:
            distill.build_student(teacher, "text_classification", layers)
        assert "from 1 to 5" in err.value.hint
    assert len(teacher.bert.encoder.layer) == 6

    from engine.tasks import image_models

    spec = TrainSpec.model_validate({"task": "image_classification", "method": {"kind": "full"}, "device": "cpu"})
    cnn = image_models.build(spec, 10)
    for fn in (distill.build_student, distill.truncate_layers):
        with pytest.raises(JobFailed, match="transformer models") as err:
            fn(cnn, "image_classification", 2)
        assert "small_cnn" in err.value.hint
    with pytest.raises(JobFailed, match="no nn.Linear layers outside its head") as err:
        qat.prepare_qat(cnn)  # the small CNN's only Linear is its head; its convolutions are not QAT's
    assert "Conv2d" in str(err.value) and "compress.quantize" in err.value.hint
    with pytest.raises(JobFailed, match="Cannot find the layer count"):
        distill.build_student(nn.Sequential(nn.Linear(4, 4)), "text_classification", 1)

    s, y = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])
    with pytest.raises(JobFailed, match="temperature must be above 0"):
        distill.kd_loss(s, s, y, temperature=0)
    with pytest.raises(JobFailed, match="alpha must be between 0 and 1"):
        distill.kd_loss(s, s, y, alpha=1.5)
    with pytest.raises(JobFailed, match="labels: the student has 5 outputs, the teacher 3"):
        distill.kd_loss(s, torch.randn(4, 3), y)
    with pytest.raises(JobFailed, match="vocabulary: the student has 64 outputs, the teacher 50"):
        distill.kd_loss(torch.randn(2, 4, 64), torch.randn(2, 4, 50), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(JobFailed, match="needs labels unless alpha is 1"):
        distill.kd_loss(s, s, None, alpha=0.5)
