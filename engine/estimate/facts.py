"""Model facts for the fit estimator, read without loading a single weight.

``model_facts(spec)`` builds the model on PyTorch's meta device (tensors with a
shape and no storage): Hugging Face folders through ``AutoConfig`` and
``from_config``, image models through their constructors. It applies the
spec's method with the engine's own code (engine/methods.py, so the LoRA and
prompt-tuning counts are the ones a run gets), then runs one forward pass on
meta tensors and sums the bytes of the tensors autograd saves for backward:
that is the activation memory a training step holds at its peak. The process
that does this has imported what a run imports, so its resident set is the
framework's own RAM (``baseline_rss``). The engine runs it in a subprocess per model
(``{"op": "facts", "spec": ...}`` on the stdin of ``python -m engine.recipes.check``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.jobctx import JobFailed
from engine.tasks.base import InputError, Issue

if TYPE_CHECKING:
    import torch

    from engine.train_spec import TrainSpec

HEAD_NAMES = ("classifier", "score", "lm_head", "head", "fc")  # output layers, never quantized by QLoRA


def model_facts(spec: TrainSpec, num_labels: int | None = None) -> dict[str, Any]:
    """Parameter counts, shapes, activation bytes and FLOPs of the spec's model (see the module doc)."""
    import psutil

    t0 = time.perf_counter()
    if spec.task == "image_classification":
        build, about = _image_skeleton(spec, num_labels)
    else:
        build, about = _hf_skeleton(spec, num_labels)
    base = build()
    from engine import methods
    from engine.tasks import get_task

    task = get_task(spec.task)
    block_types = tuple(task.block_types(base))
    blocks = [m for m in base.modules() if block_types and isinstance(m, block_types)]
    facts: dict[str, Any] = dict(about)
    facts.update(
        params_base=_count(base),
        largest_layer_params=max((sum(p.numel() for p in m.parameters(recurse=False)) for m in base.modules()),
                                 default=0),
        largest_block_params=max((_count(b) for b in blocks), default=0),
        num_blocks=len(blocks),
        matmul_params=_matmul_params(base),
        quantizable_params=_quantizable_params(base),
        lora_targets=list(task.lora_targets(base)),
        lora_candidates=_linear_names(base, full=spec.task == "image_classification"),
    )
    # Counts under each method, so a suggestion ("use LoRA") can be estimated without another look.
    by_method: dict[str, dict[str, int]] = {"full": {"total": facts["params_base"], "trainable": facts["params_base"]}}
    # LoRA always (a suggestion for full fine-tunes); prompt tuning only when asked for.
    kinds = ["lora"] + (["prompt_tuning"] if spec.method.kind == "prompt_tuning" else [])
    model = None
    for kind in kinds:
        spec_k = spec.model_copy(update={"method": spec.method.model_copy(update={"kind": kind})})
        try:
            wrapped = methods.apply(build(), spec_k, task)
        except JobFailed as exc:  # e.g. no LoRA targets in this architecture
            if kind == spec.method.kind:
                raise InputError([Issue(str(exc), exc.hint)]) from exc
            continue
        trainable, total = methods.count_parameters(wrapped)
        by_method[kind] = {"total": total, "trainable": trainable}
        if kind == ("lora" if spec.method.kind == "qlora" else spec.method.kind):
            model = wrapped
    if "lora" in by_method:
        by_method["qlora"] = by_method["lora"]
    if model is None:
        model = methods.apply(base, spec, task)  # full: every parameter trains
    facts["by_method"] = by_method
    facts["params_total"] = by_method[spec.method.kind]["total"]
    facts["params_trainable"] = by_method[spec.method.kind]["trainable"]
    facts.update(_activations(model, spec, block_types))
    facts["baseline_rss"] = psutil.Process().memory_info().rss
    facts["seconds"] = round(time.perf_counter() - t0, 3)
    return facts


# ---------------------------------------------------------------- skeletons


def _hf_skeleton(spec: TrainSpec, num_labels: int | None) -> tuple[Any, dict[str, Any]]:
    """(build() -> meta model, facts from the config) for text classification and causal LM folders."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if spec.task == "text_classification":
        from engine.tasks import text_classification as tc

        src = tc._sources(spec)
        if src.issues:
            raise InputError(src.issues)
        assert src.model_dir is not None
        folder = src.model_dir
        issues, _ = tc._check_model_dir(folder, spec.data.max_length)
        if issues:
            raise InputError(issues)
        labels = num_labels or _text_labels(spec)
    else:
        from engine.tasks import causal_lm

        folder, issues = causal_lm._model_dir(spec)
        if folder is not None:
            issues += causal_lm._check_folder(folder)
        if issues or folder is None:
            raise InputError(issues)
        labels = None
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    try:
        extra = {"num_labels": labels} if labels else {}
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True, **extra)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError([Issue(f"cannot read the model's config.json: {exc}",
                                "re-save the model with save_pretrained()", str(folder))]) from exc
    auto = AutoModelForSequenceClassification if spec.task == "text_classification" else AutoModelForCausalLM
    if spec.task == "causal_lm":
        config.use_cache = False

    def build():
        try:
            with torch.device("meta"):
                return auto.from_config(config)
        except ValueError as exc:
            kind = getattr(config, "model_type", "unknown")
            raise InputError([Issue(f"model type '{kind}' cannot be built for {spec.task}: {exc}",
                                    "choose a model with a head for this task", str(folder))]) from exc

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    about = {
        "name": spec.model_name(), "task": spec.task, "arch": getattr(config, "model_type", None) or "unknown",
        "is_builtin": bool(spec.model.builtin or not spec.model.path),
        "hidden_size": _first(text, "hidden_size", "d_model", "n_embd", "dim"),
        "num_layers": _first(text, "num_hidden_layers", "n_layer", "num_layers"),
        "num_heads": _first(text, "num_attention_heads", "n_head", "num_heads"),
        "vocab_size": _first(text, "vocab_size"),
        "intermediate_size": _first(text, "intermediate_size", "ffn_dim", "n_inner"),
        "seq_len": spec.data.max_length, "image_size": None, "num_labels": labels,
        "weights_file_bytes": _weights_bytes(Path(folder)),
    }
    return build, about


def _first(config: Any, *names: str) -> int | None:
    for n in names:
        value = getattr(config, n, None)
        if isinstance(value, int):
            return value
    return None


def _weights_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")) if folder.is_dir() else 0


def _text_labels(spec: TrainSpec) -> int:
    """Classes in the training file when it is a built-in one (cheap); 2 otherwise (the head is tiny)."""
    if spec.data.path and not spec.data.builtin:
        return 2
    from engine.tasks import text_classification as tc

    labels = set(tc._check(spec).train.labels)
    return max(2, len(labels))


def _image_skeleton(spec: TrainSpec, num_labels: int | None) -> tuple[Any, dict[str, Any]]:
    from engine.tasks import image_models

    m = spec.model
    # The settings checks of image_models.check, without reading the weights file (facts never load weights).
    issues = image_models.check(spec.model_copy(update={"model": m.model_copy(update={"path": None})}))
    if m.path and m.builtin is None:
        path = Path(m.path).expanduser()
        if not path.exists():
            issues.append(Issue("weights file not found", "check model.path", str(path)))
        elif path.is_dir() or path.suffix.lower() not in image_models.WEIGHT_SUFFIXES:
            issues.append(Issue("model.path must be a .pt, .pth, .bin or .safetensors weights file",
                                "point model.path at a state_dict file", str(path)))
        elif m.arch is None:
            issues.append(Issue("model.path needs model.arch",
                                f"set model.arch to the architecture the weights were saved from "
                                f"({', '.join(image_models.ARCHS)})", str(path)))
    if issues:
        raise InputError(issues)
    arch = m.arch or "small_cnn"
    labels = num_labels or _image_labels(spec)
    import torch

    def build():
        with torch.device("meta"):
            return image_models.new_model(arch, labels)

    about = {"name": spec.model_name(), "task": spec.task, "arch": arch, "is_builtin": m.path is None or bool(m.builtin),
             "hidden_size": None, "num_layers": None, "num_heads": None, "vocab_size": None,
             "intermediate_size": None, "seq_len": None, "image_size": spec.data.image_size, "num_labels": labels,
             "weights_file_bytes": Path(m.path).expanduser().stat().st_size if m.path and not m.builtin else 0}
    return build, about


def _image_labels(spec: TrainSpec) -> int:
    if spec.data.builtin or not spec.data.path:
        return 10  # the built-in digits
    folder = Path(spec.data.path).expanduser()
    n = sum(1 for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")) if folder.is_dir() else 0
    return max(2, n)


# ---------------------------------------------------------------- counting


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once


def _is_matmul(m: Any) -> bool:
    from torch import nn

    return isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) or type(m).__name__ == "Conv1D"


def _matmul_params(model: torch.nn.Module) -> int:
    """Weights of the layers autocast runs in 16 bits (linear, conv): it keeps a 16-bit copy of each."""
    return sum(m.weight.numel() for m in model.modules() if _is_matmul(m) and getattr(m, "weight", None) is not None)


def _quantizable_params(model: torch.nn.Module) -> int:
    """Linear weights QLoRA stores in 4 bits (every linear layer but the output head)."""
    from torch import nn

    return sum(m.weight.numel() for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] not in HEAD_NAMES)


def _linear_names(model: torch.nn.Module, full: bool) -> list[str]:
    """Names of the linear/conv layers outside the head a user may pick as LoRA targets.

    Leaf names for transformers (``query`` matches every layer's), full names for image models
    (their targets are single layers, as image_models.lora_targets gives them).
    """
    if full:
        return [name for name, m in model.named_modules()
                if name and _is_matmul(m) and getattr(m, "groups", 1) == 1 and name.split(".")[0] not in HEAD_NAMES
                and not name.startswith(("classifier", "stem"))]
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if name and _is_matmul(m)}
    return sorted(names - set(HEAD_NAMES) - {"pre_classifier", "pooler", "dense", "out_proj"}) or sorted(names)


# ---------------------------------------------------------------- activations and FLOPs


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


def _activations(model: torch.nn.Module, spec: TrainSpec, block_types: tuple) -> dict[str, Any]:
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
    flops = 2 * _matmul_params(model) * (spec.data.max_length if spec.task != "image_classification" else 1)
    return {"activation_bytes_per_sample": per, "flops_per_sample": flops, "activation_basis": f"formula (meta forward failed: {why})"}
