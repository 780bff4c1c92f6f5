"""LoRA merge: fold a LoRA fine-tune's adapters into its base weights.

The source run's ``model/weights.safetensors`` is the state dict of the
peft-wrapped model. The base model is rebuilt exactly as the task builds it
(labels from ``ember_model.json``'s data_info), the same LoRA config is applied
(engine.training.methods), the weights are loaded strictly, and ``merge_and_unload()``
gives a plain model. Before anything is written, the merged model must agree
with the adapter model on real validation examples (fp32, CPU): the same top-1
everywhere and logits within ``MAX_ABS_DIFF``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.trainer import kd
from engine.trainer.source import Source, load_data, load_model, open_source
from engine.training import methods
from engine.training.context import JobFailed

MAX_ABS_DIFF = 1e-4
_BATCH = 16


def read_source(source_dir: Path) -> Source:
    """The source run, checked mergeable; JobFailed otherwise."""
    source = open_source(source_dir)
    kind = (source.meta.get("method") or {}).get("kind", "unknown")
    if kind != "lora":
        raise JobFailed(f"nothing to merge: the run trained {kind}",
                        "LoRA merge applies to runs fine-tuned with method lora; this model's weights are already plain.")
    return source


def _outputs(task_name: str, model: Any, batches: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """(logits, mask of the positions that count) per batch."""
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for batch in batches:
            logits = kd.logits(task_name, model, batch)
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
    source = read_source(source_dir)  # before the heavy imports: bad input fails fast
    spec = source.spec

    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    torch.manual_seed(spec.seed)
    data = load_data(source)

    log(f"rebuilding {spec.task} / {spec.model_name()} with LoRA r={spec.method.lora_r}")
    model = load_model(source, data, merge=False)  # the peft model, its adapters still apart
    weights_in = source_dir / "model" / "weights.safetensors"
    _, params_before = methods.count_parameters(model)
    lora_params = sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)

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
    merged_from = {"kind": "lora", "lora_r": m.lora_r, "lora_alpha": m.lora_alpha, "target_modules": targets}
    return {"source_run": source_dir.name, "parity": parity,
            "bytes_before": _file_bytes(weights_in), "bytes_after": _file_bytes(target / "weights.safetensors"),
            "params_before": params_before, "params_after": params_after, "lora_params": lora_params,
            "path": str(target), "merged_from": merged_from}
