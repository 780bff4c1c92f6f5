"""LoRA merge: fold a LoRA fine-tune's adapters into its base weights.

The source run's ``model/weights.safetensors`` is the state dict of the
peft-wrapped model. The base model is rebuilt exactly as the task builds it
(labels from ``ember_model.json``'s data_info), the same LoRA config is applied
(engine.methods), the weights are loaded strictly, and ``merge_and_unload()``
gives a plain model. Before anything is written, the merged model must agree
with the adapter model on real validation examples (fp32, CPU): the same top-1
everywhere and logits within ``MAX_ABS_DIFF``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import methods
from engine.jobctx import JobFailed
from engine.specs import validate_spec
from engine.tasks import get_task
from engine.train_spec import TrainSpec

MAX_ABS_DIFF = 1e-4
_BATCH = 16


def read_source(source_dir: Path) -> tuple[dict[str, Any], TrainSpec]:
    """The source run's ``ember_model.json`` and TrainSpec; JobFailed when it cannot be merged."""
    import yaml

    model_dir = source_dir / "model"
    meta_file, weights = model_dir / "ember_model.json", model_dir / "weights.safetensors"
    if not meta_file.is_file() or not weights.is_file():
        raise JobFailed(f"Run {source_dir.name} has no final model ({model_dir} is missing or incomplete)",
                        "The run has not finished: resume or finish the run first.")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobFailed(f"Cannot read {meta_file}: {exc}", "The run's model folder is damaged; train it again.") from exc
    kind = (meta.get("method") or {}).get("kind", "unknown")
    if kind == "qlora":
        raise JobFailed("QLoRA runs cannot be merged yet: their base model is 4-bit",
                        "Fine-tune with method lora to merge the adapters.")
    if kind != "lora":
        raise JobFailed(f"nothing to merge: the run trained {kind}",
                        "LoRA merge applies to runs fine-tuned with method lora; this model's weights are already plain.")
    try:
        doc = yaml.safe_load((source_dir / "spec.yaml").read_text(encoding="utf-8")) or {}
        spec = validate_spec("train.finetune", doc.get("spec", doc) if isinstance(doc, dict) else doc)
    except (OSError, ValueError) as exc:
        raise JobFailed(f"Cannot read the spec of run {source_dir.name}: {exc}",
                        "The run directory is incomplete; train it again.") from exc
    assert isinstance(spec, TrainSpec)
    if spec.task != meta.get("task"):
        raise JobFailed(f"Run {source_dir.name}'s spec ({spec.task}) and model ({meta.get('task')}) disagree",
                        "The run directory was changed by hand; train it again.")
    # The method the weights were trained with is the one ember_model.json records.
    spec = spec.model_copy(update={"method": type(spec.method).model_validate(meta["method"]), "device": "cpu"})
    return meta, spec


def _logits(task_name: str, model: Any, batch: dict[str, Any]) -> Any:
    if task_name == "image_classification":
        out = model(batch["pixel_values"])
    elif task_name == "causal_lm":
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    else:
        out = model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}).logits
    return out.float()


def _outputs(task_name: str, model: Any, batches: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """(logits, mask of the positions that count) per batch."""
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for batch in batches:
            logits = _logits(task_name, model, batch)
            if task_name == "causal_lm":
                mask = batch["attention_mask"].bool()
            else:
                mask = torch.ones(logits.shape[0], dtype=torch.bool)
            out.append((logits, mask))
    return out


def _file_bytes(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def merge(source_dir: Path, out_dir: Path, parity_samples: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Merge the source run's LoRA model into ``out_dir/model``; returns the figures for the result."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    meta, spec = read_source(source_dir)  # before the heavy imports: bad input fails fast

    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save_file

    from engine.tasks.base import InputError

    torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    torch.manual_seed(spec.seed)
    task = get_task(spec.task)
    try:
        data = task.load_data(spec)
    except InputError as exc:
        raise JobFailed(f"Cannot load run {source_dir.name}'s validation data for the parity check: {exc}",
                        exc.hint or "Put the run's data back where it was trained from.") from exc
    saved_info = meta.get("data_info") or {}
    for key in ("num_labels", "label_names"):
        if key in saved_info and key in data.info and saved_info[key] != data.info[key]:
            raise JobFailed(f"The run's data changed since it trained: {key} is now {data.info[key]!r}, "
                            f"was {saved_info[key]!r}",
                            "Restore the training data, or fine-tune again on the new data.")
    data.info.update({k: v for k, v in saved_info.items() if k in ("num_labels", "label_names")})

    log(f"rebuilding {spec.task} / {spec.model_name()} with LoRA r={spec.method.lora_r}")
    model = methods.apply(task.build_model(spec, data), spec, task)
    weights_in = source_dir / "model" / "weights.safetensors"
    try:
        state = load_file(str(weights_in))
    except (OSError, SafetensorError) as exc:
        raise JobFailed(f"Cannot read {weights_in}: {exc}", "The run's weights are damaged; train it again.") from exc
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise JobFailed(f"The run's weights do not match the rebuilt LoRA model: {' '.join(first[:3])[:500]}",
                        "The base model or LoRA settings changed since the run trained; "
                        "merge with the same model folder, or fine-tune again.") from exc
    _, params_before = methods.count_parameters(model)
    lora_params = sum(v.numel() for k, v in state.items() if "lora_" in k)

    n = min(parity_samples, len(data.val))
    if n == 0:
        raise JobFailed("The run has no validation examples to check the merge on",
                        "Fine-tune with a validation split (data.val_fraction or data.val_path).")
    batches = [data.collate([data.val[j] for j in range(i, min(i + _BATCH, n))]) for i in range(0, n, _BATCH)]
    targets = sorted(model.peft_config["default"].target_modules or [])
    before = _outputs(spec.task, model, batches)
    log(f"merging adapters; checking parity on {n} validation examples")
    merged = model.merge_and_unload()
    after = _outputs(spec.task, merged, batches)

    max_diff, agree, count = 0.0, 0, 0
    for (a, mask), (b, _) in zip(before, after, strict=True):
        diff = (a - b).abs()
        max_diff = max(max_diff, float(diff[mask].max()) if mask.any() else 0.0)
        same = a.argmax(-1) == b.argmax(-1)
        agree += int(same[mask].sum())
        count += int(mask.sum())
    agreement = agree / count if count else 1.0
    parity = {"samples": n, "positions": count, "max_abs_logit_diff": max_diff, "top1_agreement": agreement,
              "tolerance": MAX_ABS_DIFF}
    if agreement < 1.0 or not max_diff <= MAX_ABS_DIFF:
        raise JobFailed(f"The merged model does not match the LoRA model: top-1 agreement {agreement:.4f}, "
                        f"max logit difference {max_diff:.2e} (tolerance {MAX_ABS_DIFF:g})",
                        "Nothing was written. Report this with the run's spec.yaml.")

    sd = {k: v.detach().contiguous().clone() for k, v in merged.state_dict().items()}
    leftover = sorted(k for k in sd if "lora_" in k or "modules_to_save" in k or "original_module" in k)
    if leftover:
        raise JobFailed(f"The merge left adapter weights behind: {', '.join(leftover[:3])}",
                        "Nothing was written. Report this with the run's spec.yaml.")
    _, params_after = methods.count_parameters(merged)
    target = out_dir / "model"
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / "weights.safetensors.tmp"
    save_file(sd, str(tmp))
    os.replace(tmp, target / "weights.safetensors")
    m = spec.method
    out_meta = {**{k: v for k, v in meta.items() if k != "method"},
                "method": {"kind": "full",
                           "merged_from": {"kind": "lora", "lora_r": m.lora_r, "lora_alpha": m.lora_alpha,
                                           "target_modules": targets}},
                "parent_run": source_dir.name, "parity": parity}
    (target / "ember_model.json").write_text(json.dumps(out_meta, indent=1), encoding="utf-8")
    return {"source_run": source_dir.name, "parity": parity,
            "bytes_before": _file_bytes(weights_in), "bytes_after": _file_bytes(target / "weights.safetensors"),
            "params_before": params_before, "params_after": params_after, "lora_params": lora_params,
            "path": str(target)}
