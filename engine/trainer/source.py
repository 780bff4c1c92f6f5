"""The model a compression job starts from: a finished run's ``model/`` as a plain torch module.

A fine-tune writes ``model/weights.safetensors`` (the state dict of the model as
trained: plain, LoRA-wrapped or a truncated student) and ``model/ember_model.json``.
A compression variant writes the same ``ember_model.json`` plus ``train_spec`` (the
fine-tune spec its lineage started from), and its weights as ``weights.safetensors``
(merged LoRA), ``model.pt`` (a pruned module, whose shapes no spec describes) or
``model.onnx`` (quantized: nothing further to do in torch). Loading gives an fp32
CPU module in eval mode; LoRA adapters are merged in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api.job_terms import FINETUNE
from engine.api.specs import validate_spec
from engine.api.train_spec import TrainSpec
from engine.training.context import JobFailed

FINISH_HINT = "The run has not finished: resume or finish the run first."


@dataclass
class Source:
    job_id: str
    run_dir: Path
    meta: dict[str, Any]
    spec: TrainSpec  # the fine-tune spec of the lineage (data, task, base model)
    model_dir: Path

    def weights_file(self) -> Path:
        for name in ("model.pt", "weights.safetensors", "model.onnx"):
            if (self.model_dir / name).is_file():
                return self.model_dir / name
        return self.model_dir / "weights.safetensors"


def read_meta(run_dir: Path) -> dict[str, Any]:
    model_dir = run_dir / "model"
    meta_file = model_dir / "ember_model.json"
    if not meta_file.is_file() or not any((model_dir / n).is_file()
                                          for n in ("weights.safetensors", "model.pt", "model.onnx")):
        raise JobFailed(f"Run {run_dir.name} has no final model ({model_dir} is missing or incomplete)", FINISH_HINT)
    try:
        return json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobFailed(f"Cannot read {meta_file}: {exc}", "The run's model folder is damaged; train it again.") from exc


def _train_spec(run_dir: Path, meta: dict[str, Any]) -> TrainSpec:
    import yaml

    try:
        if "train_spec" in meta:
            doc: Any = meta["train_spec"]
        else:
            doc = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8")) or {}
            doc = doc.get("spec", doc) if isinstance(doc, dict) else doc
        spec = validate_spec(FINETUNE, doc)
    except (OSError, ValueError) as exc:
        raise JobFailed(f"Cannot read the fine-tune spec of run {run_dir.name}: {exc}",
                        "The run directory is incomplete; train it again.") from exc
    assert isinstance(spec, TrainSpec)
    if spec.task != meta.get("task"):
        raise JobFailed(f"Run {run_dir.name}'s spec ({spec.task}) and model ({meta.get('task')}) disagree",
                        "The run directory was changed by hand; train it again.")
    # The method the weights were trained with is the one ember_model.json records; a student
    # is trained alone (its teacher is not needed to load it).
    method = {k: v for k, v in (meta.get("method") or {}).items() if k in type(spec.method).model_fields}
    return spec.model_copy(update={"method": type(spec.method).model_validate(method), "device": "cpu",
                                   "distill": None, "distributed": type(spec.distributed)()})


def open_source(run_dir: Path) -> Source:
    """The run's metadata and spec, checked; cheap (no torch), so bad input fails fast."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise JobFailed(f"No run directory {run_dir}", "Pick a finished fine-tune from the runs list.")
    meta = read_meta(run_dir)
    kind = (meta.get("method") or {}).get("kind", "unknown")
    if kind == "qlora":
        raise JobFailed("QLoRA runs cannot be compressed yet: their base model is 4-bit",
                        "Fine-tune with method lora (then merge) or full to compress the result.")
    if kind == "prompt_tuning":
        raise JobFailed("Prompt-tuned runs cannot be compressed: their virtual tokens live outside the model's "
                        "weights", "Fine-tune with method lora or full to compress the result.")
    return Source(run_dir.name, run_dir, meta, _train_spec(run_dir, meta), run_dir / "model")


def load_data(source: Source) -> Any:
    """The lineage's TaskData, with the label set the model was trained on (checked unchanged)."""
    from engine.tasks import task_for
    from engine.tasks.base import InputError

    task = task_for(source.spec)  # a preference-tuned run's rows are preference rows
    try:
        data = task.load_data(source.spec)
    except InputError as exc:
        raise JobFailed(f"Cannot load run {source.job_id}'s data: {exc}",
                        exc.hint or "Put the run's data back where it was trained from.") from exc
    saved = source.meta.get("data_info") or {}
    for key in ("num_labels", "label_names"):
        if key in saved and key in data.info and saved[key] != data.info[key]:
            raise JobFailed(f"The run's data changed since it trained: {key} is now {data.info[key]!r}, "
                            f"was {saved[key]!r}", "Restore the training data, or fine-tune again on the new data.")
    data.info.update({k: v for k, v in saved.items() if k in ("num_labels", "label_names")})
    return data


def load_model(source: Source, data: Any, merge: bool = True) -> Any:
    """The source's model: fp32, CPU, eval mode, no adapters left (``merge=False``: a LoRA run's peft model)."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from engine.tasks import get_task
    from engine.training import methods

    if (source.model_dir / "model.pt").is_file():
        try:
            model = torch.load(source.model_dir / "model.pt", map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - unpickling fails in many ways; all mean the same to the user
            raise JobFailed(f"Cannot load {source.model_dir / 'model.pt'}: {exc}",
                            "The variant's model file is damaged; run the compression again.") from exc
        return model.float().eval()
    if not (source.model_dir / "weights.safetensors").is_file():
        raise JobFailed(f"Run {source.job_id} is an ONNX variant ({source.meta.get('variant', {}).get('technique')}); "
                        "it has no torch weights to compress further",
                        "Compress its parent run, or a pruned / merged / distilled variant.")
    task = get_task(source.spec.task)
    model = task.build_model(source.spec, data)
    student = source.meta.get("student")
    if student:
        from engine.trainer.distill import truncate_layers

        model, _ = truncate_layers(model, source.spec.task, int(student["layers"]))
    model = methods.apply(model, source.spec, task)
    weights = source.model_dir / "weights.safetensors"
    try:
        state = load_file(str(weights))
    except (OSError, SafetensorError) as exc:
        raise JobFailed(f"Cannot read {weights}: {exc}", "The run's weights are damaged; train it again.") from exc
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = " ".join(str(exc).strip().splitlines()[:3])[:500]
        raise JobFailed(f"The run's weights do not match the rebuilt model: {first}",
                        "The base model folder changed since the run trained; use the same model folder, "
                        "or fine-tune again.") from exc
    if source.spec.method.kind == "lora" and merge:
        model = model.merge_and_unload()
    return model.float().eval()


def variant_meta(source: Source, technique: str, fmt: str, **settings: Any) -> dict[str, Any]:
    """``ember_model.json`` for a variant of ``source``: enough to load it, and its lineage."""
    keep = ("task", "model", "data_info", "student")
    return {**{k: v for k, v in source.meta.items() if k in keep},
            "method": {"kind": "full"}, "parent_run": source.job_id,
            "train_spec": source.spec.model_dump(mode="json", exclude={"method"}) | {"method": {"kind": "full"}},
            "variant": {"technique": technique, "format": fmt, **settings}}
