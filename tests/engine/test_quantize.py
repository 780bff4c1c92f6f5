"""ONNX export and ONNX Runtime post-training quantization on the built-in models.

The MiniLM text classifier (max_length 32) and the digits CNN are exported once per
module; every quantized model is run with ONNX Runtime on real validation examples.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from engine.api.train_spec import TrainSpec
from engine.compress import quantize as qz
from engine.compress.onnx_export import export_onnx, feeds, session
from engine.tasks import get_task
from engine.training.context import JobFailed

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

# Real models on two shared cores: the MiniLM fixture alone takes a while on a busy machine.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Two OpenMP threads on a busy 2-core machine can be 10x slower than one.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _build(doc: dict) -> tuple:
    spec = TrainSpec.model_validate({"method": {"kind": "full"}, "device": "cpu", **doc})
    task = get_task(spec.task)
    data = task.load_data(spec)
    torch.manual_seed(0)
    return data, task.build_model(spec, data).eval()


def _fit_head(head: torch.nn.Linear, features: torch.Tensor, labels: torch.Tensor) -> None:
    """A least-squares classifier head on the features of real training examples.

    The built-in models start with random heads: their logits are nearly tied, so top-1
    agreement between fp32 and int8 would measure noise. A fitted head gives real margins.
    """
    with torch.no_grad():
        x = torch.cat([features, torch.ones(len(features), 1)], 1)
        y = torch.nn.functional.one_hot(labels, head.out_features).float() * 4 - 2
        w = torch.linalg.solve(x.T @ x + 0.1 * torch.eye(x.shape[1]), x.T @ y)
        head.weight.copy_(w[:-1].T)
        head.bias.copy_(w[-1])


def _batches(data, names, start: int, stop: int, size: int = 16) -> list[dict[str, np.ndarray]]:
    return [feeds(names, data.collate([data.val[j] for j in range(i, min(i + size, stop))]))
            for i in range(start, stop, size)]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    data, model = _build({"task": "text_classification", "data": {"max_length": 32}})
    batch = data.collate([data.train[i] for i in range(48)])
    with torch.no_grad():
        pooled = model.bert(**{k: v for k, v in batch.items() if k != "labels"}).pooler_output
    _fit_head(model.classifier, pooled, batch["labels"])
    folder = tmp_path_factory.mktemp("minilm")
    info = export_onnx(model, "text_classification", data.collate([data.val[i] for i in range(4)]),
                       folder / "model.onnx")
    names = info["inputs"]
    ns = SimpleNamespace(data=data, model=model, info=info, src=Path(info["path"]), names=names,
                         eval=_batches(data, names, 0, 32), calib=_batches(data, names, 32, 40, 1))
    ns.ref = _logits(ns.src, ns.eval)  # fp32 ONNX logits on 32 validation examples
    return ns


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    home = tmp_path_factory.mktemp("digits-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_HOME", str(home))
        data, model = _build({"task": "image_classification"})
        batch = data.collate([data.train[i] for i in range(0, 1400, 14)])  # 100 examples, every digit
        with torch.no_grad():
            features = model.pool(model.blocks(model.stem(batch["pixel_values"]))).flatten(1)
        _fit_head(model.head, features, batch["labels"])
        info = export_onnx(model, "image_classification", data.collate([data.val[i] for i in range(4)]),
                           tmp_path_factory.mktemp("digits") / "model.onnx")
        names = info["inputs"]
        ns = SimpleNamespace(data=data, model=model, info=info, src=Path(info["path"]), names=names,
                             eval=_batches(data, names, 0, 32), calib=_batches(data, names, 32, 48, 8),
                             labels=np.array([data.val[i]["labels"] for i in range(32)]))
        ns.ref = _logits(ns.src, ns.eval)
        return ns


def _logits(path: Path, batches) -> np.ndarray:
    s = session(path, threads=1)
    return np.concatenate([s.run(["logits"], b)[0] for b in batches])


def _ops(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        out[node.op_type] = out.get(node.op_type, 0) + 1
    return out


# ---------------------------------------------------------------- export


def test_minilm_exports_to_one_file_with_dynamic_batch_and_sequence(minilm):
    info = minilm.info
    assert info["exporter"] == "torchscript" and info["opset"] == 17 and info["outputs"] == ["logits"]
    assert info["inputs"][:2] == ["input_ids", "attention_mask"]
    assert info["max_abs_diff"] <= 1e-3 and info["bytes"] == minilm.src.stat().st_size > 50_000_000
    assert sorted(p.name for p in minilm.src.parent.iterdir()) == ["model.onnx"]  # no external data, no temp file
    model = onnx.load(str(minilm.src), load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        assert [d.dim_param for d in dims] == ["batch", "sequence"], vi
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"

    # Another batch size and a sequence length the export never saw, with padding.
    batch = minilm.data.collate([minilm.data.val[i] for i in range(10, 13)])
    batch = {k: v[:, :11].clone() for k, v in batch.items() if k in minilm.names}
    batch["attention_mask"][0, 6:] = 0
    with torch.no_grad():
        ref = minilm.model(**batch).logits.numpy()
    got = session(minilm.src).run(["logits"], feeds(minilm.names, batch))[0]
    assert got.shape == (3, minilm.model.config.num_labels)
    assert np.abs(got - ref).max() <= 1e-3


def test_digits_cnn_exports_with_dynamic_batch(digits):
    info = digits.info
    assert info["inputs"] == ["pixel_values"] and info["outputs"] == ["logits"] and info["max_abs_diff"] <= 1e-3
    batch = digits.data.collate([digits.data.val[i] for i in range(5)])
    with torch.no_grad():
        ref = digits.model(batch["pixel_values"]).numpy()
    fed = feeds(digits.names, batch)
    assert fed["pixel_values"].dtype == np.float32 and set(fed) == {"pixel_values"}
    assert np.abs(session(digits.src).run(["logits"], fed)[0] - ref).max() <= 1e-3
    # The fitted head makes a real classifier, so agreement figures below mean something.
    assert float((digits.ref.argmax(-1) == digits.labels).mean()) >= 0.6
    ops = _ops(digits.src)
    assert ops["Conv"] == 4 and "BatchNormalization" not in ops  # BatchNorm folded into the convolutions


def test_feeds_and_session_settings(minilm):
    fed = minilm.eval[0]
    assert all(v.dtype == np.int64 for v in fed.values()) and list(fed) == minilm.names
    with pytest.raises(JobFailed, match="the batch has no 'attention_mask'"):
        feeds(["input_ids", "attention_mask"], {"input_ids": np.zeros((1, 4))})
    s = session(minilm.src, threads=1)
    assert s.get_session_options().intra_op_num_threads == 1
    assert s.get_providers() == ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" in ort.get_available_providers():
        assert session(minilm.src, provider="cuda").get_providers()[0] == "CUDAExecutionProvider"
    else:
        with pytest.raises(JobFailed, match="no CUDAExecutionProvider") as err:
            session(minilm.src, provider="cuda")
        assert "onnxruntime-gpu" in err.value.hint
    with pytest.raises(JobFailed, match="unknown ONNX Runtime provider"):
        session(minilm.src, provider="tpu")


def test_quantizable_nodes_are_the_compute_nodes_by_module_path(minilm, digits):
    nodes = qz.quantizable_nodes(minilm.src)
    kinds = {n["op_type"] for n in nodes}
    assert kinds <= set(qz.QUANTIZABLE_OPS) and {"MatMul", "Gemm", "Gather"} <= kinds
    names = [n["name"] for n in nodes]
    assert "/model/bert/encoder/layer.0/attention/self/query/MatMul" in names
    assert sum(n["op_type"] == "MatMul" for n in nodes) == 48  # 6 layers: 6 weight MatMuls + 2 attention MatMuls
    cnn = qz.quantizable_nodes(digits.src)
    assert [n["op_type"] for n in cnn].count("Conv") == 4 and cnn[-1] == {"name": "/model/head/Gemm",
                                                                         "op_type": "Gemm"}


# ---------------------------------------------------------------- dynamic int8


def test_dynamic_int8_minilm_is_a_quarter_the_size_and_agrees(minilm, tmp_path):
    dst = tmp_path / "int8.onnx"
    report = qz.quantize_dynamic(minilm.src, dst)
    assert report["mode"] == "dynamic" and report["bytes_after"] == dst.stat().st_size
    assert report["bytes_before"] == minilm.src.stat().st_size
    assert report["bytes_after"] <= 0.30 * report["bytes_before"], report
    # 36 weight MatMuls, 2 Gemms and 3 embedding Gathers; attention's activation MatMuls stay float.
    assert report["quantized_nodes"] == 41 and report["float_nodes"] == 13 and report["excluded"] == []
    assert report["seconds"] > 0 and "MatMulInteger" in _ops(dst)
    ref, got = minilm.ref, _logits(dst, minilm.eval)
    agreement = float((ref.argmax(-1) == got.argmax(-1)).mean())
    assert agreement >= 0.75, f"agreement {agreement:.3f}, max |diff| {np.abs(ref - got).max():.4f}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8.onnx"]  # no scratch files left


def test_dynamic_int8_exclusions_keep_nodes_float(digits, tmp_path):
    first_conv = "/model/stem/stem.0/Conv"
    report = qz.quantize_dynamic(digits.src, tmp_path / "a.onnx", exclude_nodes=[first_conv])
    assert report["excluded"] == [first_conv]
    assert (report["quantized_nodes"], report["float_nodes"]) == (4, 9)  # 3 Conv + the Gemm head
    nodes = {n.name: n.op_type for n in onnx.load(str(tmp_path / "a.onnx")).graph.node}
    assert nodes[first_conv] == "Conv" and "/model/blocks/blocks.0/conv/Conv" not in nodes  # now ConvInteger
    # Without Conv, only the Gemm head is left (ORT rewrites it as MatMul + Add to quantize it)...
    report = qz.quantize_dynamic(digits.src, tmp_path / "b.onnx", exclude_op_types=["Conv"])
    assert report["quantized_nodes"] == 1 and len(report["excluded"]) == 4
    # ...and excluding the Gemm as well leaves nothing: refused, nothing written.
    with pytest.raises(JobFailed, match="nothing to quantize") as err:
        qz.quantize_dynamic(digits.src, tmp_path / "c.onnx", exclude_nodes=["/model/head/Gemm"],
                            exclude_op_types=["Conv"])
    assert "exclude fewer" in err.value.hint
    assert not (tmp_path / "c.onnx").exists()


# ---------------------------------------------------------------- static int8 (QDQ)


def _check_symmetric_qdq(path: Path) -> None:
    model = onnx.load(str(path))
    ops = _ops(path)
    assert ops.get("QuantizeLinear", 0) > 0 and ops.get("DequantizeLinear", 0) > 0, ops
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:  # what TensorRT takes: int8 with zero points 0, no int32 (bias) DQ
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            zp = inits[node.input[2]]
            assert zp.data_type == onnx.TensorProto.INT8 and not onnx.numpy_helper.to_array(zp).any(), node.name


@pytest.mark.parametrize("method", qz.METHODS)
def test_static_int8_digits_with_each_calibration_method(digits, tmp_path, method):
    dst = tmp_path / "qdq.onnx"
    report = qz.quantize_static(digits.src, dst, digits.calib, method=method)
    assert report["mode"] == "static" and report["calibration"]["samples"] == 16
    assert report["calibration"]["method"] == method
    assert (report["quantized_nodes"], report["float_nodes"]) == (13, 0)
    assert report["bytes_after"] < 0.4 * report["bytes_before"]
    _check_symmetric_qdq(dst)
    ref, got = digits.ref, _logits(dst, digits.eval)
    agreement = float((ref.argmax(-1) == got.argmax(-1)).mean())
    assert got.shape == (32, 10)
    assert agreement >= 0.8, f"agreement {agreement:.3f}, max |diff| {np.abs(ref - got).max():.4f}"


def test_static_int8_cpu_form_has_unsigned_activations(digits, tmp_path):
    dst = tmp_path / "qdq.onnx"
    report = qz.quantize_static(digits.src, dst, digits.calib, target="cpu")
    assert report["settings"]["target"] == "cpu" and report["settings"]["activation_type"] == "QUInt8"
    model = onnx.load(str(dst))
    inits = {i.name: i for i in model.graph.initializer}
    zero_points = {inits[n.input[2]].data_type for n in model.graph.node if n.op_type == "QuantizeLinear"}
    assert zero_points == {onnx.TensorProto.UINT8}  # activations: u8, the form ORT's x86 kernels fuse
    agreement = float((digits.ref.argmax(-1) == _logits(dst, digits.eval).argmax(-1)).mean())
    assert agreement >= 0.8
    with pytest.raises(JobFailed, match="unknown static int8 target"):
        qz.quantize_static(digits.src, tmp_path / "x.onnx", digits.calib, target="gpu")


def test_static_int8_exclusions_keep_nodes_float(digits, tmp_path):
    first_conv = "/model/stem/stem.0/Conv"
    report = qz.quantize_static(digits.src, tmp_path / "qdq.onnx", digits.calib, exclude_nodes=[first_conv],
                                exclude_op_types=["Gemm"])
    assert report["excluded"] == [first_conv, "/model/head/Gemm"]
    # The stem's Relu stays float too: ORT quantizes an activation only when its input is quantized.
    assert (report["quantized_nodes"], report["float_nodes"]) == (10, 3)
    model = onnx.load(str(tmp_path / "qdq.onnx"))
    inits = {i.name: i.data_type for i in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    for name in report["excluded"]:  # float weights, straight from an initializer
        assert inits[nodes[name].input[1]] == onnx.TensorProto.FLOAT


def test_static_int8_minilm_entropy_on_single_examples_of_different_lengths(minilm, tmp_path):
    # One example a feed, each padded to its own length: how the compress job feeds calibration data.
    assert len({b["input_ids"].shape for b in minilm.calib}) > 1
    dst = tmp_path / "qdq.onnx"
    report = qz.quantize_static(minilm.src, dst, minilm.calib, method="entropy", per_channel=False)
    assert report["calibration"] == {"samples": 8, "batches": 8, "method": "entropy"}
    assert report["quantized_nodes"] >= 50 and report["bytes_after"] <= 0.30 * report["bytes_before"], report
    _check_symmetric_qdq(dst)
    ops = _ops(dst)
    assert ops["Add"] > 0 and ops["LayerNormalization"] == 13  # left in float by design
    ref, got = minilm.ref, _logits(dst, minilm.eval)
    agreement = float((ref.argmax(-1) == got.argmax(-1)).mean())
    assert agreement >= 0.5, f"agreement {agreement:.3f}, max |diff| {np.abs(ref - got).max():.4f}"


def test_static_int8_cpu_form_of_a_transformer_quantizes_only_its_linear_layers(minilm, digits, tmp_path):
    """The CPU form quantizes what QAT quantizes: weighted MatMuls (and embedding tables), outputs and the
    residual stream in float. That is closer to fp32 than ONNX Runtime's everything-int8 graph."""
    only = qz.linear_nodes(minilm.src)
    ops = _ops(minilm.src)
    assert len(only) >= 36 and len(only) <= ops["MatMul"] + ops.get("Gemm", 0) + ops.get("Gather", 0)
    assert qz.linear_nodes(digits.src) == []  # a CNN keeps the whole QDQ form
    lean, full = tmp_path / "lean.onnx", tmp_path / "full.onnx"
    qz.quantize_static(minilm.src, lean, minilm.calib, target="cpu", only_nodes=only)
    qz.quantize_static(minilm.src, full, minilm.calib, target="cpu")
    ref = minilm.ref
    lean_diff = np.abs(_logits(lean, minilm.eval) - ref).max()
    full_diff = np.abs(_logits(full, minilm.eval) - ref).max()
    assert lean_diff < full_diff, (lean_diff, full_diff)
    # The residual Adds read float hidden states, not dequantized int8 ones (embedding rows are int8 tables').
    graph = onnx.load(str(lean)).graph
    producer = {o: n for n in graph.node for o in n.output}

    def rounded(name):
        dq = producer.get(name)
        return dq is not None and dq.op_type == "DequantizeLinear" and \
            getattr(producer.get(dq.input[0]), "op_type", None) == "QuantizeLinear"

    assert not [n.name for n in graph.node if n.op_type == "Add" and any(rounded(i) for i in n.input)]
    # Embedding rows are looked up in the int8 tables, then dequantized (not the whole table, each call):
    # the same logits as ORT's dequantize-then-gather.
    gathers = [n for n in graph.node if n.op_type == "Gather" and "embeddings" in n.name and "Shape" not in n.input[0]]
    inits = {i.name: i.data_type for i in graph.initializer}
    eight_bit = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    assert len(gathers) == 3 and all(inits.get(n.input[0]) in eight_bit for n in gathers), gathers
    readers = {i: n.op_type for n in graph.node for i in n.input}
    assert all(readers[n.output[0]] == "DequantizeLinear" for n in gathers)
    # Undo it (dequantize the table, then gather): the logits are the same.
    model = onnx.load(str(lean))
    rows = {n.output[0]: n for n in model.graph.node if n in gathers or n.name in {g.name for g in gathers}}
    nodes = []
    for n in model.graph.node:
        if n.name in {g.name for g in gathers}:
            continue
        if n.op_type == "DequantizeLinear" and n.input[0] in rows:
            gather = rows[n.input[0]]
            nodes += [onnx.helper.make_node("DequantizeLinear", [gather.input[0], *n.input[1:]], [f"{n.name}_table"]),
                      onnx.helper.make_node("Gather", [f"{n.name}_table", gather.input[1]], list(n.output))]
        else:
            nodes.append(n)
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    table_first = tmp_path / "table-first.onnx"
    onnx.save(model, str(table_first))
    assert np.abs(_logits(table_first, minilm.eval) - _logits(lean, minilm.eval)).max() <= 1e-6


# ---------------------------------------------------------------- fp16


def test_fp16_minilm_halves_the_size_and_stays_close(minilm, tmp_path):
    dst = tmp_path / "fp16.onnx"
    report = qz.convert_fp16(minilm.src, dst)
    assert report["mode"] == "fp16" and 0.45 <= report["bytes_after"] / report["bytes_before"] <= 0.55, report
    assert report["quantized_nodes"] > 200 and report["max_abs_diff"] < 1e-2
    model = onnx.load(str(dst))
    assert {i.type.tensor_type.elem_type for i in model.graph.input} == {onnx.TensorProto.INT64}
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # keep_io_types
    ref, got = minilm.ref, _logits(dst, minilm.eval)
    assert got.dtype == np.float32 and np.abs(ref - got).max() < 1e-2 * max(1.0, np.abs(ref).max())
    assert float((ref.argmax(-1) == got.argmax(-1)).mean()) >= 0.95


# ---------------------------------------------------------------- bad input


def _refused(fn, dst: Path, message: str, hint: str = "") -> JobFailed:
    before = sorted(p.name for p in dst.parent.iterdir())
    with pytest.raises(JobFailed) as err:
        fn()
    assert message in str(err.value), str(err.value)
    assert hint in err.value.hint, err.value.hint
    assert not dst.exists() and sorted(p.name for p in dst.parent.iterdir()) == before  # nothing half-written
    return err.value


def test_unknown_node_names_are_refused_with_valid_names_in_the_hint(digits, tmp_path):
    dst = tmp_path / "out.onnx"
    for fn in (lambda: qz.quantize_dynamic(digits.src, dst, exclude_nodes=["/model/nope/Conv"]),
               lambda: qz.quantize_static(digits.src, dst, digits.calib, exclude_nodes=["/model/nope/Conv"])):
        _refused(fn, dst, "exclude_nodes: no node named '/model/nope/Conv'", "'/model/stem/stem.0/Conv'")


def test_bad_op_types_are_refused(digits, tmp_path):
    dst = tmp_path / "out.onnx"
    _refused(lambda: qz.quantize_dynamic(digits.src, dst, exclude_op_types=["LSTM"]), dst,
             "the model has no 'LSTM' nodes", "Conv, Relu, MaxPool, GlobalAveragePool, Gemm")
    _refused(lambda: qz.quantize_static(digits.src, dst, digits.calib, exclude_op_types=["Flatten"]), dst,
             "'Flatten' nodes are not quantized on their own", "Conv")
    _refused(lambda: qz.convert_fp16(digits.src, dst, exclude_op_types=["Softmax"]), dst,
             "the model has no 'Softmax' nodes", "Conv")


def test_excluding_everything_is_refused(digits, minilm, tmp_path):
    dst = tmp_path / "out.onnx"
    every_type = sorted({n["op_type"] for n in qz.quantizable_nodes(digits.src)})
    _refused(lambda: qz.quantize_static(digits.src, dst, digits.calib, exclude_op_types=every_type), dst,
             "nothing to quantize: the static quantization left all 13 quantizable nodes in float", "exclude fewer")
    every_name = [n["name"] for n in qz.quantizable_nodes(minilm.src)]
    _refused(lambda: qz.quantize_dynamic(minilm.src, dst, exclude_nodes=every_name), dst,
             "nothing to quantize", "exclude fewer")
    present = sorted({n.op_type for n in onnx.load(str(digits.src)).graph.node})
    _refused(lambda: qz.convert_fp16(digits.src, dst, exclude_op_types=present), dst, "nothing to quantize")


def test_too_little_calibration_data_is_refused(digits, tmp_path):
    dst = tmp_path / "out.onnx"
    seven = [{"pixel_values": digits.calib[0]["pixel_values"][:7]}]
    for method in ("minmax", "entropy"):
        _refused(lambda m=method: qz.quantize_static(digits.src, dst, seven, method=m), dst,
                 "calibration data too small: 7 examples, at least 8 needed",
                 "raise calibration.samples or use a larger validation split")
    _refused(lambda: qz.quantize_static(digits.src, dst, iter([])), dst, "calibration data too small: 0 examples")
    _refused(lambda: qz.quantize_static(digits.src, dst, digits.calib, method="kl"), dst,
             "unknown calibration method 'kl'", "minmax, entropy, percentile")


def test_unreadable_sources_are_refused(digits, tmp_path):
    dst = tmp_path / "out" / "model.onnx"
    dst.parent.mkdir()
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf \xff\xfe" * 40)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for src in (junk, empty):
        for fn in (lambda s=src: qz.quantize_dynamic(s, dst), lambda s=src: qz.convert_fp16(s, dst),
                   lambda s=src: qz.quantize_static(s, dst, digits.calib), lambda s=src: qz.quantizable_nodes(s)):
            _refused(fn, dst, "is not a readable ONNX model", "export the model to ONNX again")
    _refused(lambda: qz.quantize_dynamic(tmp_path / "missing.onnx", dst), dst, "no ONNX model at")
    # Writing over the source is refused too: the source stays as it was.
    size = digits.src.stat().st_size
    with pytest.raises(JobFailed, match="is the source model"):
        qz.quantize_dynamic(digits.src, digits.src)
    assert digits.src.stat().st_size == size


def test_transformer_optimizer_fuses_minilm_and_keeps_its_logits(minilm, tmp_path):
    from engine.compress import graph_opt

    assert graph_opt.family(minilm.model) == "bert" and graph_opt.shape(minilm.model) == (12, 384)
    example = minilm.data.collate([minilm.data.val[i] for i in range(4)])
    dst = tmp_path / "fused.onnx"
    report = graph_opt.export_fused(minilm.model, "text_classification", example, dst)
    assert report["path"] == str(dst), report
    assert minilm.model.config._attn_implementation != "eager"  # exported with eager attention, then restored
    # Residual Add + LayerNormalization are not fused into SkipLayerNormalization (slower on a CPU).
    assert report["fused"] == {"EmbedLayerNormalization": 1, "Attention": 6, "BiasGelu": 6,
                               "LayerNormalization": 12}, report["fused"]
    assert report["nodes_after"] < report["nodes_before"] / 2, report
    assert report["max_abs_diff"] <= graph_opt.TOLERANCE and report["shapes"] == "symbolic"
    got = _logits(dst, minilm.eval)  # 32 real validation examples, padded batches
    assert np.abs(got - minilm.ref).max() <= 1e-4
    # Static int8's and QAT's form: the attention core fused, the q, k and v projections and the embedding
    # lookups left as nodes of their own, each quantized on its own.
    separate = tmp_path / "separate.onnx"
    report = graph_opt.export_fused(minilm.model, "text_classification", example, separate, attention="separate")
    assert report["fused"]["MultiHeadAttention"] == 6 and "Attention" not in report["fused"], report["fused"]
    assert "EmbedLayerNormalization" not in report["fused"]
    names = {n.name for n in onnx.load(str(separate)).graph.node}
    assert {"/model/bert/encoder/layer.0/attention/self/query/MatMul",
            "/model/bert/encoder/layer.0/attention/self/value/MatMul",
            "/model/bert/embeddings/word_embeddings/Gather"} <= names
    assert np.abs(_logits(separate, minilm.eval) - minilm.ref).max() <= 1e-4
    # Dynamic int8 of the packed graph quantizes the fused attention too (QAttention).
    out = tmp_path / "dyn.onnx"
    qz.quantize_dynamic(dst, out, per_channel=True)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "QAttention" in ops and "MatMulInteger" in ops, ops
    assert (_logits(out, minilm.eval).argmax(-1) == minilm.ref.argmax(-1)).mean() >= 0.9


def test_transformer_optimizer_leaves_other_models_as_exported(digits, tmp_path):
    from engine.compress import graph_opt

    report = graph_opt.optimize(digits.src, tmp_path / "fused.onnx", graph_opt.family(digits.model))
    assert report["path"] is None and "no transformer optimizer" in report["skipped"]
    report = graph_opt.optimize(digits.src, tmp_path / "fused.onnx", "bert")  # no BERT patterns in a CNN
    assert report["path"] is None and report["skipped"] == "nothing to fuse"
    assert not (tmp_path / "fused.onnx").exists()
