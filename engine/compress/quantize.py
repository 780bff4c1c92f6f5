"""ONNX Runtime post-training quantization of an exported ``model.onnx``.

Three modes, each ``(src, dst, ...) -> report``:

- ``quantize_dynamic``: int8 weights (QInt8, symmetric), activations quantized at run time
  (uint8, ORT's only choice for dynamic). No calibration data. MatMul (constant B), Conv,
  Gather (embeddings), Attention and LSTM are quantized; everything else stays float.
- ``quantize_static``: QDQ graph (QuantizeLinear/DequantizeLinear pairs), int8 weights and
  int8 activations whose ranges come from calibration batches. Made symmetric so that
  TensorRT can consume it (see ``TENSORRT_OPTIONS``); ONNX Runtime CPU runs it too.
- ``convert_fp16``: fp16 weights and compute, fp32 inputs and outputs (keep_io_types).

``quantizable_nodes`` lists the nodes a user may keep in float (``exclude_nodes``), by the
names the exporter gave them. Every function validates its input before the heavy
work, writes into a temporary folder next to ``dst`` and moves the result into place
with ``os.replace``: on any failure nothing is left at ``dst``.

reduce_range (7-bit weights): ORT suggests it for x86 CPUs without VNNI, whose u8*s8
instruction (vpmaddubsw) can saturate 16-bit sums. Measured on such a CPU (AMD EPYC, AVX2, no VNNI):

- static (default on): without it, the fused int8 kernels ORT picks (QLinearConv, QGemm)
  saturated. The digits CNN's top-1 agreement with fp32 fell to 0.56 with its optimizations
  on, against 1.0 for the same file with them off; with 7-bit weights it agreed 1.0 both
  ways. MiniLM static was no worse with it (0.67-0.81 either way). TensorRT takes 7-bit
  weights as they are, and a file made on a VNNI machine stays correct on one without.
- dynamic (default off): MatMulInteger/ConvInteger showed no saturation, and 8-bit weights
  were closer to fp32 (MiniLM, 32 examples: max abs logit diff 0.012 vs 0.032, top-1
  agreement 0.97 vs 0.91).

onnx and onnxruntime are imported inside functions (the engine imports this module).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.training.context import JobFailed

MIN_CALIBRATION_SAMPLES = 8
METHODS = ("minmax", "entropy", "percentile")
# What static (QDQ) quantization quantizes: the ops that carry the weights and the compute (MatMul, Gemm,
# Conv, embedding Gather), the CNN ops between them, and the ops that only move data (so a Q/DQ pair can
# pass through a Reshape or Transpose). Not Add, Mul, Softmax, LayerNormalization or Where, although ORT
# can: on MiniLM (symmetric int8, minmax calibration) quantizing them too dropped top-1 agreement with
# fp32 from 0.79 to 0.21 (48 validation examples). The attention-mask Add carries -3.4e38 (a per-tensor
# int8 scale of it zeroes every other value), and residual Adds and LayerNorms carry BERT's outlier channels.
STATIC_COMPUTE_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose", "Gather", "GatherElements", "Relu", "Clip",
                      "MaxPool", "AveragePool", "GlobalAveragePool", "Resize", "Pad")
STATIC_MOVE_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Split")
# What dynamic quantization quantizes (ORT's IntegerOps; Gemm is rewritten as MatMul + Add first).
DYNAMIC_OPS = ("MatMul", "Gemm", "Conv", "Gather", "Attention", "EmbedLayerNormalization", "LSTM")
WEIGHTED_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose")
# Nodes a user may keep in float: compute ops quantized in some mode. Data-movement ops follow their
# neighbours and are left out, and so is a node of these types whose inputs are not float (a Gather on a shape).
QUANTIZABLE_OPS = tuple(dict.fromkeys([*STATIC_COMPUTE_OPS, *DYNAMIC_OPS]))
# Symmetric int8 QDQ, which is what TensorRT's explicit quantization accepts:
# - ActivationSymmetric / WeightSymmetric: zero points are 0 (TensorRT supports no other);
# - QDQOpTypePerChannelSupportToAxis {"MatMul": 1}: per-channel scales along MatMul weights' output axis (N of
#   [K, N]), the axis TensorRT expects (Conv/Gemm already default to their output axis);
# - DedicatedQDQPair: every consumer gets its own Q/DQ pair ("in TRT, QDQ pair can't be shared between nodes",
#   ORT's qdq_quantizer.py);
# - QuantizeBias False: biases stay float. TensorRT's parser rejects the int32 bias DequantizeLinear ORT writes
#   otherwise ("only activation types allowed as input to this layer", onnx/onnx-tensorrt#850).
# Weights are stored as int8 behind a DequantizeLinear, which TensorRT's explicit-quantization docs accept as
# pre-quantized weights, and which keeps the file about 4x smaller for CPU use. (AddQDQPairToWeight would keep
# float weights with a Q/DQ pair, for older TensorRT releases, at the cost of the size.)
TENSORRT_OPTIONS = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
                    "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1}, "DedicatedQDQPair": True}
FP16_TOLERANCE = 1e-2  # fp16 vs fp32 max abs output difference, relative to max(1, max |fp32 output|)
_READ_HINT = "export the model to ONNX again (compress.quantize starts from the parent's exported model.onnx)."


# ---------------------------------------------------------------- reading the model


def _load(src: str | Path):
    """The ONNX model at ``src``; JobFailed when it is missing or not an ONNX model."""
    import onnx
    from google.protobuf.message import DecodeError

    src = Path(src)
    if not src.is_file():
        raise JobFailed(f"no ONNX model at {src}", _READ_HINT)
    try:
        model = onnx.load(str(src))
    except (OSError, DecodeError, ValueError, RuntimeError) as exc:
        raise JobFailed(f"{src} is not a readable ONNX model: {' '.join(str(exc).split())[:300]}", _READ_HINT) from exc
    if not model.graph.node or not model.graph.output:
        raise JobFailed(f"{src} is not a readable ONNX model: it has no graph", _READ_HINT)
    return model


def _types(model) -> dict[str, int]:
    """Element type (onnx.TensorProto enum) of every tensor whose type ONNX shape inference knows.

    Inference runs on a copy without the large initializers' data (declared as inputs instead):
    serializing a 90 MB model for it would cost seconds.
    """
    import onnx

    light = onnx.ModelProto()
    light.CopyFrom(model)
    small = []
    for init in light.graph.initializer:
        if init.raw_data and len(init.raw_data) > 4096:
            light.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        else:
            small.append(init)
    del light.graph.initializer[:]
    light.graph.initializer.extend(small)
    with contextlib.suppress(Exception):  # inference can fail on odd graphs; what is known still helps
        light = onnx.shape_inference.infer_shapes(light)
    types: dict[str, int] = {}
    for vi in (*light.graph.input, *light.graph.value_info, *light.graph.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    for init in model.graph.initializer:
        types[init.name] = init.data_type
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    types[node.output[0]] = attr.t.data_type
    return types


def _float_types():
    import onnx

    return {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def _candidates(model, types: dict[str, int] | None = None) -> list[dict[str, str]]:
    floats, types = _float_types(), _types(model) if types is None else types
    out = []
    for node in model.graph.node:
        if node.op_type not in QUANTIZABLE_OPS:
            continue
        known = [types[i] for i in node.input if i in types]
        if known and not any(t in floats for t in known):
            continue  # integer/bool data only: nothing to quantize
        out.append({"name": node.name, "op_type": node.op_type})
    return out


def quantizable_nodes(path: str | Path) -> list[dict[str, str]]:
    """Nodes of the model at ``path`` that a user may keep in float: ``[{"name", "op_type"}]`` in graph order."""
    return _candidates(_load(path))


# ---------------------------------------------------------------- checking the settings


def _check_exclusions(model, exclude_nodes, exclude_op_types,
                      types: dict[str, int] | None = None) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """(nodes, op types, candidates); JobFailed for a name or op type the model does not have."""
    nodes, op_types = list(dict.fromkeys(exclude_nodes or ())), list(dict.fromkeys(exclude_op_types or ()))
    candidates = _candidates(model, types)
    names = {n.name for n in model.graph.node}
    examples = ", ".join(repr(c["name"]) for c in candidates[:3]) or "(none)"
    unknown = [n for n in nodes if n not in names]
    if unknown:
        raise JobFailed(f"exclude_nodes: no node named {', '.join(repr(n) for n in unknown[:5])} in the model",
                        f"use names from the model's quantizable nodes, e.g. {examples}.")
    present = {n.op_type for n in model.graph.node}
    quantizable_types = list(dict.fromkeys(c["op_type"] for c in candidates))
    for op in op_types:
        if op not in present:
            raise JobFailed(f"exclude_op_types: the model has no {op!r} nodes",
                            f"op types in this model that can be quantized: {', '.join(quantizable_types)}.")
        if op not in quantizable_types:
            raise JobFailed(f"exclude_op_types: {op!r} nodes are not quantized on their own, so they cannot be excluded",
                            f"op types in this model that can be quantized: {', '.join(quantizable_types)}.")
    return nodes, op_types, candidates


def _excluded(candidates, nodes, op_types) -> list[str]:
    chosen = set(nodes)
    return [c["name"] for c in candidates if c["name"] in chosen or c["op_type"] in op_types]


def _nothing_left(candidates, excluded, mode: str) -> JobFailed:
    return JobFailed(f"nothing to quantize: the {mode} quantization left all {len(candidates)} quantizable nodes "
                     f"in float ({len(excluded)} excluded)",
                     "exclude fewer nodes or op types (exclude_nodes, exclude_op_types).")


# ---------------------------------------------------------------- writing the result


class _Output:
    """A scratch folder next to ``dst``; ``commit(file)`` moves the result to ``dst``, exit removes the rest."""

    def __init__(self, src: str | Path, dst: str | Path):
        self.src, self.dst = Path(src), Path(dst)
        if self.dst.resolve() == self.src.resolve():
            raise JobFailed(f"the output {self.dst} is the source model", "write the quantized model to a new file.")

    def __enter__(self) -> _Output:
        self.dst.parent.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix=f".{self.dst.name}-", dir=self.dst.parent))
        return self

    def path(self, name: str) -> Path:
        return self.work / name

    def commit(self, file: Path) -> int:
        os.replace(file, self.dst)
        return self.dst.stat().st_size

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


def _preprocess(src: Path, out: Path) -> tuple[Path, str]:
    """quant_pre_process (symbolic shape inference + ORT basic optimizations) into ``out``; src when it fails.

    Static quantization needs to know every tensor's type and shape to place Q/DQ
    pairs; the exporter's graph also carries shape arithmetic that this folds away.
    Symbolic inference needs ``auto_merge`` on BERT-style graphs (it stops at the
    attention mask's broadcast otherwise); plain ONNX shape inference is the fallback.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    for how, kwargs in (("symbolic", {"auto_merge": True}), ("onnx", {"skip_symbolic_shape": True})):
        try:
            quant_pre_process(str(src), str(out), **kwargs)
            return out, how
        except Exception:  # noqa: BLE001, S112 - either inference can fail on an odd graph; try the next
            continue
    return src, "none"


def _count(dst_model, candidates, fp16: bool = False) -> tuple[int, int]:
    """(quantized, float) among ``candidates`` as they appear in the written model.

    int8: a node missing from the output was replaced by its integer form (MatMulInteger,
    ConvInteger, ...). One still there runs in int8 when its data inputs (and weights) are
    int8 or come from a DequantizeLinear, and, for an op without weights (Relu, MaxPool, ...),
    its output goes on to a QuantizeLinear: a DQ in front of a float node only hands it float
    values. fp16: a node that reads or writes fp16 tensors.
    """
    import onnx

    types = _types(dst_model)
    nodes = {n.name: n for n in dst_model.graph.node}
    producer = {o: n.op_type for n in dst_model.graph.node for o in n.output}
    consumers: dict[str, set[str]] = {}
    for n in dst_model.graph.node:
        for i in n.input:
            consumers.setdefault(i, set()).add(n.op_type)
    low = {onnx.TensorProto.FLOAT16} if fp16 else {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}

    def int8(name: str) -> bool:
        return producer.get(name) == "DequantizeLinear" or types.get(name) in low

    done = 0
    for c in candidates:
        node = nodes.get(c["name"])
        if node is None and c["op_type"] == "Gemm":
            node = nodes.get(f"{c['name']}_MatMul")  # dynamic mode's Gemm -> MatMul + Add, left float
        if node is None:
            done += not fp16
        elif fp16:
            done += any(types.get(t) in low for t in (*node.input, *node.output) if t)
        elif node.op_type in WEIGHTED_OPS:
            done += all(int8(i) for i in node.input[:2] if i)
        elif node.op_type in ("Gather", "GatherElements"):
            done += int8(node.input[0])
        else:
            done += int8(node.input[0]) and any("QuantizeLinear" in consumers.get(o, ()) for o in node.output)
    return done, len(candidates) - done


def _report(mode: str, src: Path, size_after: int, counts: tuple[int, int], excluded: list[str], started: float,
            **extra: Any) -> dict[str, Any]:
    return {"mode": mode, "bytes_before": src.stat().st_size, "bytes_after": size_after,
            "quantized_nodes": counts[0], "float_nodes": counts[1], "excluded": excluded,
            **extra, "seconds": round(time.monotonic() - started, 3)}


# ---------------------------------------------------------------- the three modes


def quantize_dynamic(src: str | Path, dst: str | Path, exclude_nodes: Iterable[str] = (),
                     exclude_op_types: Iterable[str] = (), per_channel: bool = False,
                     reduce_range: bool = False) -> dict[str, Any]:
    """int8 weights, activations quantized at run time; the report says what was quantized."""
    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    started = time.monotonic()
    src = Path(src)
    model = _load(src)
    nodes, op_types, candidates = _check_exclusions(model, exclude_nodes, exclude_op_types)
    excluded = _excluded(candidates, nodes, op_types)
    ops = [op for op in IntegerOpsRegistry if op not in op_types]
    # ORT's dynamic mode rewrites every Gemm as "<name>_MatMul" + "<name>_Add" before quantizing the MatMul
    # (so Gemm counts as quantizable when MatMul is); an excluded Gemm is excluded under its new name.
    kinds = {*ops, "Gemm"} if "MatMul" in ops else set(ops)
    if not [c for c in candidates if c["op_type"] in kinds and c["name"] not in excluded]:
        raise _nothing_left(candidates, excluded, "dynamic")
    gemms = {c["name"] for c in candidates if c["op_type"] == "Gemm"}
    skip = list(dict.fromkeys([*nodes, *excluded, *(f"{n}_MatMul" for n in excluded if n in gemms)]))
    with _Output(src, dst) as out:
        # No pre-processing: dynamic quantization needs only the weights (constant MatMul B inputs, Conv and
        # Gather initializers), so shape inference would cost seconds and change nothing.
        result = out.path("model.onnx")
        try:
            ort_quantize_dynamic(str(src), str(result), op_types_to_quantize=ops, per_channel=per_channel,
                                 reduce_range=reduce_range, weight_type=QuantType.QInt8, nodes_to_exclude=skip,
                                 # A fused graph's com.microsoft ops are unknown to ONNX shape inference: the
                                 # tensors after them are float (graph_opt keeps every activation float).
                                 extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        except Exception as exc:  # ORT's quantizer raises plain exceptions for graphs it cannot handle
            raise JobFailed(f"dynamic quantization failed: {' '.join(str(exc).split())[:400]}",
                            "keep the node it names in float with exclude_nodes, or report this with the "
                            "run's spec.yaml.") from exc
        counts = _count(onnx.load(str(result)), candidates)
        if counts[0] == 0:
            raise _nothing_left(candidates, excluded, "dynamic")
        size = out.commit(result)
    return _report("dynamic", src, size, counts, excluded, started,
                   settings={"weight_type": "QInt8", "activation_type": "QUInt8 (dynamic)",
                             "per_channel": per_channel, "reduce_range": reduce_range})


class _FeedReader:
    """CalibrationDataReader over a list of feed dicts (ORT asks ``get_next`` until it returns None)."""

    def __init__(self, batches: list[dict[str, Any]]):
        self.batches = batches
        self.rewind()

    def get_next(self) -> dict[str, Any] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self.batches)


def _calibration_batches(model, calibration_feeds: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The feeds as ORT inputs of the model's dtypes, and how many examples they hold."""
    import numpy as np
    import onnx

    inits = {i.name for i in model.graph.initializer}
    wanted = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
              for i in model.graph.input if i.name not in inits}
    batches, samples = [], 0
    for i, feed in enumerate(calibration_feeds or ()):
        if not isinstance(feed, dict):
            raise JobFailed(f"calibration batch {i} is a {type(feed).__name__}, not a dict of model inputs",
                            f"pass dicts of {', '.join(wanted)} (engine.compress.onnx_export.feeds builds them).")
        missing = [k for k in wanted if k not in feed]
        if missing:
            raise JobFailed(f"calibration batch {i} has no {', '.join(missing)}",
                            f"the model's inputs are {', '.join(wanted)}; build batches with onnx_export.feeds.")
        batch = {}
        for k, dtype in wanted.items():
            value = feed[k].detach().cpu().numpy() if hasattr(feed[k], "detach") else feed[k]
            batch[k] = np.ascontiguousarray(value, dtype=dtype)
        batches.append(batch)
        first = next(iter(batch.values()))
        samples += int(first.shape[0]) if first.ndim else 1
    return batches, samples


def _same_shape(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Single examples, zero-padded (ids, masks) to one shape.

    ORT's histogram calibrators (entropy, percentile) stack each tensor's values from every
    batch with np.asarray, which fails when batches differ in size or sequence length.
    """
    import numpy as np

    target = {k: tuple(max(b[k].shape[d] for b in batches) for d in range(1, batches[0][k].ndim))
              for k in batches[0]}
    out = []
    for b in batches:
        padded = {k: np.pad(v, [(0, 0), *((0, t - s) for s, t in zip(v.shape[1:], target[k], strict=True))])
                  for k, v in b.items()}
        n = next(iter(padded.values())).shape[0]
        out += [{k: v[i:i + 1] for k, v in padded.items()} for i in range(n)]
    return out


def quantize_static(src: str | Path, dst: str | Path, calibration_feeds: Iterable[dict[str, Any]],
                    method: str = "minmax", exclude_nodes: Iterable[str] = (), exclude_op_types: Iterable[str] = (),
                    per_channel: bool = True, reduce_range: bool = True, target: str = "tensorrt",
                    only_nodes: Iterable[str] = (), overrides: dict[str, list[dict[str, Any]]] | None = None,
                    ) -> dict[str, Any]:
    """Calibrated int8 QDQ; ``calibration_feeds`` are ORT feed dicts (batches).

    ``only_nodes`` (QAT): quantize these MatMul/Gemm/Gather nodes and nothing else, with biases and
    MatMul outputs in float;
    ``overrides`` (ORT's TensorQuantOverrides) fixes tensors' scales and zero points instead of
    calibrating them.

    ``target`` "tensorrt": symmetric int8 activations and weights, the form TensorRT takes (ONNX Runtime
    on a CPU runs it, slowly). "cpu": unsigned asymmetric activations with signed weights (U8S8), the
    form ONNX Runtime's x86 kernels fuse; measured on MiniLM here: b1 0.74x fp32 latency against 4.7x
    for the TensorRT form.
    """
    import onnx
    from onnxruntime import quantization as ortq

    started = time.monotonic()
    src = Path(src)
    if method not in METHODS:
        raise JobFailed(f"unknown calibration method {method!r}", f"use one of: {', '.join(METHODS)}.")
    if target not in ("tensorrt", "cpu"):
        raise JobFailed(f"unknown static int8 target {target!r}", "use tensorrt or cpu.")
    model = _load(src)
    types = _types(model)
    nodes, op_types, candidates = _check_exclusions(model, exclude_nodes, exclude_op_types, types)
    batches, samples = _calibration_batches(model, calibration_feeds)
    if samples < MIN_CALIBRATION_SAMPLES:
        raise JobFailed(f"calibration data too small: {samples} examples, at least {MIN_CALIBRATION_SAMPLES} needed",
                        "raise calibration.samples or use a larger validation split.")
    only = list(dict.fromkeys(only_nodes or ()))
    ops = [op for op in ((*STATIC_COMPUTE_OPS, *STATIC_MOVE_OPS) if not only else ("MatMul", "Gemm", "Gather"))
           if op not in op_types]
    excluded = _excluded(candidates, nodes, op_types)
    if only:
        unknown = [n for n in only if n not in {c["name"] for c in candidates}]
        if unknown:
            raise JobFailed(f"only_nodes: no quantizable node named {unknown[0]!r} in the model",
                            "report this with the run's spec.yaml.")
        candidates = [c for c in candidates if c["name"] in only]
    if not [c for c in candidates if c["op_type"] in ops and c["name"] not in excluded]:
        raise _nothing_left(candidates, excluded, "static")
    # The quantizer places Q/DQ pairs only on tensors whose type and shape ONNX shape inference found.
    # The TorchScript exporter's graphs are fully typed (pre-processing them changed nothing: same nodes
    # quantized, same outputs, 2x the time), so quant_pre_process runs only when some are not.
    untyped = {n.name for n in model.graph.node if any(i and i not in types for i in n.input)}
    del types
    with _Output(src, dst) as out:
        pre, inference = src, "onnx"
        if any(c["name"] in untyped for c in candidates):
            pre, inference = _preprocess(src, out.path("pre.onnx"))
        if pre != src:  # pre-processing folds nodes away: count what is left
            candidates = [c for c in _candidates(onnx.load(str(pre))) if not only or c["name"] in only]
            excluded = _excluded(candidates, nodes, op_types)
        del model

        class Reader(_FeedReader, ortq.CalibrationDataReader):
            pass

        if method != "minmax":
            batches = _same_shape(batches)
        result = out.path("model.onnx")
        if target == "tensorrt":
            activations, options = ortq.QuantType.QInt8, dict(TENSORRT_OPTIONS)
        else:
            activations, options = ortq.QuantType.QUInt8, {"ActivationSymmetric": False, "WeightSymmetric": True}
        if only:
            # What QAT trained: int8 inputs and weights, float biases and float MatMul outputs (ORT would
            # otherwise round each output to int8 as well, with a calibrated range the training never saw).
            options["QuantizeBias"] = False
            options["OpTypesToExcludeOutputQuantization"] = ["MatMul", "Gemm"]
        if overrides:
            options["TensorQuantOverrides"] = overrides
        calibrate = {"minmax": ortq.CalibrationMethod.MinMax, "entropy": ortq.CalibrationMethod.Entropy,
                     "percentile": ortq.CalibrationMethod.Percentile}[method]
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the calibrators print progress lines
                ortq.quantize_static(str(pre), str(result), Reader(batches), quant_format=ortq.QuantFormat.QDQ,
                                     op_types_to_quantize=ops, per_channel=per_channel, reduce_range=reduce_range,
                                     nodes_to_quantize=only or None,
                                     activation_type=activations, weight_type=ortq.QuantType.QInt8,
                                     nodes_to_exclude=list(dict.fromkeys([*nodes, *excluded])),
                                     calibrate_method=calibrate, extra_options=options)
        except Exception as exc:  # ORT raises plain exceptions (and InvalidArgument) for feeds that do not fit
            raise JobFailed(f"static quantization failed: {' '.join(str(exc).split())[:400]}",
                            "check that the calibration batches come from the same task and tokenizer as the "
                            "model; report this with the run's spec.yaml if they do.") from exc
        written = onnx.load(str(result))
        if only:
            _float_elsewhere(written, set(only))
        if target == "cpu":
            _lookup_then_dequantize(written)
        if only or target == "cpu":
            onnx.save(written, str(result))
        counts = _count(written, candidates)
        if counts[0] == 0:
            raise _nothing_left(candidates, excluded, "static")
        size = out.commit(result)
    return _report("static", src, size, counts, excluded, started,
                   calibration={"samples": samples, "batches": len(batches), "method": method},
                   settings={"format": "QDQ", "target": target, "weight_type": "QInt8",
                             "activation_type": "QInt8" if target == "tensorrt" else "QUInt8",
                             "symmetric": target == "tensorrt", "per_channel": per_channel, "reduce_range": reduce_range,
                             "shape_inference": inference})


def linear_nodes(path: str | Path) -> list[str]:
    """A transformer's weighted MatMul/Gemm nodes and embedding lookups (what QAT quantizes); [] for a CNN.

    Static int8's CPU form quantizes these and nothing else: ONNX Runtime's QDQ quantizer would also round
    every MatMul output and the residual stream to int8, which costs accuracy and saves no work there
    (measured on MiniLM: logits 3x closer to fp32 at the same speed).
    """
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    if any(n.op_type == "Conv" for n in graph.node):
        return []
    inits = {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    return [n.name for n in graph.node
            if (n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in inits)
            or (n.op_type == "Gather" and n.input[0] in inits)]


def _float_elsewhere(model, quantized: set[str]) -> int:
    """Give every consumer of a quantized activation that is not itself quantized the float tensor again.

    ORT rewires all consumers of a tensor to its DequantizeLinear output when one quantized
    node reads it: a transformer's residual Add then adds int8-rounded hidden states, which
    QAT never trained with (it rounds only what enters a Linear) and which costs accuracy
    without saving any work (the Add runs in float either way). Returns how many inputs
    were rewired; the model is changed in place.
    """
    producer = {o: n for n in model.graph.node for o in n.output}
    rewired = 0
    for node in model.graph.node:
        if node.name in quantized or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for i, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = producer.get(dq.input[0])
            if q is None or q.op_type != "QuantizeLinear":
                continue  # a weight stored as int8: no float tensor to go back to
            node.input[i] = q.input[0]
            rewired += 1
    return rewired


def _lookup_then_dequantize(model) -> int:
    """Look up embedding rows in the int8 table and dequantize the rows, not the table.

    ORT's QDQ graph dequantizes a quantized embedding table in full and then gathers from it:
    MiniLM's 30,522 x 384 word table is 11.7M values dequantized on every call (about 6 ms of a
    24 ms batch of 16, measured). With a per-tensor scale,
    Gather then DequantizeLinear gives the same values. Returns how many lookups were rewritten;
    the model is changed in place.
    """
    import onnx

    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    readers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    rewritten, new_nodes = 0, []
    for node in model.graph.node:
        new_nodes.append(node)
        dq = producer.get(node.input[0]) if node.op_type == "Gather" else None
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
            continue
        scale = inits.get(dq.input[1])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if scale is None or list(scale.dims) not in ([], [1]) or axis != 0:
            continue  # per-channel scales would have to be gathered too
        if any(r.op_type != "Gather" or r.input[0] != node.input[0] for r in readers[node.input[0]]):
            continue  # something else reads the float table
        rows = f"{node.output[0]}_int8"
        new_nodes[-1] = onnx.helper.make_node("Gather", [dq.input[0], node.input[1]], [rows], name=node.name,
                                              axis=axis)
        new_nodes.append(onnx.helper.make_node("DequantizeLinear", [rows, *dq.input[1:]], list(node.output),
                                               name=f"{node.name}_DequantizeLinear"))
        rewritten += 1
    if rewritten:  # drop the tables' DequantizeLinear nodes nothing reads any more
        used = {i for n in new_nodes for i in n.input} | {o.name for o in model.graph.output}
        del model.graph.node[:]
        model.graph.node.extend(n for n in new_nodes if n.op_type != "DequantizeLinear" or n.output[0] in used)
    return rewritten


def probe_feeds(model, batch: int = 2, seq: int = 8, pad: bool = True) -> dict[str, Any]:
    """Made-up inputs that fit the model: normal floats, small ids, zeros for token types, and masks whose
    rows after the first end in padding (a third of the sequence, with ``pad``), so masked attention is
    exercised."""
    import numpy as np
    import onnx

    rng = np.random.default_rng(0)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        shape = [d.dim_value if d.dim_value > 0 else (batch if i == 0 else seq) for i, d in enumerate(dims)]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in vi.name:
            mask = np.ones(shape, dtype)
            if pad and len(shape) == 2 and shape[1] >= 3:
                mask[1:, shape[1] - shape[1] // 3:] = 0
            out[vi.name] = mask
        elif "type" in vi.name or "position" in vi.name:
            out[vi.name] = np.zeros(shape, dtype)
        else:
            out[vi.name] = rng.integers(1, 100, shape).astype(dtype)
    return out


def convert_fp16(src: str | Path, dst: str | Path, exclude_op_types: Iterable[str] = ()) -> dict[str, Any]:
    """fp16 weights and compute with fp32 inputs/outputs; checked against the fp32 model in ONNX Runtime CPU.

    Uses onnxruntime.transformers.float16 (ships with onnxruntime; onnxconverter-common is not
    installed and not needed). ``exclude_op_types`` stay in fp32 on top of its default block list.
    """
    import numpy as np
    import onnx
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    from engine.compress.onnx_export import session

    started = time.monotonic()
    src = Path(src)
    model = _load(src)
    op_types = list(dict.fromkeys(exclude_op_types or ()))
    present = list(dict.fromkeys(n.op_type for n in model.graph.node))
    for op in op_types:
        if op not in present:
            raise JobFailed(f"exclude_op_types: the model has no {op!r} nodes",
                            f"op types in this model: {', '.join(present)}.")
    floats, types = _float_types(), _types(model)
    candidates = [{"name": n.name, "op_type": n.op_type} for n in model.graph.node
                  if n.op_type not in ("Cast", "Constant")
                  and any(types.get(t) in floats for t in (*n.input, *n.output) if t)]
    excluded = [c["name"] for c in candidates if c["op_type"] in op_types]
    if len(excluded) == len(candidates):
        raise _nothing_left(candidates, excluded, "fp16")
    with _Output(src, dst) as out:
        half = convert_float_to_float16(model, keep_io_types=True, op_block_list=[*DEFAULT_OP_BLOCK_LIST, *op_types])
        result = out.path("model.onnx")
        onnx.save(half, str(result))
        counts = _count(half, candidates, fp16=True)
        del half
        if counts[0] == 0:
            raise _nothing_left(candidates, excluded, "fp16")
        probe = probe_feeds(model, pad=False)
        ref = session(src).run(None, probe)
        got = session(result).run(None, probe)
        diff, scale = 0.0, 1.0
        for a, b in zip(ref, got, strict=True):
            a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
            if not np.isfinite(b).all() and np.isfinite(a).all():
                diff = float("inf")
                break
            diff = max(diff, float(np.abs(a - b).max()) if a.size else 0.0)
            scale = max(scale, float(np.abs(a).max()) if a.size else 0.0)
        if not diff <= FP16_TOLERANCE * scale:
            raise JobFailed(f"the fp16 model's outputs differ from fp32 by {diff:.3g} "
                            f"(tolerance {FP16_TOLERANCE * scale:.3g}): some values overflow or lose too much in fp16",
                            "keep the sensitive op types in fp32 with exclude_op_types (e.g. Softmax, "
                            "LayerNormalization, Pow, ReduceMean), or use int8 instead.")
        size = out.commit(result)
    return _report("fp16", src, size, counts, excluded, started, max_abs_diff=diff,
                   settings={"keep_io_types": True})
