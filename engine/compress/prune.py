"""Structured pruning with torch-pruning: CNN channels, transformer heads and FFN width.

What is removed
- CNNs (the digits ``small_cnn``; torchvision ``resnet18``, ``mobilenet_v3_small``, ``efficientnet_b0``):
  output channels of every conv/linear layer except the classification head, together with
  everything coupled to them (BatchNorm, the next layer's inputs, residual partners, the
  head's inputs). torch-pruning's dependency graph finds those coupled groups.
- BERT-style encoders (the built-in MiniLM, a ``BertForSequenceClassification``; any
  encoder whose layers hold ``attention.self.{query,key,value}``, ``attention.output.dense``,
  ``intermediate.dense`` and ``output.dense``): whole attention heads and FFN (intermediate)
  channels. The hidden size stays, so embeddings, LayerNorms, residuals, the pooler and the
  classifier keep their shapes; each attention module's ``num_attention_heads`` and
  ``all_head_size`` are updated, so the pruned model runs, exports to ONNX and pickles
  whole (``torch.save(model)``). Its ``config`` still describes the unpruned shapes: a
  pruned model is saved and loaded whole, never rebuilt from config + state dict.
- Never the classification head's outputs (the labels).

How much
``ratio`` is the share of the WHOLE model's parameters (target "params"; the embedding
tables count) or of its MACs per example (target "macs", as torch-pruning's counter counts
them: conv/linear/norm layers; an embedding lookup costs none and the attention score
matmuls are not counted) to remove: ``report["ratio_of"] == "whole_model"``. For MiniLM the
embeddings are about half the parameters and heads/FFN cannot shrink them, so the most a
params ratio can reach is about 0.41 (``report["max_ratio"]``).

Every prunable layer loses the same share of its units (heads, FFN channels or conv
channels), which is searched on an exact (parameters) or per-module scaled (MACs) cost
model so that the measured reduction reaches the target within ``TOLERANCE``; the units
a single share step would remove together are then added one at a time (least important
first) so the target is hit closely. Every layer keeps at least ``MIN_KEEP`` (10%) of the
heads or channels it started with, and at least one: a ratio that can only be reached by
emptying (or all but emptying) a layer is refused, naming the layer and the largest ratio
that keeps every layer -- for MiniLM by parameters that is 0.41, for the digits CNN 0.98.

Importance is group magnitude (L2 over every weight that a unit's removal deletes:
torch-pruning's ``GroupMagnitudeImportance``): it needs no data and no gradients, so
pruning works on any finished run; Taylor importance would need a loss on labelled
batches. With ``iterative_steps`` > 1, step i prunes to ``ratio * i / steps`` of the
original model and recomputes importance on the weights as they are then:
``prune_steps`` yields after each step so the caller can run a recovery fine-tune on the
yielded model (in place) before the next step.

torch and torch_pruning are imported inside functions only.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.evaluate.runners import TASK_INPUTS
from engine.training.context import JobFailed

TARGETS = ("params", "macs")
TOLERANCE = 0.01  # |achieved - target|, as a share of the whole model
# Every layer keeps at least this share of the heads/channels it started with (and at least one):
# a layer thinned below a tenth is as good as removed, and recovery fine-tuning cannot bring it back.
MIN_KEEP = 0.1
RATIO_OF = "whole_model"
# Channel counts kept at a multiple of this (for layers that had one): ONNX Runtime runs convolutions in its
# blocked NCHWc layout only when channels divide by the block (16 with AVX-512, 8 with AVX2); resnet18 pruned
# 30% to arbitrary counts ran 2.59x slower than unpruned at batch 16. Matrix kernels tile by 8 or 16 as well.
ALIGN = 16
TEXT_INPUTS = TASK_INPUTS["text_classification"]
_ATTEMPTS = 3  # plan, prune, measure; plan the rest again while the measurement falls short
_UNIT_WORDS = {"heads": ("head", "heads"), "ffn": ("FFN channel", "FFN channels"),
               "channels": ("channel", "channels")}


@dataclass
class _Layer:
    """One prunable layer: its units (heads or channels) and what removing one deletes."""

    name: str  # the module name shown to the user
    kind: str  # "heads", "ffn" or "channels"
    root: Any  # the module whose output channels are the units
    unit: int  # output channels per unit: the head size for heads, else 1
    units: int  # units the layer has now
    keep: int  # units it must keep: MIN_KEEP of what it started with, at least one
    order: list[int]  # unit indices, least important first
    scores: list[float]  # their importance (group L2, divided by the layer's mean), in that order
    deps: list[tuple[Any, bool, float]]  # (module, output side?, channels it loses per unit removed)


# ---------------------------------------------------------------- public API


def prune(model: Any, task_name: str, example_batch: dict[str, Any], target: str = "params", ratio: float = 0.3,
          iterative_steps: int = 1, log: Callable[[str], None] = print) -> tuple[Any, dict[str, Any]]:
    """A pruned deep copy of ``model`` and the report; the input model is never changed.

    All ``iterative_steps`` run back to back (no recovery between them); use
    ``prune_steps`` to fine-tune between steps. Bad input raises JobFailed.
    """
    *_, last = prune_steps(model, task_name, example_batch, target, ratio, iterative_steps, log)
    return last


def prune_steps(model: Any, task_name: str, example_batch: dict[str, Any], target: str = "params",
                ratio: float = 0.3, iterative_steps: int = 1,
                log: Callable[[str], None] = print) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Check everything now (JobFailed on bad input), then return an iterator of ``(model, report)``.

    The model yielded is the same deep copy each time: fine-tune it in place between steps.
    The report is cumulative; the last one is the final report.
    """
    _check_args(target, ratio, iterative_steps)
    family, head = _family(model, task_name)
    started = time.perf_counter()
    work = copy.deepcopy(model)
    for p in work.parameters():
        p.requires_grad_(True)  # the dependency graph is traced through autograd
    inputs = _inputs(task_name, example_batch, work)
    macs0, params0, per0 = _count(work, inputs)
    base0 = params0 if target == "params" else macs0
    if base0 <= 0:
        raise JobFailed(f"The model has no {target} to prune (counted {base0})",
                        "Prune by parameters instead." if target == "macs" else "Check the model.")
    structure0 = _structure(work, family)

    # Feasibility on the model as given: every layer down to its floor (MIN_KEEP) is the most that can go.
    first = _analyse(work, family, head, inputs, target, per0)
    layers = first[1]
    if not layers:
        raise JobFailed("Found nothing to prune in this model", "Pick a model with conv layers or attention heads.")
    originals = {layer.name: layer.units for layer in layers}
    max_ratio = _reduction(layers, [layer.units - layer.keep for layer in layers], first[2])
    if target == "macs" and ratio > max_ratio - 2 * TOLERANCE:  # near the limit: measure (MACs are estimated)
        trial = copy.deepcopy(work)
        tdg, tlayers, _ = _analyse(trial, family, head, inputs, target, None)
        _apply(tdg, tlayers, [layer.units - layer.keep for layer in tlayers], family, trial)
        tmacs, _, _ = _count(trial, inputs)
        max_ratio = 1 - tmacs / base0
        del trial, tdg, tlayers
    if ratio > max_ratio:
        raise _whole_layer_error(layers, family, target, ratio, max_ratio)
    log(f"pruning {ratio:.0%} of the model's {_what(target)} in {iterative_steps} step(s); "
        f"at most {max_ratio:.1%} can go while every layer keeps {MIN_KEEP:.0%} of its heads or channels")

    def steps() -> Iterator[tuple[Any, dict[str, Any]]]:
        history: list[dict[str, Any]] = []
        prepared: tuple | None = first  # step 1 starts from the model analysed above
        for step in range(1, iterative_steps + 1):
            t0 = time.perf_counter()
            goal = ratio * step / iterative_steps
            was_training = work.training
            work.eval()
            macs, params = _step(work, family, head, inputs, target, goal, base0, prepared, originals, log)
            prepared = None
            work.train(was_training)
            achieved = 1 - (params if target == "params" else macs) / base0
            history.append({"step": step, "goal": round(goal, 6), "achieved": round(achieved, 6), "params": params,
                            "macs": int(macs), "seconds": round(time.perf_counter() - t0, 3)})
            log(f"step {step}/{iterative_steps}: {_what(target)} -{achieved:.1%} (goal -{goal:.1%}); "
                f"params {params0:,} -> {params:,}, MACs {int(macs0):,} -> {int(macs):,}")
            report = _report(target, ratio, achieved, max_ratio, params0, params, macs0, macs, structure0,
                             _structure(work, family), family, inputs, history, time.perf_counter() - started)
            yield work, report

    return steps()


# ---------------------------------------------------------------- checks


def _check_args(target: Any, ratio: Any, iterative_steps: Any) -> None:
    if target not in TARGETS:
        raise JobFailed(f'Unknown pruning target "{target}"', 'Use "params" (parameters) or "macs" (compute).')
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio):
        raise JobFailed(f"The pruning ratio must be a number, got {ratio!r}", "Use a share between 0 and 1, e.g. 0.3.")
    if not 0 < ratio < 1:
        raise JobFailed(f"The pruning ratio must be between 0 and 1 (exclusive), got {ratio:g}",
                        f"Use a share of the {_what(target)} to remove, e.g. 0.3 for 30%.")
    if isinstance(iterative_steps, bool) or not isinstance(iterative_steps, int) or iterative_steps < 1:
        raise JobFailed(f"iterative_steps must be a whole number of at least 1, got {iterative_steps!r}",
                        "Use 1 to prune at once, or more to prune gradually.")


def _family(model: Any, task_name: str) -> tuple[str, str]:
    """("cnn", the head's module name) or ("transformer", ""); JobFailed for what cannot be pruned."""
    kind = type(model).__name__
    if any(type(m).__module__.split(".")[0] == "peft" for m in model.modules()):
        raise JobFailed(f"Cannot prune a model that still carries PEFT adapters or prompts ({kind})",
                        "Merge LoRA adapters first (compress.lora_merge) and prune the merged run; "
                        "prompt-tuning runs cannot be pruned.")
    if task_name == "causal_lm":
        raise JobFailed(f"Pruning causal language models is not supported yet ({kind})",
                        "Prune a text or image classifier, or try quantization or distillation for this model.")
    if task_name == "image_classification":
        from engine.tasks.image_models import head_modules

        heads = head_modules(model)
        if not heads:
            raise JobFailed(f"Does not know how to prune this image model ({kind})",
                            "Pruning supports the built-in digits CNN, resnet18, mobilenet_v3_small and efficientnet_b0.")
        return "cnn", heads[0]
    if task_name == "text_classification":
        if not _encoder_blocks(model):
            raise JobFailed(f"Does not know how to prune this text model ({kind}): no BERT-style encoder layers "
                            "(attention.self.query/key/value and intermediate.dense) were found",
                            "Pruning supports BERT-style encoders such as the built-in MiniLM; "
                            "try quantization or distillation for this model.")
        return "transformer", ""
    raise JobFailed(f'Does not know how to prune models of the task "{task_name}"',
                    "Pruning supports text and image classifiers.")


def _encoder_blocks(model: Any) -> list[tuple[str, Any]]:
    """(name, layer) of every BERT-style encoder layer."""
    from torch import nn

    blocks = []
    for name, m in model.named_modules():
        att = getattr(getattr(m, "attention", None), "self", None)
        out = getattr(getattr(m, "attention", None), "output", None)
        ffn_in = getattr(getattr(m, "intermediate", None), "dense", None)
        ffn_out = getattr(getattr(m, "output", None), "dense", None)
        if (att is not None and all(isinstance(getattr(att, p, None), nn.Linear) for p in ("query", "key", "value"))
                and isinstance(getattr(att, "num_attention_heads", None), int)
                and isinstance(getattr(att, "attention_head_size", None), int)
                and isinstance(getattr(out, "dense", None), nn.Linear)
                and isinstance(ffn_in, nn.Linear) and isinstance(ffn_out, nn.Linear)):
            blocks.append((name, m))
    return blocks


def _what(target: str) -> str:
    return "parameters" if target == "params" else "MACs"


# ---------------------------------------------------------------- measuring


def _inputs(task_name: str, batch: dict[str, Any], model: Any) -> Any:
    """One example of the batch on the model's device: tracing and counting need no more (MACs per example)."""
    device = next(model.parameters()).device
    if task_name == "image_classification":
        if "pixel_values" not in batch:
            raise JobFailed("The example batch has no pixel_values", "Pass a collated batch of the image dataset.")
        return batch["pixel_values"][:1].to(device)
    inputs = {k: v[:1].to(device) for k, v in batch.items() if k in TEXT_INPUTS}
    if "input_ids" not in inputs:
        raise JobFailed("The example batch has no input_ids", "Pass a collated batch of the text dataset.")
    return inputs


def _count(model: Any, inputs: Any) -> tuple[float, int, dict[Any, float]]:
    """(MACs per example, parameters, MACs per counted module), as torch-pruning counts them.

    torch-pruning's ``count_ops_and_params`` deep-copies the model on every call; this uses
    its per-module hooks on the model itself (one forward pass) and removes them after.
    """
    import torch
    from torch_pruning.utils import op_counter

    counted: dict[Any, Any] = {}
    for m in model.modules():
        hook = op_counter.MODULES_MAPPING.get(type(m))
        if hook is not None:
            m.__flops__ = 0
            counted[m] = m.register_forward_hook(hook)
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(**inputs) if isinstance(inputs, dict) else model(inputs)
        per = {m: float(m.__flops__) for m in counted}
    finally:
        for m, handle in counted.items():
            handle.remove()
            del m.__flops__
        model.train(mode)

    return _count_total(model, per), sum(p.numel() for p in model.parameters()), per


def _count_total(m: Any, per: dict[Any, float]) -> float:
    """A counted module's own figure, else the sum of its children's (torch-pruning's rule)."""
    return per[m] if m in per else sum(_count_total(c, per) for c in m.children())


def _structure(model: Any, family: str) -> dict[str, Any]:
    """Heads and FFN width per encoder layer, or output channels per conv/linear layer."""
    from torch import nn

    if family == "transformer":
        blocks = _encoder_blocks(model)
        return {"heads": [b.attention.self.num_attention_heads for _, b in blocks],
                "intermediate": [b.intermediate.dense.out_features for _, b in blocks]}
    return {"channels": {name: (m.out_channels if isinstance(m, nn.Conv2d) else m.out_features)
                         for name, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))}}


# ---------------------------------------------------------------- the dependency graph and the layers


def _analyse(model: Any, family: str, head: str, inputs: Any, target: str, per_module_macs: dict | None,
             originals: dict[str, int] | None = None) -> tuple[Any, list[_Layer], dict]:
    """The dependency graph, the prunable layers with their unit importance, and the cost table.

    ``per_module_macs`` is ``_count``'s third figure for this model as it is now (counted
    again when None and the target is MACs); ``originals`` the units each layer started with
    (before the first step), which its floor (MIN_KEEP) refers to.
    """
    import torch
    import torch_pruning as tp
    from torch import nn

    mode = model.training
    model.eval()  # tracing runs a forward pass: in training mode it would move BatchNorm statistics
    with torch.enable_grad(), contextlib.redirect_stdout(io.StringIO()):
        dg = tp.DependencyGraph().build_dependency(
            model, example_inputs=inputs,
            output_transform=(lambda out: out.logits) if family == "transformer" else None)
    model.train(mode)
    importance = tp.importance.GroupMagnitudeImportance(p=2, group_reduction="mean", normalizer=None)
    names = {m: n for n, m in model.named_modules()}
    layers: list[_Layer] = []
    if family == "transformer":
        for name, block in _encoder_blocks(model):
            att, ffn = block.attention.self, block.intermediate.dense
            for kind, root, unit in (("heads", att.query, att.attention_head_size), ("ffn", ffn, 1)):
                group = dg.get_pruning_group(root, tp.prune_linear_out_channels, list(range(root.out_features)))
                layer = _layer(dg, group, importance, names, f"{name}.attention.self" if kind == "heads"
                               else names[root], kind, root, unit)
                outside = [names.get(m, "?") for m, _, _ in layer.deps if not names.get(m, "").startswith(name + ".")]
                if outside:  # the hidden size would change: embeddings, LayerNorms, residuals
                    raise JobFailed(f"Pruning {kind} of {layer.name} would also change {outside[0]}",
                                    "This encoder's layout is not supported for pruning yet.")
                layers.append(layer)
    else:
        head_module = dict(model.named_modules())[head]  # never pruned: its outputs are the labels
        for group in dg.get_all_groups(ignored_layers=[head_module], root_module_types=(nn.Conv2d, nn.Linear)):
            root = group[0].dep.target.module
            if root is head_module or not any(True for _ in root.parameters(recurse=False)):
                continue
            layers.append(_layer(dg, group, importance, names, names[root], "channels", root, 1))
    for layer in layers:
        start = (originals or {}).get(layer.name, layer.units)
        layer.keep = min(layer.units, max(1, math.ceil(MIN_KEEP * start)))
    layers = [layer for layer in layers if layer.units > layer.keep]
    return dg, layers, _costs(model, inputs, target, layers, per_module_macs)


def _layer(dg: Any, group: Any, importance: Any, names: dict, name: str, kind: str, root: Any, unit: int) -> _Layer:
    import torch

    n = len(group[0].idxs)
    units = n // unit
    scores = importance(group)
    if scores is None:
        scores = torch.zeros(n)
    per_unit = scores.float().reshape(units, unit).sum(1)
    mean = float(per_unit.mean())
    per_unit = per_unit / mean if mean > 0 else per_unit
    order = sorted(range(units), key=lambda i: (float(per_unit[i]), i))
    deps: list[tuple[Any, bool, float]] = []
    seen = set()
    for item in group:
        m = item.dep.target.module
        out_side = dg.is_out_channel_pruning_fn(item.dep.handler)
        if m not in names or not any(True for _ in m.parameters(recurse=False)) or (id(m), out_side) in seen:
            continue
        seen.add((id(m), out_side))
        deps.append((m, out_side, len(item.idxs) / n * unit))
    return _Layer(name, kind, root, unit, units, max(1, math.ceil(MIN_KEEP * units)), order, [float(per_unit[i]) for i in order], deps)


# ---------------------------------------------------------------- the cost model


def _widths(m: Any) -> tuple[int, int]:
    """(output, input) channels of a conv, linear or norm layer."""
    out = getattr(m, "out_channels", None) or getattr(m, "out_features", None) or getattr(m, "num_features", None)
    if out is None:
        shape = getattr(m, "normalized_shape", None)
        out = shape[-1] if shape else m.weight.shape[0]
    inp = getattr(m, "in_channels", None) or getattr(m, "in_features", None) or out
    return int(out), int(inp)


def _weight_scale(m: Any, fo: float, fi: float) -> float:
    """How a layer's weight (and compute) shrinks when fo of its outputs and fi of its inputs stay."""
    from torch import nn

    if isinstance(m, nn.modules.conv._ConvNd):
        return fo if m.groups > 1 and m.groups == m.in_channels else fo * fi  # depthwise: one input per output
    if isinstance(m, nn.Linear):
        return fo * fi
    return fo  # norms: per channel


def _costs(model: Any, inputs: Any, target: str, layers: list[_Layer], per_module_macs: dict | None) -> dict:
    """What each module that pruning can touch costs now (params exact; MACs as counted per module)."""
    touched = {m for layer in layers for m, _, _ in layer.deps}
    if target == "params":
        total: float = sum(p.numel() for p in model.parameters())
        per: dict[Any, float | None] = {m: None for m in touched}
    else:
        if per_module_macs is None:
            total, _, per_module_macs = _count(model, inputs)
        else:
            total = _count_total(model, per_module_macs)
        per = {m: float(per_module_macs.get(m) or 0) for m in touched}
    return {"target": target, "total": float(total), "per": per}


def _module_cost(m: Any, cost: float | None, fo: float, fi: float) -> float:
    if cost is not None:  # MACs of the module, scaled like its weight
        return cost * _weight_scale(m, fo, fi)
    total = 0.0
    for name, p in m.named_parameters(recurse=False):
        total += p.numel() * (_weight_scale(m, fo, fi) if name == "weight" else fo)
    return total


def _reduction(layers: list[_Layer], plan: list[int], costs: dict[str, Any]) -> float:
    """Estimated share of the current model's cost that ``plan`` (units removed per layer) removes."""
    removed: dict[Any, list[float]] = {}
    for layer, k in zip(layers, plan, strict=True):
        if k <= 0:
            continue
        for m, out_side, per_unit in layer.deps:
            removed.setdefault(m, [0.0, 0.0])[0 if out_side else 1] += k * per_unit
    saved = 0.0
    for m, (r_out, r_in) in removed.items():
        out, inp = _widths(m)
        fo, fi = max(0.0, 1 - r_out / out), max(0.0, 1 - r_in / inp)
        cost = costs["per"][m]
        saved += _module_cost(m, cost, 1.0, 1.0) - _module_cost(m, cost, fo, fi)
    return saved / costs["total"] if costs["total"] else 0.0


def _plan(layers: list[_Layer], costs: dict[str, Any], need: float) -> list[int]:
    """Units to remove per layer so the estimated reduction reaches ``need`` (a share of the current model).

    The same share of every layer's units goes (rounded, each keeping its floor): the largest
    share whose estimate stays below ``need`` is bisected; the units the next share step would
    remove together are added one at a time, least important first, while the estimate stays
    below ``need``; the last unit is whichever layer's next unit reaches ``need`` with the least
    overshoot (a head costs as much as ~64 FFN channels: this keeps the result close to the target).
    """
    def at(share: float) -> list[int]:
        return [min(layer.units - layer.keep, int(share * layer.units + 0.5)) for layer in layers]

    if need <= 0:
        return [0] * len(layers)
    if _reduction(layers, at(1.0), costs) < need:
        return at(1.0)
    lo, hi = 0.0, 1.0
    for _ in range(48):
        mid = (lo + hi) / 2
        if _reduction(layers, at(mid), costs) >= need:
            hi = mid
        else:
            lo = mid
    plan, top = at(lo), at(hi)
    step_units = sorted((layers[i].scores[j], i, j) for i in range(len(layers)) for j in range(plan[i], top[i]))
    for _, i, j in step_units:  # what the next share step removes together, one unit at a time
        plan[i] = j + 1
        if _reduction(layers, plan, costs) >= need:
            plan[i] = j
            break
    while True:  # the last unit: whichever layer's next unit reaches ``need`` with the least overshoot
        options = []
        for i, layer in enumerate(layers):
            if plan[i] < layer.units - layer.keep:
                plan[i] += 1
                options.append((_reduction(layers, plan, costs), i))
                plan[i] -= 1
        if not options:
            return plan
        reaching = [o for o in options if o[0] >= need]
        plan[min(reaching)[1] if reaching else max(options)[1]] += 1
        if reaching:
            return plan


def _aligned(layers: list[_Layer], plan: list[int], costs: dict[str, Any], need: float) -> list[int]:
    """``plan`` with each channel layer's kept count rounded to the nearest multiple of ``ALIGN`` (or of half
    of it) where the layer has one now, when the rounded plan still removes ``need`` within half the tolerance;
    else ``plan`` as it was (a small model's channels are too coarse for it). Heads are left as planned."""
    for align in (ALIGN, ALIGN // 2):
        out = list(plan)
        for i, layer in enumerate(layers):
            if layer.kind == "heads" or layer.units % align or layer.units <= align:
                continue
            floor = -(-layer.keep // align) * align  # the floor, rounded up to the block
            kept = min(layer.units, max(floor, round((layer.units - plan[i]) / align) * align))
            out[i] = layer.units - kept
        if abs(_reduction(layers, out, costs) - need) <= TOLERANCE / 2:
            return out
    return plan


# ---------------------------------------------------------------- pruning


def _apply(dg: Any, layers: list[_Layer], plan: list[int], family: str, model: Any) -> None:
    """Remove the planned units (least important first) with their coupled channels."""
    for layer, k in zip(layers, plan, strict=True):
        if k <= 0:
            continue
        idxs = sorted(c for u in layer.order[:k] for c in range(u * layer.unit, (u + 1) * layer.unit))
        pruner = dg.get_pruner_of_module(layer.root)
        group = dg.get_pruning_group(layer.root, pruner.prune_out_channels, idxs)
        if not dg.check_pruning_group(group):
            raise JobFailed(f"Pruning would empty a layer coupled to {layer.name}",
                            "Use a smaller ratio.")
        group.prune()
    if family == "transformer":
        for _, block in _encoder_blocks(model):
            att = block.attention.self
            att.all_head_size = att.query.out_features
            att.num_attention_heads = att.query.out_features // att.attention_head_size


def _step(model: Any, family: str, head: str, inputs: Any, target: str, goal: float, base0: float,
          prepared: tuple | None, originals: dict[str, int], log: Callable[[str], None]) -> tuple[float, int]:
    """Prune ``model`` in place so its measured reduction from ``base0`` reaches ``goal``; its (MACs, params) after.

    The parameter estimate is exact; the MACs estimate scales each module's counted MACs, so
    when the measurement falls short by more than half the tolerance, the rest is planned
    again on the pruned model (pruning only ever removes: an overshoot stays, it is at most
    one unit).
    """
    macs, params, per = _count(model, inputs)
    for attempt in range(_ATTEMPTS):
        now = params if target == "params" else macs
        need = 1 - base0 * (1 - goal) / now  # share of the current model to remove
        dg, layers, costs = (prepared if prepared is not None
                              else _analyse(model, family, head, inputs, target, per, originals))
        prepared = None
        _apply(dg, layers, _aligned(layers, _plan(layers, costs, need), costs, need), family, model)
        del dg, layers, costs
        macs, params, per = _count(model, inputs)
        achieved = 1 - (params if target == "params" else macs) / base0
        if achieved >= goal - TOLERANCE / 2 or attempt == _ATTEMPTS - 1:
            break
        log(f"measured -{achieved:.1%} against a goal of -{goal:.1%}; pruning the rest")
    return macs, params


def _pct(share: float) -> str:
    """A share as a percentage that does not round 0.9995 up to 100%."""
    for digits in range(0, 4):
        text = f"{share * 100:.{digits}f}"
        if float(text) != 100 or digits == 3:
            return text + "%"
    return f"{share:.2%}"


def _whole_layer_error(layers: list[_Layer], family: str, target: str, ratio: float, max_ratio: float) -> JobFailed:
    """The refusal: the layer an even share reaches the floor of first, and the largest ratio that keeps every layer."""
    def share_at_floor(layer: _Layer) -> float:
        return (layer.units - layer.keep - 0.5) / layer.units

    first = min(layers, key=share_at_floor)
    one, many = _UNIT_WORDS[first.kind]
    same = sum(1 for layer in layers if layer is not first and share_at_floor(layer) == share_at_floor(first))
    others = f" (and {same} more layer{'s' if same != 1 else ''} like it)" if same else ""
    safe = math.floor(max(0.0, max_ratio) * 100) / 100
    floor = f"at least {MIN_KEEP:.0%} of every layer's heads and channels"
    return JobFailed(
        f"Pruning {_pct(ratio)} of the model's {_what(target)} would remove (almost) a whole layer: "
        f"{first.name} would keep fewer than {first.keep} of its {first.units} {many}{others}. "
        f"The largest ratio that keeps {floor} is {safe:.2f}",
        f"Use a ratio of {safe:.2f} or less" + (" (the embeddings cannot be pruned), or prune by MACs"
                                                   if family == "transformer" and target == "params" else "")
        + f". Structured pruning removes whole {one}s; every layer keeps {MIN_KEEP:.0%} of them.")


# ---------------------------------------------------------------- the report


def _report(target: str, ratio: float, achieved: float, max_ratio: float, params0: int, params: int, macs0: float,
            macs: float, before: dict, after: dict, family: str, inputs: Any, history: list[dict],
            seconds: float) -> dict[str, Any]:
    report: dict[str, Any] = {
        "target": target, "ratio": ratio, "achieved": round(achieved, 6), "ratio_of": RATIO_OF,
        "tolerance": TOLERANCE, "max_ratio": round(max_ratio, 6), "family": family,
        "importance": "group L2 magnitude (torch-pruning GroupMagnitudeImportance, p=2)",
        "params_before": int(params0), "params_after": int(params),
        "macs_before": int(macs0), "macs_after": int(macs), "macs_per": "example",
    }
    if family == "transformer":
        report["seq_len"] = int(inputs["input_ids"].shape[-1])
        report.update(heads_before=before["heads"], heads_after=after["heads"],
                      intermediate_before=before["intermediate"], intermediate_after=after["intermediate"])
    else:
        report["channels"] = {name: {"before": c, "after": after["channels"].get(name, c)}
                              for name, c in before["channels"].items()}
    report.update(steps=history, iterative_steps=len(history), seconds=round(seconds, 3))
    return report
