"""Quantization-aware training with torchao: fake int8 in the Linear layers, then a plain float model.

The job fine-tunes with fake quantization for a few steps, then exports the
converted float model to ONNX and quantizes it with ONNX Runtime static QDQ
(``engine.compress.quantize.quantize_static``: int8 weights symmetric per channel,
int8 activations asymmetric per tensor, calibrated). The fake quantization
simulates that scheme as closely as torchao's QAT API (``QATConfig`` +
``IntxFakeQuantizeConfig``, applied with ``quantize_``) allows:

- weights: int8, symmetric, per channel (``PerAxis(0)``: one scale per output
  feature, i.e. per row of the torch weight, which is ORT's MatMul channel axis 1
  of the exported ``[in, out]`` weight). The grids differ by a hair: torchao steps
  by ``max|w| / 127.5`` over [-128, 127], ORT by ``max|w| / 127`` over [-127, 127]
  (0.4% apart; torchao's int8 config has no restricted range).
- activations (each Linear's input): int8, asymmetric, per token, dynamic. ORT
  static quantization uses one calibrated per-tensor scale and zero point;
  ``IntxFakeQuantizeConfig`` has no per-tensor granularity (only per token, per
  channel and per group), and per token is the closest: the same int8 asymmetric
  rounding noise, with a range taken from each token's own values. It is finer
  than per tensor, so the training sees a little less activation error than ORT
  will add (outliers in one token do not widen another's steps); the weights, where
  QAT matters most, are matched.

Only ``nn.Linear`` is covered: torchao's QAT swaps Linear (and Embedding, weight
only) modules. Conv2d layers (the image models) and GPT-2's ``Conv1D`` projections
train in plain float here and are quantized by ORT's calibration afterwards as in
post-training quantization. The classification head (``classifier``,
``pre_classifier``, ``score``, ``lm_head``, ``head``, ResNet's ``fc``) stays
unquantized: it is small and the logits are sensitive to it.

``convert_qat`` swaps every fake-quantized Linear back to a plain ``nn.Linear``
holding the trained weights (no torchao tensor subclasses), ready for
``torch.onnx.export``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.training.context import JobFailed

if TYPE_CHECKING:
    import torch

# Parts of a qualified module name that mark the classification head (kept in float).
HEAD_PARTS = frozenset({"classifier", "pre_classifier", "score", "lm_head", "head"})
# Top-level module names that are the head of one architecture: torchvision ResNet's fc.
HEAD_ROOTS = frozenset({"fc"})


def is_head(name: str) -> bool:
    """Whether the module at ``name`` belongs to the classification head (stays unquantized)."""
    parts = name.split(".")
    return bool(HEAD_PARTS.intersection(parts)) or name in HEAD_ROOTS


def qat_configs() -> tuple[object, object]:
    """(activation, weight) ``IntxFakeQuantizeConfig``: int8 per-token asymmetric, int8 per-channel symmetric."""
    import torch
    from torchao.quantization.qat import IntxFakeQuantizeConfig

    activation = IntxFakeQuantizeConfig(torch.int8, "per_token", is_symmetric=False)
    weight = IntxFakeQuantizeConfig(torch.int8, "per_channel", is_symmetric=True)
    return activation, weight


def _fake_quant_type() -> type:
    from torchao.quantization.qat import FakeQuantizedLinear

    return FakeQuantizedLinear


def prepare_qat(model: torch.nn.Module) -> torch.nn.Module:
    """Swap the model's Linear layers (not the head) for fake-quantized ones, in place; returns the model.

    Calling it on a model that is already prepared changes nothing.
    """
    from torch import nn
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    fake = _fake_quant_type()
    if any(isinstance(m, fake) for m in model.modules()):
        return model
    targets = {name for name, m in model.named_modules() if type(m) is nn.Linear and not is_head(name)}
    if not targets:
        found = sorted({type(m).__name__ for m in model.modules() if type(m).__name__ in ("Conv1D", "Conv2d")})
        also = f" (its {' and '.join(found)} layers are not covered by torchao QAT)" if found else ""
        raise JobFailed(f"{type(model).__name__} has no nn.Linear layers outside its head to train with fake "
                        f"quantization{also}",
                        "QAT (torchao) covers nn.Linear layers; quantize this model after training with "
                        "compress.quantize (static int8) instead.")
    activation, weight = qat_configs()
    quantize_(model, QATConfig(activation_config=activation, weight_config=weight, step="prepare"),
              filter_fn=lambda module, name: name in targets and type(module) is nn.Linear)
    return model


def fake_quant_modules(model: torch.nn.Module) -> int:
    """How many fake-quantized Linear layers the model has."""
    fake = _fake_quant_type()
    return sum(1 for m in model.modules() if isinstance(m, fake))


def convert_qat(model: torch.nn.Module) -> torch.nn.Module:
    """Remove the fake quantizers in place: plain ``nn.Linear`` layers with the trained weights; returns the model."""
    import torch
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    fake = _fake_quant_type()
    quantize_(model, QATConfig(step="convert"), filter_fn=lambda module, name: isinstance(module, fake))
    left = [name for name, m in model.named_modules() if isinstance(m, fake)]
    odd = [name for name, p in model.named_parameters()
           if type(p) is not torch.nn.Parameter or type(p.data) is not torch.Tensor]
    if left or odd:
        raise JobFailed(f"Removing the fake quantization left {'fake-quantized layers' if left else 'tensor subclasses'}"
                        f" behind: {', '.join((left or odd)[:3])}",
                        "Nothing was exported. Report this with the run's spec.yaml.")
    return model
