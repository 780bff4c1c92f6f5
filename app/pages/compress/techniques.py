"""The techniques the Compress wizard offers and the job each one becomes (plain data and pydantic).

Nothing here touches Qt, so the form, the review YAML and what ``jobs.start``
receives are built by the same functions, and each spec is validated with the
engine's own model (engine.api.specs, engine.api.train_spec: pydantic only) before it is
shown or sent.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from app.models.spec_tools import launch_spec, suggested_lr
from app.models.spec_tools import validate as validate_train
from engine.api.chain_spec import PRESETS, ChainSpec
from engine.api.job_terms import CHAIN, FINETUNE, LORA_MERGE, PRUNE, QAT, QUANTIZE
from engine.api.specs import LoraMergeSpec, PruneSpec, QatSpec, QuantizeSpec

# Tasks whose built-in models are transformers: a student keeps fewer of their blocks.
TRANSFORMER_TASKS = ("text_classification", "causal_lm")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
# The ONNX op types a user most often keeps in float when int8 or fp16 costs too much accuracy.
FLOAT_OP_TYPES = ("MatMul", "Gemm", "Conv", "Add", "Mul", "Gather", "Softmax", "LayerNormalization")


@dataclass(frozen=True)
class Technique:
    key: str
    title: str
    kind: str  # the engine job kind
    summary: str  # what it does, one line
    tradeoff: str  # what to expect, one line
    suffix: str  # appended to the parent's name to name the variant


TECHNIQUES: tuple[Technique, ...] = (
    Technique("lora_merge", "LoRA merge", LORA_MERGE,
              "Fold the LoRA adapters into the base weights: one plain model, no adapter code at inference.",
              "Same accuracy and a little faster; the file holds the whole model, not just the adapter.",
              "merged"),
    Technique("dynamic_int8", "Dynamic int8", QUANTIZE,
              "Weights stored as int8, activations quantized on the fly. Needs no calibration data.",
              "About 4× smaller and often 1.5–3× faster on CPUs; accuracy usually within a point.",
              "int8-dynamic"),
    Technique("static_int8", "Static int8 (QDQ)", QUANTIZE,
              "Weights and activations in int8, activation ranges calibrated on training examples "
              "(QDQ, which TensorRT reads).",
              "About 4× smaller and the fastest on int8 hardware; accuracy depends on the calibration.",
              "int8-static"),
    Technique("fp16", "fp16", QUANTIZE,
              "Weights and arithmetic in half precision.",
              "Half the size; faster on GPUs and Jetsons, often slower on CPUs; accuracy nearly unchanged.",
              "fp16"),
    Technique("qat", "QAT", QAT,
              "Fine-tune for a few steps with simulated int8, then export static int8.",
              "Can win back what static int8 loses in accuracy, given enough training steps; costs a short training run.",
              "qat-int8"),
    Technique("prune", "Structured pruning", PRUNE,
              "Remove attention heads, FFN width or CNN channels, then a short recovery fine-tune.",
              "Fewer parameters and MACs, faster on any hardware; accuracy falls as the ratio grows.",
              "pruned"),
    Technique("distill", "Distillation", FINETUNE,
              "Train a smaller student (fewer transformer blocks) to imitate this run.",
              "A much smaller and faster model; a full training run, usually a little below the teacher.",
              "distilled"),
)
BY_KEY = {t.key: t for t in TECHNIQUES}
QUANTIZE_MODES = {"dynamic_int8": "dynamic", "static_int8": "static", "fp16": "fp16"}
SPEC_MODELS: dict[str, type[BaseModel]] = {
    LORA_MERGE: LoraMergeSpec,
    QUANTIZE: QuantizeSpec,
    QAT: QatSpec,
    PRUNE: PruneSpec,
    CHAIN: ChainSpec,
}
# A chain's stages run in this order: distil (a smaller student), prune it, then quantize what is left.
CHAIN_ORDER = ("distill", "prune", "dynamic_int8", "static_int8", "fp16", "qat")
QUANTIZE_KEYS = ("dynamic_int8", "static_int8", "fp16", "qat")


# Where the variants will run (the Compare page's Deploy on): what suits each place, and what does not and why.
# From docs/compression.md, "Measured here" (ONNX Runtime on a 2-core CPU); TensorRT was not measured here.
DEPLOY_SUITS = {
    "cpu": ("dynamic_int8", "static_int8", "qat", "prune", "distill", "lora_merge"),
    "gpu": ("fp16", "static_int8", "qat", "prune", "distill", "lora_merge"),
    "jetson": ("fp16", "static_int8", "qat", "prune", "distill", "lora_merge"),
}
DEPLOY_AVOID = {
    "cpu": {"fp16": "slower than fp32 on most CPUs (1.13x at batch 16 here)"},
    "gpu": {"dynamic_int8": "ONNX Runtime's CPU kernels: TensorRT does not run them"},
    "jetson": {"dynamic_int8": "ONNX Runtime's CPU kernels: TensorRT does not run them"},
}
INT8_FORM = {"cpu": "cpu", "gpu": "tensorrt", "jetson": "tensorrt"}  # static int8 and QAT's form per place


def deploy_advice(deploy: str, record: dict[str, Any] | None) -> tuple[list[str], dict[str, str]]:
    """(techniques that suit ``deploy`` and this source, in the list's order; {technique: why not} for the
    ones that do not)."""
    keys = [t.key for t in TECHNIQUES if t.key in DEPLOY_SUITS.get(deploy, ())
            and not (record is not None and unavailable_reason(t.key, record))]
    return keys, dict(DEPLOY_AVOID.get(deploy, {}))


def default_settings(source: dict[str, Any] | None = None) -> dict[str, Any]:
    """The form's starting values: the engine's spec defaults, and a student learning rate for the source."""
    spec = (source or {}).get("spec") or {}
    task = spec.get("task", "text_classification")
    method = (spec.get("method") or {}).get("kind", "lora")
    teacher_lr = (spec.get("optim") or {}).get("lr")
    # A student is trained in full: the teacher's own rate only if it was trained in full too.
    lr = teacher_lr if method == "full" and teacher_lr else suggested_lr(task, "full")
    return {
        # Percentile ranges clip a transformer's few outlier activations: on the bench's MiniLM the CPU form
        # agreed with fp32 on 99.4% of predictions against 98.8% with min/max (docs/compression.md).
        "calibration": {"samples": 64, "method": "percentile" if task in TRANSFORMER_TASKS else "minmax"},
        "int8_target": INT8_FORM["cpu"],  # the wizard's Deploy on starts at a CPU
        "per_channel": True,
        "exclude_op_types": [],
        "prune": {"target": "params", "ratio": 0.3, "iterative_steps": 1, "recovery_steps": 50, "vocabulary": False},
        "qat": {"steps": 50, "lr": 2e-5},
        "distill": {"student_layers": 3, "temperature": 2.0, "alpha": 0.5, "max_steps": 200, "lr": lr},
        "eval": {"samples": 200, "batch_size": 16, "repeats": 20, "threads": 0},
    }


def source_facts(record: dict[str, Any]) -> dict[str, Any]:
    """task, model, method of a fine-tune record (its summary first, else its spec)."""
    info = dict(record.get("summary") or {})
    spec = record.get("spec") or {}
    info.setdefault("task", spec.get("task"))
    if not info.get("task"):
        info["task"] = spec.get("task", "text_classification")
    if not info.get("method"):
        info["method"] = (spec.get("method") or {}).get("kind", "lora")
    return info


def unavailable_reason(key: str, record: dict[str, Any] | None) -> str:
    """Why ``key`` cannot be used on this source run ('' when it can)."""
    if record is None:
        return "Choose a source run first."
    info = source_facts(record)
    if info.get("method") in ("prompt_tuning", "qlora"):
        return (f"A {info.get('method')} run cannot be compressed: its weights are not a plain model. "
                "Fine-tune with LoRA or in full to compress the result.")
    if key == "qat" and info.get("task") == "image_classification":
        return ("QAT fake-quantizes Linear layers only; a CNN's convolutions would train without it. "
                "Use Static int8 for image models.")
    if key == "prune" and info.get("task") == "causal_lm":
        return "Pruning knows BERT-style encoders and CNNs; causal language models are not supported yet."
    if key == "lora_merge" and info.get("method") != "lora":
        return f"Only for LoRA fine-tunes: this run's method is {info.get('method')}, so there are no adapters to merge."
    if key == "distill" and info.get("task") not in TRANSFORMER_TASKS:
        return (f"Needs a transformer model: the {info.get('model') or 'model'} of this "
                f"{str(info.get('task')).replace('_', ' ')} run has no blocks to leave out.")
    return ""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")


def job_name(record: dict[str, Any], key: str, settings: dict[str, Any]) -> str:
    base = _slug(str(record.get("name") or record.get("id") or "run")) or "run"
    suffix = BY_KEY[key].suffix
    if key == "prune":
        ratio = settings["prune"]["ratio"]
        if isinstance(ratio, (int, float)):
            suffix += f"-{round(ratio * 100)}pct"
    elif key == "distill":
        layers = settings["distill"]["student_layers"]
        if isinstance(layers, int):
            suffix += f"-{layers}l"
    return f"{base}-{suffix}"[:200]


def _number(value: Any) -> Any:
    """A typed-in number as a float; anything else as typed, so pydantic names the problem."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return value.strip()
    return value


def job_spec(key: str, record: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The spec ``jobs.start`` receives for technique ``key`` on the source ``record``."""
    source = str(record.get("id") or "")
    evaluation = dict(settings["eval"])
    if key == "lora_merge":
        return {"source_run": source, "eval": evaluation}
    if key in QUANTIZE_MODES:
        spec: dict[str, Any] = {"source_run": source, "mode": QUANTIZE_MODES[key]}
        if key == "static_int8":
            spec["calibration"] = dict(settings["calibration"])
            spec["target"] = settings["int8_target"]
        if key != "fp16":
            spec["per_channel"] = bool(settings["per_channel"])
        spec["exclude_op_types"] = list(settings["exclude_op_types"])
        spec["eval"] = evaluation
        return spec
    if key == "qat":
        qat = settings["qat"]
        return {"source_run": source, "steps": qat["steps"], "lr": _number(qat["lr"]),
                "calibration": dict(settings["calibration"]), "target": settings["int8_target"],
                "eval": evaluation}
    if key == "prune":
        return {"source_run": source, **settings["prune"], "eval": evaluation}
    if key == "distill":
        return distill_spec(record, settings["distill"])
    raise KeyError(key)


def distill_spec(record: dict[str, Any], distill: dict[str, Any]) -> dict[str, Any]:
    """The teacher's own fine-tune spec, trained in full as a student of the teacher.

    Shown and sent as the fine-tune wizard sends a spec (the task, then only what
    differs from the defaults), with ``resume: true`` written out.
    """
    spec = copy.deepcopy(record.get("spec") or {})
    spec["method"] = {"kind": "full"}
    spec["distill"] = {"teacher_run": str(record.get("id") or ""),
                       "student_layers": distill["student_layers"],
                       "temperature": distill["temperature"], "alpha": distill["alpha"]}
    spec["max_steps"] = distill["max_steps"]
    spec["epochs"] = None  # max_steps counts; a teacher trained by epochs must not set both
    spec.setdefault("optim", {})["lr"] = _number(distill["lr"])
    out = launch_spec(spec)
    out["resume"] = True
    return out


def chain_reason(keys: list[str]) -> str:
    """Why the ticked techniques cannot run as one chain ('' when they can)."""
    if "lora_merge" in keys:
        return "LoRA merge is not a chain stage: merge first, then chain the merged run's compressions."
    if len([k for k in keys if k in CHAIN_ORDER]) < 2:
        return "Tick two or more of distillation, pruning and one quantization to chain them."
    if sum(k in QUANTIZE_KEYS for k in keys) > 1:
        return "A chain ends in one quantization: tick only one of dynamic int8, static int8, fp16 and QAT."
    return ""


def chain_order(keys: list[str]) -> list[str]:
    return [k for k in CHAIN_ORDER if k in keys]


def chain_stages(keys: list[str], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``stages`` of a compress.chain from the ticked techniques, with the form's settings."""
    stages = []
    for key in chain_order(keys):
        if key == "distill":
            d = settings["distill"]
            stages.append({"technique": "distill", "settings": {
                "student_layers": d["student_layers"], "steps": d["max_steps"], "lr": _number(d["lr"]),
                "temperature": d["temperature"], "alpha": d["alpha"]}})
            continue
        spec = job_spec(key, {"id": "chain"}, settings)
        for field in ("source_run", "eval"):
            spec.pop(field, None)
        stages.append({"technique": "quantize" if key in QUANTIZE_MODES else key, "settings": spec})
    return stages


def chain_job(record: dict[str, Any], keys: list[str], settings: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    base = _slug(str(record.get("name") or record.get("id") or "run")) or "run"
    name = f"{base}-chain-" + "-".join(BY_KEY[k].suffix for k in chain_order(keys))
    spec = {"source_run": str(record.get("id") or ""), "stages": chain_stages(keys, settings),
            "eval": dict(settings["eval"])}
    return CHAIN, spec, name[:200]


def preset(name: str, settings: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The techniques to tick and the settings of the chain preset ``name`` (engine/api/chain_spec.py)."""
    keys, out = [], copy.deepcopy(settings)
    for stage in PRESETS[name]:
        technique, values = stage["technique"], stage["settings"]
        if technique == "distill":
            keys.append("distill")
            out["distill"].update({k: v for k, v in values.items() if k != "steps"}, max_steps=values["steps"])
        elif technique == "prune":
            keys.append("prune")
            out["prune"].update(values)
        else:
            keys.append({"dynamic": "dynamic_int8", "static": "static_int8", "fp16": "fp16"}[values["mode"]])
    return keys, out


def build_jobs(record: dict[str, Any] | None, keys: list[str],
               settings: dict[str, Any], chain: bool = False) -> list[tuple[str, dict[str, Any], str]]:
    """(kind, spec, name) for each ticked technique, in the order of TECHNIQUES; one chain job with ``chain``."""
    if record is None:
        return []
    if chain:
        return [chain_job(record, keys, settings)]
    return [(BY_KEY[k].kind, job_spec(k, record, settings), job_name(record, k, settings))
            for k in [t.key for t in TECHNIQUES if t.key in keys]]


def spec_errors(kind: str, spec: dict[str, Any]) -> dict[str, list[str]]:
    """{field path: [messages]} from the engine's model for ``kind``; {} when valid."""
    if kind == FINETUNE:
        return validate_train(spec)[1]
    try:
        SPEC_MODELS[kind].model_validate(spec)
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"])
            errors.setdefault(path, []).append(err["msg"].removeprefix("Value error, "))
        return errors
    return {}


def settings_field(key: str, path: str) -> str | None:
    """The settings field a spec path of technique ``key`` is shown under (None: no field)."""
    if path.startswith(("eval.", "calibration.")):
        return path
    if key in QUANTIZE_MODES and path in ("per_channel", "exclude_op_types"):
        return path
    if key in ("static_int8", "qat") and path == "target":
        return "int8_target"
    if key == "prune" and path in ("target", "ratio", "iterative_steps", "recovery_steps", "vocabulary"):
        return f"prune.{path}"
    if key == "qat" and path in ("steps", "lr"):
        return f"qat.{path}"
    if key == "distill":
        if path.startswith("distill."):
            return path
        if path == "max_steps":
            return "distill.max_steps"
        if path == "optim.lr":
            return "distill.lr"
    return None


def field_errors(record: dict[str, Any] | None, keys: list[str],
                 settings: dict[str, Any], chain: bool = False) -> dict[str, list[str]]:
    """Every job's validation errors by settings field; '' holds those no field shows."""
    out: dict[str, list[str]] = {}
    if record is None:
        return out
    if chain:
        reason = chain_reason(keys)
        if reason:
            out[""] = [reason]
        else:
            kind, spec, _name = chain_job(record, keys, settings)
            for path, messages in spec_errors(kind, spec).items():
                if not path.startswith("stages"):  # a stage's own fields are checked as its technique's below
                    out.setdefault("", []).extend(f"Chain: {path or 'spec'}: {m}" for m in messages)
    for key in [t.key for t in TECHNIQUES if t.key in keys]:
        kind, spec = BY_KEY[key].kind, job_spec(key, record, settings)
        for path, messages in spec_errors(kind, spec).items():
            field = settings_field(key, path)
            target = out.setdefault(field or "", [])
            for message in messages:
                text = message if field else f"{BY_KEY[key].title}: {path or 'spec'}: {message}"
                if text not in target:  # shared fields (eval, calibration) say it once
                    target.append(text)
    return out


def jobs_yaml(jobs: list[tuple[str, dict[str, Any], str]]) -> str:
    """One YAML document per job, each the shape ``ember run`` reads: kind, name, spec."""
    docs = [yaml.safe_dump({"kind": kind, "name": name, "spec": spec}, sort_keys=False,
                           default_flow_style=False) for kind, spec, name in jobs]
    return "---\n".join(docs)
