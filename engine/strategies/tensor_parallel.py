"""Tensor parallelism of a Llama-style decoder: each block's attention and MLP matrices split over the "tp"
processes with torch.distributed.tensor.parallel (Megatron's layout).

q, k, v, gate and up are split by output columns (each process computes its own heads and its own slice of
the MLP's width); o and down by input rows, so a block needs one all-reduce after attention and one after
the MLP. Embeddings, norms and the output head stay whole on every process: their inputs and gradients are
the same everywhere, so they stay in step without communication. With LoRA, the adapter's matrix on the
split side is split the same way (B beside a column-split layer, A beside a row-split one) and the other
stays whole.
"""

from __future__ import annotations

from typing import Any

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
COLUMNS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROWS = ("self_attn.o_proj", "mlp.down_proj")


def config_of(model: Any) -> Any:
    return getattr(model, "config", None) or getattr(getattr(model, "base_model", None), "config", None)


def problems(model: Any, tp: int) -> list[str]:
    """Why this model cannot be split ``tp`` ways; empty when it can."""
    config = config_of(model)
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES:
        return [f"tensor parallelism supports Llama-style models ({', '.join(ARCHITECTURES)}); this model is "
                f"{kind or type(model).__name__}: set distributed.tensor_parallel to 1 and use strategy fsdp"]
    heads = config.num_attention_heads
    sizes = {"attention heads": heads, "key/value heads": getattr(config, "num_key_value_heads", None) or heads,
             "MLP width": config.intermediate_size}
    return [f"the model's {name} ({n}) cannot be split {tp} ways: pick a tensor_parallel that divides {n}"
            for name, n in sizes.items() if n % tp]


def _plan(block: Any, path: str, column: bool) -> dict[str, Any]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    style = ColwiseParallel if column else RowwiseParallel
    layer = block.get_submodule(path)
    if not hasattr(layer, "base_layer"):
        return {path: style()}
    # A peft LoRA layer: base + B(A(x)). Beside a column split, B's outputs are split like the base's; beside
    # a row split, A takes the same split input and its partial sums are all-reduced.
    side = "lora_B" if column else "lora_A"
    plan = {f"{path}.base_layer": style()}
    plan.update({f"{path}.{side}.{name}": style() for name in getattr(layer, side)})
    return plan


def apply(model: Any, tp_mesh: Any, block_types: tuple[type, ...]) -> Any:
    from torch.distributed.tensor.parallel import parallelize_module

    blocks = [m for m in model.modules() if isinstance(m, block_types)]
    if not blocks:
        raise ValueError("found no decoder blocks to split")
    for block in blocks:
        plan: dict[str, Any] = {}
        for path in COLUMNS:
            plan.update(_plan(block, path, True))
        for path in ROWS:
            plan.update(_plan(block, path, False))
        parallelize_module(block, tp_mesh, plan)
    return model


def squared_norm(params: list[Any], skip: Any = None) -> Any:
    """The sum of the gradients' squared norms (float64, on CPU), a split gradient's over every slice; the
    parameter ``skip`` left out."""
    import torch

    squares = torch.zeros((), dtype=torch.float64)
    for p in params:
        if p is skip:
            continue
        norm = p.grad.detach().norm(2)
        if hasattr(norm, "full_tensor"):  # a split gradient: its norm over every slice
            norm = norm.full_tensor()
        squares += norm.double().cpu() ** 2
    return squares


def scale_to(params: list[Any], total: Any, max_norm: float) -> Any:
    coef = float(max_norm / (total + 1e-6))
    if coef < 1.0:
        for p in params:
            p.grad.detach().mul_(coef)
    return total


def clip_grad_norm(params: list[Any], max_norm: float) -> Any:
    """clip_grad_norm_ for a model whose parameters are partly split (DTensors) and partly whole: torch's own
    stacks the per-parameter norms, which cannot mix the two. Returns the total norm."""
    return scale_to(params, squared_norm(params).sqrt(), max_norm)
