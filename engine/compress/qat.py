"""Quantization-aware training: fake int8 exactly where, and exactly as, the deployed ONNX graph quantizes.

QAT only helps when the training sees the rounding the deployed model will do. The
deployed model is ONNX Runtime's static QDQ graph (``engine.compress.quantize``), so
the layers it quantizes are swapped, in place and with the same parameters, for
fake-quantized ones that apply ONNX Runtime's own arithmetic
(``onnxruntime.quantization.quant_utils``):

- ``nn.Linear`` (outside the classification head) -> ``FakeQuantLinear``:
  weights symmetric, one scale per output feature (ORT's MatMul channel axis 1 of the
  exported ``[in, out]`` weight), recomputed from the current weights at every step as
  ORT computes it from the final ones: ``scale = 2 * max|w| / (qmax - qmin)`` on
  [-64, 64] with ``reduce_range`` (7-bit, the default: x86 CPUs without VNNI saturate
  16-bit sums of 8-bit products) or [-127, 127] without. The input: one scale and zero
  point per tensor from a MinMax calibration on the same training examples
  post-training quantization uses (``calibrate``), then held fixed, so the training
  adapts to the very ranges the int8 graph carries. The form follows the target:
  "cpu" = uint8 asymmetric on [0, 255] (ONNX Runtime's x86 U8S8 kernels), "tensorrt"
  = int8 symmetric on [-127, 127].
- ``nn.Embedding`` -> ``FakeQuantEmbedding``: the table stored in int8, per tensor, in
  the activations' form (ORT quantizes a Gather's table like an activation), its range
  the table's own min and max at every step. This is what makes the file 4x smaller.

Rounding is ``round(x / scale)``, half to even, in both (``fake_quantize``: a division as ONNX Runtime
divides, not torch's multiplication by 1 / scale), and gradients pass straight through inside the range.

``deployment`` then says, for the float ONNX export of the trained model, which
MatMul/Gemm/Gather nodes to quantize (those of the fake-quantized layers, found by
their weights, so the mapping does not depend on the exporter's node names) and the
scale and zero point of each input and table, passed to ONNX Runtime as
``TensorQuantOverrides``. ``quantize_static(only_nodes=...)`` quantizes those and
nothing else: no MatMul outputs, no biases, and the residual stream that also reads
a quantized tensor gets the float tensor back (``quantize._float_elsewhere``), as in
the training. Post-training static quantization rounds all three as well.

Why the torchao version (until this module) lost 3.1 points on the bench: it trained
8-bit weights and per-token activations, while the deployed graph had 7-bit weights
(``reduce_range``), per-tensor activations in the TensorRT form (symmetric int8, which
costs 2.5 points as plain PTQ), int8 MatMul outputs and a quantized residual stream.

Conv2d layers (the image models) and GPT-2's ``Conv1D`` projections are not covered;
``prepare_qat`` refuses a model with no Linear layers outside its head.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.training.context import JobFailed

if TYPE_CHECKING:
    import torch

# Parts of a qualified module name that mark the classification head (kept in float).
HEAD_PARTS = frozenset({"classifier", "pre_classifier", "score", "lm_head", "head"})
# Top-level module names that are the head of one architecture: torchvision ResNet's fc.
HEAD_ROOTS = frozenset({"fc"})
TARGETS = ("cpu", "tensorrt")


def is_head(name: str) -> bool:
    """Whether the module at ``name`` belongs to the classification head (stays unquantized)."""
    parts = name.split(".")
    return bool(HEAD_PARTS.intersection(parts)) or name in HEAD_ROOTS


@dataclass(frozen=True)
class Scheme:
    """The int8 form of the deployed graph: ``quantize.quantize_static``'s target and reduce_range."""

    target: str = "cpu"
    reduce_range: bool = True

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise JobFailed(f"unknown QAT target {self.target!r}", f"use one of: {', '.join(TARGETS)}.")

    @property
    def weight_range(self) -> tuple[int, int]:
        return (-64, 64) if self.reduce_range else (-127, 127)

    @property
    def activation_range(self) -> tuple[int, int]:
        return (0, 255) if self.target == "cpu" else (-127, 127)

    @property
    def activation_symmetric(self) -> bool:
        return self.target == "tensorrt"


def _fake_types() -> tuple[type, type]:
    """(FakeQuantLinear, FakeQuantEmbedding), defined on first use (torch is imported inside functions only)."""
    global _FAKE
    if _FAKE is None:
        _FAKE = _define_fakes()
    return _FAKE


_FAKE: tuple[type, type] | None = None
# Percentile calibration: each layer's range holds this share of its inputs' values (ONNX Runtime's default
# for its percentile calibrator), estimated from up to PERCENTILE_SAMPLE values per example.
PERCENTILE = 99.999
PERCENTILE_SAMPLE = 4096
CALIBRATION_METHODS = ("minmax", "percentile")


@functools.lru_cache(maxsize=64)
def _sample_positions(numel: int) -> Any:
    """Up to PERCENTILE_SAMPLE positions of a flattened input of ``numel`` values, the same for every layer:
    layers reading one tensor (q, k, v) get the same sample, hence the same range, as the deployed graph's
    one scale per tensor requires; and the permutation is drawn once per size, not per layer and call."""
    import torch

    return torch.randperm(numel, generator=torch.Generator().manual_seed(numel))[:PERCENTILE_SAMPLE]


def _define_fakes() -> tuple[type, type]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class FakeQuantLinear(nn.Linear):
        """An nn.Linear whose input and weight pass through ONNX Runtime's int8 rounding (straight-through)."""

        def setup(self, scheme: Scheme) -> None:
            self.scheme = scheme
            # Not in the state dict: the plain model's keys stay as they are; trained_layers() reads them.
            self.register_buffer("act_scale", torch.ones(()), persistent=False)
            self.register_buffer("act_zero", torch.zeros((), dtype=torch.int32), persistent=False)
            self.observing = False  # calibration: float forward, min/max recorded
            self.calibrated = False
            self.seen_min = self.seen_max = None
            self.samples: list[torch.Tensor] | None = None  # percentile calibration: a sample of the inputs

        def weight_scale(self) -> torch.Tensor:
            qmin, qmax = self.scheme.weight_range
            absmax = self.weight.detach().abs().amax(dim=1).double()
            scale = (2 * absmax / (qmax - qmin)).float()
            return torch.where(scale < torch.finfo(torch.float32).tiny, torch.ones_like(scale), scale)

        def fake_weight(self) -> torch.Tensor:
            qmin, qmax = self.scheme.weight_range
            scale = self.weight_scale()
            zero = torch.zeros(scale.shape, dtype=torch.int32, device=scale.device)
            return fake_quantize(self.weight, scale.view(-1, 1), zero.view(-1, 1), qmin, qmax)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.observing:
                lo, hi = x.detach().min().float(), x.detach().max().float()
                self.seen_min = lo if self.seen_min is None else torch.minimum(self.seen_min, lo)
                self.seen_max = hi if self.seen_max is None else torch.maximum(self.seen_max, hi)
                if self.samples is not None:
                    flat = x.detach().float().flatten()
                    self.samples.append(flat[_sample_positions(flat.numel())])
                return F.linear(x, self.weight, self.bias)
            if not self.calibrated:
                raise JobFailed("a fake-quantized layer was run before calibration",
                                "call engine.compress.qat.calibrate on the prepared model first.")
            qmin, qmax = self.scheme.activation_range
            x = fake_quantize(x, self.act_scale.to(x.device), self.act_zero.to(x.device), qmin, qmax)
            return F.linear(x, self.fake_weight(), self.bias)

        def set_range(self, rmin: float, rmax: float) -> None:
            """ORT's compute_scale_zp for this input's calibrated range."""
            scale, zero = activation_params(rmin, rmax, self.scheme)
            self.act_scale.fill_(scale)
            self.act_zero.fill_(zero)
            self.calibrated = True

        def deployed(self) -> tuple[float, int]:
            return float(self.act_scale), int(self.act_zero)

    class FakeQuantEmbedding(nn.Embedding):
        """An nn.Embedding whose table is stored in int8 once deployed: per tensor, in the activations' form
        (ONNX Runtime quantizes a Gather's table as it quantizes activations), full 8-bit range."""

        def setup(self, scheme: Scheme) -> None:
            self.scheme = scheme

        def deployed(self) -> tuple[float, int]:
            w = self.weight.detach()
            return activation_params(float(w.min()), float(w.max()), self.scheme)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            qmin, qmax = self.scheme.activation_range
            scale, zero = self.deployed()
            table = fake_quantize(self.weight, torch.tensor(scale, dtype=self.weight.dtype, device=self.weight.device),
                                  torch.tensor(zero, device=self.weight.device), qmin, qmax)
            return F.embedding(ids, table, self.padding_idx, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.sparse)

    return FakeQuantLinear, FakeQuantEmbedding


def fake_quantize(x: Any, scale: Any, zero: Any, qmin: int, qmax: int) -> Any:
    """int8 rounding as ONNX Runtime does it: ``clamp(round(x / scale) + zero)``, then ``(q - zero) * scale``.

    A division, not torch.fake_quantize_*'s multiplication by 1 / scale: the two differ in the last bit, which
    flips values lying on a rounding boundary (on an AVX-512 machine, enough of them that the int8 graph and
    the trained model disagreed on 6% of the predictions). The gradient passes straight through inside the
    range and is zero where the value was clamped, as torch's fake quantization does.
    """
    unclamped = (x / scale).round() + zero  # half to even, as numpy and QuantizeLinear
    inside = ((unclamped >= qmin) & (unclamped <= qmax)).to(x.dtype)
    rounded = (unclamped.clamp(qmin, qmax) - zero) * scale
    return x * inside + (rounded - x * inside).detach()


def activation_params(rmin: float, rmax: float, scheme: Scheme) -> tuple[float, int]:
    """(scale, zero point) of a calibrated range, as onnxruntime.quantization.quant_utils.compute_scale_zp does."""
    import numpy as np

    qmin, qmax = scheme.activation_range
    rmin, rmax = min(float(rmin), 0.0), max(float(rmax), 0.0)
    if scheme.activation_symmetric:
        absmax = max(abs(rmin), abs(rmax))
        rmin, rmax = -absmax, absmax
    scale = (rmax - rmin) / float(qmax - qmin)  # float64, as ORT, then stored as float32
    if np.float32(scale) < np.finfo(np.float32).tiny:
        return 1.0, 0
    if scheme.activation_symmetric:
        zero = int(np.round((qmin + qmax) / 2.0))
    else:
        zero = int(np.round(qmin - rmin / scale))
    return float(np.float32(scale)), zero


def prepare_qat(model: torch.nn.Module, scheme: Scheme | None = None) -> torch.nn.Module:
    """Turn the model's Linear layers and embedding tables (not the head's) into their fake-quantized forms,
    in place; returns the model. Calling it on a model that is already prepared changes nothing."""
    from torch import nn

    scheme = scheme or Scheme()
    linear, embedding = _fake_types()
    if any(isinstance(m, (linear, embedding)) for m in model.modules()):
        return model
    linears = [m for name, m in model.named_modules() if type(m) is nn.Linear and not is_head(name)]
    if not linears:
        found = sorted({type(m).__name__ for m in model.modules() if type(m).__name__ in ("Conv1D", "Conv2d")})
        also = f" (its {' and '.join(found)} layers are not covered by QAT)" if found else ""
        raise JobFailed(f"{type(model).__name__} has no nn.Linear layers outside its head to train with fake "
                        f"quantization{also}",
                        "QAT covers nn.Linear layers; quantize this model after training with "
                        "compress.quantize (static int8) instead.")
    tables = [m for name, m in model.named_modules() if type(m) is nn.Embedding and not is_head(name)]
    for modules, fake in ((linears, linear), (tables, embedding)):
        for m in modules:
            m.__class__ = fake  # same parameters, same state-dict keys; only forward changes
            m.setup(scheme)
    return model


def fake_quant_modules(model: torch.nn.Module) -> int:
    """How many fake-quantized Linear layers and embedding tables the model has."""
    return len(_fakes(model))


def _fakes(model: torch.nn.Module) -> list[tuple[str, Any]]:
    fakes = _fake_types()
    return [(name, m) for name, m in model.named_modules() if isinstance(m, fakes)]


def _linears(model: torch.nn.Module) -> list[tuple[str, Any]]:
    linear, _ = _fake_types()
    return [(name, m) for name, m in model.named_modules() if isinstance(m, linear)]


def calibrate(model: torch.nn.Module, batches: Iterable[dict[str, Any]], method: str = "minmax") -> int:
    """Ranges of every fake-quantized layer's input over ``batches`` (float forward); returns the count.

    ``method`` "minmax": the smallest and largest value seen; "percentile": the range that holds
    ``PERCENTILE`` % of the values (the rest are clipped), which keeps a transformer's few outlier
    activations from taking most of the 256 steps. ``batches`` are the model's keyword inputs (torch
    tensors): the same examples ONNX Runtime's calibration would see.
    """
    import torch

    if method not in CALIBRATION_METHODS:
        raise JobFailed(f"QAT calibrates with {' or '.join(CALIBRATION_METHODS)}, not {method!r}",
                        "set calibration.method to minmax or percentile.")
    layers = _linears(model)
    if not layers:
        raise JobFailed("calibrate: the model has no fake-quantized layers", "call prepare_qat first.")
    for _, m in layers:
        m.observing, m.seen_min, m.seen_max = True, None, None
        m.samples = [] if method == "percentile" else None
    was_training = model.training
    model.eval()
    n = 0
    try:
        with torch.no_grad():
            for batch in batches:
                if set(batch) == {"pixel_values"}:
                    model(batch["pixel_values"])  # torchvision models take the image positionally
                else:
                    model(**batch)
                n += 1
    finally:
        for _, m in layers:
            m.observing = False
        model.train(was_training)
    if n == 0:
        raise JobFailed("calibration got no examples", "raise calibration.samples or check the training split.")
    for name, m in layers:
        if m.seen_min is None:
            raise JobFailed(f"calibration never reached layer {name}", "report this with the run's spec.yaml.")
        lo, hi = float(m.seen_min), float(m.seen_max)
        if m.samples:
            values = torch.cat(m.samples).sort().values  # (torch.quantile refuses over 16M values)
            cut = int((100.0 - PERCENTILE) / 100.0 * (values.numel() - 1))
            lo, hi = float(values[cut]), float(values[values.numel() - 1 - cut])
        m.samples = None
        m.set_range(lo, hi)
    return n


def _digest(array: Any) -> str:
    import numpy as np

    a = np.ascontiguousarray(array, dtype=np.float32)
    return f"{a.shape}:{hashlib.blake2b(a.tobytes(), digest_size=16).hexdigest()}"


@dataclass(frozen=True)
class TrainedLayer:
    """One fake-quantized layer as trained: its weight's digest and the scale and zero point of its input
    (a Linear) or of its table (an embedding)."""

    name: str
    kind: str  # "linear" | "embedding"
    digest: str
    scale: float
    zero: int
    target: str


def trained_layers(model: torch.nn.Module) -> list[TrainedLayer]:
    """The fake-quantized layers' quantization as trained (call before ``convert_qat``)."""
    linear, _ = _fake_types()
    out = []
    for name, m in _fakes(model):
        scale, zero = m.deployed()
        out.append(TrainedLayer(name, "linear" if isinstance(m, linear) else "embedding",
                                _digest(m.weight.detach().cpu().numpy()), scale, zero, m.scheme.target))
    return out


@dataclass(frozen=True)
class Deployment:
    """What quantize_static needs to write the trained int8 graph: which nodes, and each tensor's scale."""

    nodes: list[str]  # MatMul/Gemm/Gather node names to quantize (nothing else is)
    overrides: dict[str, list[dict[str, Any]]]  # TensorQuantOverrides: tensor -> scale, zero point
    layers: dict[str, str]  # module name -> ONNX node name, for the report


def deployment(layers: list[TrainedLayer], float_onnx: Any) -> Deployment:
    """Match each trained layer to its node in ``float_onnx`` (the export of the same weights) by its
    weight; JobFailed when one is missing, since the int8 graph would then differ from what was trained."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(float_onnx)).graph
    inits = {i.name: i for i in graph.initializer}
    digests: dict[tuple[str, str], Any] = {}
    for node in graph.node:
        if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 and node.input[1] in inits:
            w = numpy_helper.to_array(inits[node.input[1]])
            trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
            # As torch's [out, in] weight: MatMul (and Gemm without transB) hold [in, out].
            digests.setdefault(("linear", _digest(w if trans_b else w.T)), node)
        elif node.op_type == "Gather" and node.input[0] in inits:
            digests.setdefault(("embedding", _digest(numpy_helper.to_array(inits[node.input[0]]))), node)
    nodes, overrides, found, missing = [], {}, {}, []
    for layer in layers:
        node = digests.get((layer.kind, layer.digest))
        if node is None:
            missing.append(layer.name)
            continue
        zero_type = np.uint8 if layer.target == "cpu" else np.int8
        entry = {"scale": np.array(layer.scale, dtype=np.float32), "zero_point": np.array(layer.zero, dtype=zero_type)}
        tensor = node.input[0]  # a Linear's input activation, or an embedding's table
        if tensor in overrides and (overrides[tensor][0]["scale"] != entry["scale"]
                                    or overrides[tensor][0]["zero_point"] != entry["zero_point"]):
            raise JobFailed(f"layers reading the tensor {tensor} were calibrated to different ranges",
                            "Nothing was written. Report this with the run's spec.yaml.")
        overrides[tensor] = [entry]
        nodes.append(node.name)
        found[layer.name] = node.name
    if missing:
        raise JobFailed(f"{len(missing)} fake-quantized layers have no matching MatMul, Gemm or Gather in the "
                        f"exported model (first: {missing[0]})",
                        "Nothing was written. Report this with the run's spec.yaml.")
    return Deployment(nodes, overrides, found)


def convert_qat(model: torch.nn.Module) -> torch.nn.Module:
    """Plain ``nn.Linear`` and ``nn.Embedding`` modules again, holding the trained weights, in place; returns
    the model."""
    from torch import nn

    linear, _ = _fake_types()
    for _, m in _fakes(model):
        for attr in ("act_scale", "act_zero"):
            m._buffers.pop(attr, None)
        for attr in ("scheme", "observing", "calibrated", "seen_min", "seen_max"):
            m.__dict__.pop(attr, None)
        m.__class__ = nn.Linear if isinstance(m, linear) else nn.Embedding
    return model
