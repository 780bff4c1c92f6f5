"""Model facts for the fit estimator, read without loading a single weight.

``model_facts(spec)`` builds the model on PyTorch's meta device (tensors with a
shape and no storage): Hugging Face folders through ``AutoConfig`` and
``from_config``, image models through their constructors. It applies the
spec's method with the engine's own code (engine/training/methods.py, so the LoRA and
prompt-tuning counts are the ones a run gets), then runs one forward pass on
meta tensors (engine/estimate/activations.py) and sums the bytes of the tensors autograd saves for backward:
that is the activation memory a training step holds at its peak. The process
that does this has imported what a run imports, so its resident set is the
framework's own RAM (``baseline_rss``). The engine runs it in a subprocess per model
(``{"op": "facts", "spec": ...}`` on the stdin of ``python -m engine.preflight.check``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.estimate.activations import activations, is_matmul, matmul_params
from engine.tasks.base import InputError, Issue
from engine.training.context import JobFailed

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

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
    from engine.tasks import get_task
    from engine.training import methods

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
        matmul_params=matmul_params(base),
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
    facts.update(activations(model, spec, block_types))
    facts["baseline_rss"] = psutil.Process().memory_info().rss
    facts["seconds"] = round(time.perf_counter() - t0, 3)
    return facts


# ---------------------------------------------------------------- skeletons


def _hf_skeleton(spec: TrainSpec, num_labels: int | None) -> tuple[Any, dict[str, Any]]:
    """(build() -> meta model, facts from the config) for text classification and causal LM folders."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if spec.model.hub:  # a Hub model is measured once cached; the fine-tune downloads it as it starts
        from engine.tasks import hub_models

        if hub_models.cached_folder(spec.model.hub, spec.model.revision) is None:
            raise InputError([hub_models.not_downloaded_issue(spec.model.hub)])
    if spec.task == "text_classification":
        from engine.tasks import text_classification as tc

        src = tc.sources(spec)
        if src.issues:
            raise InputError(src.issues)
        assert src.model_dir is not None
        folder = src.model_dir
        issues, _ = tc.check_model_dir(folder, spec.data.max_length)
        if issues:
            raise InputError(issues)
        labels = num_labels or _text_labels(spec)
    else:
        from engine.tasks import causal_lm

        folder, issues = causal_lm.resolve_model_dir(spec)
        if folder is not None:
            issues += causal_lm.check_model_folder(folder)
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
    if (spec.data.path or spec.data.hub) and not spec.data.builtin:
        return 2
    from engine.tasks import text_classification as tc

    labels = set(tc.check_data(spec).train.labels)
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
                if name and is_matmul(m) and getattr(m, "groups", 1) == 1 and name.split(".")[0] not in HEAD_NAMES
                and not name.startswith(("classifier", "stem"))]
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if name and is_matmul(m)}
    return sorted(names - set(HEAD_NAMES) - {"pre_classifier", "pooler", "dense", "out_proj"}) or sorted(names)
