"""Activation memory and forward FLOPs of a model built on the meta device.

``activations(model, spec, block_types)`` runs one forward pass and the task's loss on
meta tensors (shapes, no storage) under ``saved_tensors_hooks`` and sums the bytes of the
tensors autograd saves for backward: in total, and as activation checkpointing keeps them
(each block's input plus the largest block's own tensors). Two modes make the meta forward
behave like a real one: ``.item()`` on a meta tensor answers True or 1, and attention takes
the fused kernel. When the meta forward fails, the Korthikanti et al. formula stands in.
engine/estimate/facts.py calls it; torch is imported inside the functions (it is heavy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec


def is_matmul(m: Any) -> bool:
    from torch import nn

    return isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) or type(m).__name__ == "Conv1D"


def matmul_params(model: torch.nn.Module) -> int:
    """Weights of the layers autocast runs in 16 bits (linear, conv): it keeps a 16-bit copy of each."""
    return sum(m.weight.numel() for m in model.modules() if is_matmul(m) and getattr(m, "weight", None) is not None)


def _meta_batch(spec: TrainSpec, batch: int) -> dict[str, torch.Tensor]:
    import torch

    if spec.task == "image_classification":
        size = spec.data.image_size
        return {"pixel_values": torch.empty(batch, 3, size, size, device="meta"),
                "labels": torch.zeros(batch, dtype=torch.long, device="meta")}
    ids = torch.zeros(batch, spec.data.max_length, dtype=torch.long, device="meta")
    labels = ids if spec.task == "causal_lm" else torch.zeros(batch, dtype=torch.long, device="meta")
    return {"input_ids": ids, "labels": labels}


def _loss(model: torch.nn.Module, spec: TrainSpec, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The task's loss as its forward() computes it (no attention mask: masks read values, meta has none)."""
    import torch.nn.functional as F

    if spec.task == "image_classification":
        return F.cross_entropy(model(batch["pixel_values"]).float(), batch["labels"])
    if spec.task == "text_classification":
        return F.cross_entropy(model(input_ids=batch["input_ids"]).logits.float(), batch["labels"])
    labels = batch["labels"]
    logits = model(input_ids=batch["input_ids"], use_cache=False).logits[:, -labels.shape[1]:]
    logits = logits[:, :-1].float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)


def _saved_bytes(model: torch.nn.Module, spec: TrainSpec, block_types: tuple, batch: int) -> dict[str, Any]:
    """Bytes autograd saves for backward in one forward: in total, and as activation checkpointing keeps them.

    Saved tensors are counted once per storage (views share one) and parameters not at all.
    With checkpointing a block keeps only its input; the largest block's own tensors come
    back while it is recomputed during backward.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    params = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: set[int] = set()
    outside = 0
    per_block: dict[int, int] = {}
    block_inputs = 0
    active: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal outside
        s = t.untyped_storage()
        if s._cdata in params or s._cdata in seen:
            return t
        seen.add(s._cdata)
        if active:
            per_block[active[-1]] = per_block.get(active[-1], 0) + s.nbytes()
        else:
            outside += s.nbytes()
        return t

    def enter(module: Any, args: tuple, kwargs: dict) -> None:
        nonlocal block_inputs
        if not active:
            first = args[0] if args else next(iter(kwargs.values()), None)
            if isinstance(first, torch.Tensor):
                block_inputs += first.numel() * first.element_size()
        active.append(id(module))

    def leave(module: Any, args: tuple, kwargs: dict, out: Any) -> None:
        active.pop()

    handles = []
    for m in model.modules():
        if block_types and isinstance(m, block_types):
            handles.append(m.register_forward_pre_hook(enter, with_kwargs=True))
            handles.append(m.register_forward_hook(leave, with_kwargs=True))
    try:
        flops = FlopCounterMode(display=False)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), flops, _meta_scalars(), _fused_attention():
            _loss(model, spec, _meta_batch(spec, batch))
    finally:
        for h in handles:
            h.remove()
    plain = outside + sum(per_block.values())
    checkpointed = outside + block_inputs + max(per_block.values(), default=0) if per_block else plain
    return {"plain": plain, "checkpointed": min(plain, checkpointed),
            "flops": flops.get_total_flops()}


def _meta_scalars() -> Any:
    """A mode that answers ``.item()`` on meta tensors (True, or 1) instead of failing.

    Models check masks before using them (``if mask.all(): skip the mask``); meta tensors
    have no values to check, and True takes the path without a mask, as a full batch would.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class MetaScalars(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
                return True if args[0].dtype == torch.bool else 1
            return func(*args, **(kwargs or {}))

    return MetaScalars()


def _fused_attention() -> Any:
    """Route scaled_dot_product_attention on meta tensors to the fused (flash) kernel.

    On meta tensors PyTorch picks the math path, which saves the seq x seq attention
    probabilities; real runs on CPU and CUDA use fused kernels that save only q, k, v, the
    output and a log-sum-exp. This makes the meta forward save what a real one does.
    """
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class FusedAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not F.scaled_dot_product_attention:
                return func(*args, **kwargs)
            names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
            a = {**dict(zip(names, args, strict=False)), **kwargs}
            q, k, v = a["query"], a["key"], a["value"]
            if q.device.type != "meta":
                return func(*args, **kwargs)
            if k.shape[-3] != q.shape[-3]:  # grouped-query attention: the CPU kernel repeats k and v
                k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
                v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
            try:
                return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, a.get("dropout_p", 0.0), a.get("is_causal", False),
                    attn_mask=a.get("attn_mask"), scale=a.get("scale"))[0]
            except (RuntimeError, TypeError):
                return func(*args, **kwargs)

    return FusedAttention()


def activations(model: torch.nn.Module, spec: TrainSpec, block_types: tuple) -> dict[str, Any]:
    """Activation bytes per example (fp32, at the spec's length or image size) and forward FLOPs.

    Measured with one example: what a step saves grows linearly with the batch (the few tensors
    that do not, such as rotary tables, are a few KiB).
    """
    try:
        one = _saved_bytes(model, spec, block_types, 1)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AttributeError) as exc:
        return _formula_activations(model, spec, f"{type(exc).__name__}: {str(exc)[:200]}")
    return {"activation_bytes_per_sample": {"plain": one["plain"], "checkpointed": one["checkpointed"]},
            "flops_per_sample": one["flops"],
            "activation_basis": "measured: tensors saved for backward in a meta-device forward, fp32"}


def _formula_activations(model: torch.nn.Module, spec: TrainSpec, why: str) -> dict[str, Any]:
    """Korthikanti et al. 2022, per layer and example: s*h*(34 + 5*a*s/h) bytes in 16 bits, doubled for fp32.

    Checkpointed: each layer keeps its input (2*s*h bytes in 16 bits) plus one layer's full set.
    Images: no such formula; 200 bytes a pixel is a rough guess for small CNNs.
    """
    layers = max(1, getattr(getattr(model, "config", None), "num_hidden_layers", 0) or 1)
    config = getattr(model, "config", None)
    if config is None or spec.task == "image_classification":
        size = spec.data.image_size
        plain = 200 * size * size
        per = {"plain": plain, "checkpointed": plain // 2}
    else:
        s, h = spec.data.max_length, getattr(config, "hidden_size", 768)
        a = getattr(config, "num_attention_heads", 12)
        layer = 2 * s * h * (34 + 5 * a * s / h)
        per = {"plain": int(layers * layer), "checkpointed": int(layers * 4 * s * h + layer)}
    flops = 2 * matmul_params(model) * (spec.data.max_length if spec.task != "image_classification" else 1)
    return {"activation_bytes_per_sample": per, "flops_per_sample": flops, "activation_basis": f"formula (meta forward failed: {why})"}
