"""What the Export wizard offers and the export.model job it becomes (plain data, no Qt).

The form, the Review YAML and what ``jobs.start`` receives are built here by the
same functions, and the spec is validated with the engine's own model
(engine.api.specs.validate_spec: pydantic only) before it is shown or sent.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

import yaml

from engine.api.job_terms import EXPORT, FINETUNE, LORA_MERGE, PRUNE, QAT, QUANTIZE
from engine.api.specs import EXPORT_FORMATS, JETSON_TARGETS, LLM_FORMATS, SpecError, validate_spec

KIND = EXPORT
SOURCE_KINDS = (FINETUNE, LORA_MERGE, QUANTIZE, QAT, PRUNE)
ONNX_ONLY_KINDS = (QUANTIZE, QAT)  # their model is model.onnx only
TORCH_FORMATS = ("torchscript", "pt2")
TARGET_FORMATS = ("jetson", "tensorrt")  # the formats the Target step is for
SOURCE, FORMATS, TARGET, REVIEW, RUN = range(5)

# One sentence per format: what it is for (docs/export.md has the files and checks).
FORMAT_INFO: dict[str, tuple[str, str]] = {
    "onnx": ("ONNX", "One portable model.onnx with the labels and preprocessing embedded; "
                     "runs in ONNX Runtime on any CPU or GPU."),
    "ort": ("ONNX Runtime package", "The ONNX model plus infer.py, labels, preprocessing and tokenizer: "
                                    "a folder that runs with pip install onnxruntime."),
    "torchscript": ("TorchScript", "model.ts for torch.jit.load: C++ (libtorch) or Python without the model code."),
    "pt2": ("torch.export", "model.pt2 for torch.export.load: the graph AOTInductor and ExecuTorch start from."),
    "tensorrt": ("TensorRT engine", "A model.plan built and benchmarked on this machine's GPU "
                                    "(needs TensorRT and CUDA here)."),
    "triton": ("Triton repository", "A model repository (config.pbtxt and the model) for NVIDIA Triton "
                                    "Inference Server."),
    "jetson": ("Jetson bundle", "A folder and .tar.gz with the ONNX model and scripts that build and "
                                "benchmark the TensorRT engine on the Jetson itself; for a language model, its "
                                "GGUF file with llama.cpp's source and scripts that build llama.cpp (CUDA) and "
                                "time it there."),
    "hf": ("Merged checkpoint", "A Hugging Face folder (safetensors, tokenizer, chat template), LoRA merged or "
                                "kept as an adapter: what vLLM, TGI, SGLang and transformers load."),
    "gguf": ("GGUF (llama.cpp)", "Files for llama.cpp, Ollama and LM Studio, written by llama.cpp's converter and "
                                 "quantizer (f16, q8_0, q4_k_m, ...), with an Ollama Modelfile."),
    "onnx_genai": ("ONNX for generation", "A decoder with its key/value cache and genai_config.json for ONNX "
                                          "Runtime GenAI (fp32, fp16, int4 weight-only)."),
}
assert tuple(FORMAT_INFO) == EXPORT_FORMATS + LLM_FORMATS
GGUF_TYPES = ("f16", "bf16", "q8_0", "q5_k_m", "q4_k_m", "q4_0")
GENAI_PRECISIONS = ("fp32", "fp16", "int4")
LLM_OPTIONS = ("gguf_types", "genai_precisions", "adapter", "check_prompts", "check_batch")

# Jetson titles (engine/export/jetson_profiles.py has the full profiles; the GUI needs the names only).
TARGET_TITLES: dict[str, str] = {
    "orin_nano": "Jetson Orin Nano",
    "orin_nx": "Jetson Orin NX",
    "agx_orin": "Jetson AGX Orin",
    "xavier_nx": "Jetson Xavier NX",
    "agx_xavier": "Jetson AGX Xavier",
    "nano": "Jetson Nano",
}
assert tuple(TARGET_TITLES) == JETSON_TARGETS

# Which step shows the spec's fields (validation messages go under them).
STEP_OF_FIELD: dict[str, int] = {
    "source_run": SOURCE,
    **{f: FORMATS for f in ("formats", "opset", "dynamic_batch", "dynamic_sequence", "max_batch", "opt_batch",
                            "seq_len", "slim", "torchscript_mode", "parity_samples", "tolerance",
                            *LLM_OPTIONS)},
    **{f: TARGET for f in ("precision", "target", "jetpack", "tensorrt_version", "host", "workspace_mb",
                           "dla_core", "archive", "benchmark_s")},
}

# Model-level messages (ExportSpec._check) name no field: the field they are about, by their opening words.
CHECK_FIELDS = (("formats lists", "formats"), ("format jetson needs target", "target"),
                ("host builds", "host"), ("opt_batch", "opt_batch"), ("(language-model formats)", "formats"),
                ("gguf_types", "gguf_types"), ("genai_precisions", "genai_precisions"))


def default_options() -> dict[str, Any]:
    """The form's starting values: the engine's ExportSpec defaults (and a Jetson Orin Nano)."""
    return {"formats": ["onnx"], "opset": 18, "dynamic_batch": True, "dynamic_sequence": True,
            "max_batch": 8, "opt_batch": 1, "slim": False, "torchscript_mode": "trace",
            "parity_samples": 64, "tolerance": "1e-4",
            "target": "orin_nano", "jetpack": "", "precision": "fp16", "dla_core": None,
            "workspace_mb": 1024, "host": None, "benchmark_s": 10.0,
            "gguf_types": ["f16", "q4_k_m"], "genai_precisions": ["fp32", "int4"], "adapter": "merge",
            "check_prompts": 8, "check_batch": 4}


CLASSIFIER_FORMATS = tuple(f for f in EXPORT_FORMATS if f != "jetson")  # graph formats: a classifier's logits
LLM_DEFAULT_FORMATS = ("hf", "gguf")  # what a language model's export ticks at first: Ollama, LM Studio, vLLM


def shown_formats(task: str) -> tuple[str, ...]:
    """The formats offered for a source of ``task``: a language model's (and a Jetson bundle of its GGUF file),
    or a classifier's; every format before a source is chosen."""
    if task == "causal_lm":
        return (*LLM_FORMATS, "jetson")
    if task:
        return EXPORT_FORMATS
    return EXPORT_FORMATS + LLM_FORMATS


def default_formats(task: str, ticked: list[str]) -> list[str]:
    """What stays ticked when the source's task becomes ``task``: the ticks that apply to it, else its defaults."""
    kept = [f for f in ticked if f in shown_formats(task) and f != "jetson"]
    if kept:
        return [f for f in ticked if f in shown_formats(task)]
    return list(LLM_DEFAULT_FORMATS) if task == "causal_lm" else list(default_options()["formats"])


def onnx_only(record: dict[str, Any] | None) -> bool:
    return bool(record) and record.get("kind") in ONNX_ONLY_KINDS


def unavailable_reason(fmt: str, record: dict[str, Any] | None) -> str:
    """Why format ``fmt`` cannot be made from this source ('' when it can)."""
    if fmt in LLM_FORMATS and record and source_task(record) not in ("", "causal_lm"):
        return (f"{FORMAT_INFO[fmt][0]} is for language models; this is a "
                f"{source_task(record).replace('_', ' ')} model.")
    if fmt in TORCH_FORMATS and onnx_only(record):
        return (f"{FORMAT_INFO[fmt][0]} needs torch weights; this quantized variant is an ONNX model only "
                "(model.onnx). Export its parent run, or choose ONNX, ONNX Runtime, Triton, TensorRT or Jetson.")
    return ""


def source_task(record: dict[str, Any] | None) -> str:
    """The task of a fine-tune, or of the run a variant came from, when the record says."""
    if not record:
        return ""
    summary = record.get("summary") or {}
    spec = record.get("spec") or {}
    return str(summary.get("task") or spec.get("task") or (record.get("source") or {}).get("task") or "")


def _number(text: Any) -> Any:
    """Typed-in text as a float; anything else as typed, so pydantic names the problem."""
    if isinstance(text, str):
        try:
            return float(text.strip())
        except ValueError:
            return text.strip()
    return text


def is_llm_choice(formats: list[str]) -> bool:
    """Language-model formats ticked, with nothing else but a Jetson bundle (of their GGUF file)."""
    return any(f in LLM_FORMATS for f in formats) and all(f in LLM_FORMATS or f == "jetson" for f in formats)


def build_spec(record: dict[str, Any] | None, options: dict[str, Any]) -> dict[str, Any]:
    """The export.model spec for the form's values (what Review shows, before the engine's defaults)."""
    formats = [f for f in EXPORT_FORMATS + LLM_FORMATS if f in options["formats"]]
    if is_llm_choice(formats):  # a language model's own options only
        spec = {"source_run": str((record or {}).get("id") or ""), "formats": formats,
                "check_prompts": options["check_prompts"], "check_batch": options["check_batch"],
                "parity_samples": options["parity_samples"]}
        if "jetson" in formats:  # its GGUF file on a Jetson, timed there by llama.cpp
            jetpack = str(options.get("jetpack") or "").strip()
            spec.update({"target": options["target"], "jetpack": jetpack or None, "host": options["host"]})
        if "gguf" in formats:
            spec["gguf_types"] = [t for t in GGUF_TYPES if t in options["gguf_types"]]
        if "onnx_genai" in formats:
            spec["genai_precisions"] = [p for p in GENAI_PRECISIONS if p in options["genai_precisions"]]
        if "hf" in formats:
            spec["adapter"] = options["adapter"]
        return spec
    spec = {
        "source_run": str((record or {}).get("id") or ""),
        "formats": formats,
        "opset": options["opset"],
        "dynamic_batch": options["dynamic_batch"],
        "dynamic_sequence": options["dynamic_sequence"],
        "max_batch": options["max_batch"],
        "opt_batch": options["opt_batch"],
        "slim": options["slim"],
        "torchscript_mode": options["torchscript_mode"],
        "parity_samples": options["parity_samples"],
        "tolerance": _number(options["tolerance"]),
    }
    if any(f in formats for f in TARGET_FORMATS):
        jetpack = str(options.get("jetpack") or "").strip()
        spec.update({"target": options["target"] if "jetson" in formats else None,
                     "jetpack": jetpack or None, "precision": options["precision"],
                     "dla_core": options["dla_core"], "workspace_mb": options["workspace_mb"],
                     "host": options["host"] if "jetson" in formats else None})
        if spec["host"]:
            spec["benchmark_s"] = options["benchmark_s"]
    return spec


def validate(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """(the full spec as the engine stores it, {}) when valid, else (None, {field: [messages]})."""
    try:
        model = validate_spec(KIND, spec)
    except SpecError as exc:
        errors: dict[str, list[str]] = {}
        for problem in exc.fields:
            field = "" if problem["field"] == "(spec)" else problem["field"]
            message = str(problem["message"]).removeprefix("Value error, ")
            for part in (message.split("; ") if not field else [message]):
                where = field or next((f for start, f in CHECK_FIELDS if part.startswith(start) or
                                       (start.startswith("(") and start in part)), "")
                errors.setdefault(where, []).append(part)
        return None, errors
    return model.model_dump(mode="json"), {}


def step_of(field: str) -> int:
    """The wizard step whose form has ``field`` (formats.0 -> Formats)."""
    return STEP_OF_FIELD.get(field.split(".", 1)[0], REVIEW)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")


def job_name(record: dict[str, Any] | None) -> str:
    base = _slug(str((record or {}).get("name") or (record or {}).get("id") or "run")) or "run"
    return f"{base}-export"[:200]


def job_yaml(spec: dict[str, Any], name: str) -> str:
    """The job file ``ember run`` reads: kind, name, spec (engine.api.specs.dump_job_yaml when valid)."""
    from engine.api.specs import dump_job_yaml

    try:
        return dump_job_yaml(KIND, validate_spec(KIND, spec), name)
    except SpecError:
        return yaml.safe_dump({"kind": KIND, "name": name, "spec": spec}, sort_keys=False)


# -- hosts ------------------------------------------------------------------------------------

def jetson_hosts(hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hosts a bundle can be deployed to: role jetson, by name."""
    return sorted((h for h in hosts if isinstance(h, dict) and h.get("name") and h.get("role") == "jetson"),
                  key=lambda h: str(h["name"]))


def host_label(host: dict[str, Any]) -> str:
    """'my-jetson (JetPack 6.1, TensorRT 10.3.0)', from its last probe."""
    jetson = (host.get("facts") or {}).get("jetson") or {}
    if not host.get("facts"):
        facts = "not probed yet"
    elif not jetson:
        facts = "the probe found no Jetson"
    else:
        facts = ", ".join([f"JetPack {jetson.get('jetpack') or 'unknown'}",
                           f"TensorRT {jetson['tensorrt']}" if jetson.get("tensorrt") else "no TensorRT"])
    return f"{host['name']} ({facts})"


# -- where the model and the export lie -------------------------------------------------------

# Where each kind of job leaves its model (docs/compression.md), inside the run's model/ folder.
MODEL_FILES = {
    QUANTIZE: "model.onnx",
    QAT: "model.onnx",
    PRUNE: "model.pt (and model.onnx)",
    LORA_MERGE: "weights.safetensors",
}


def model_file(record: dict[str, Any]) -> str:
    """Where the run's model is: the job's reported path, else its model/ folder and the file its kind writes."""
    result = record.get("result") or {}
    if isinstance(result, dict) and result.get("path"):
        return str(result["path"])
    spec = record.get("spec") or {}
    name = MODEL_FILES.get(str(record.get("kind")))
    if name is None and spec.get("distill"):
        name = "weights.safetensors (the student; ember_model.json names its blocks)"
    folder = PurePath(record["run_dir"]) / "model" if record.get("run_dir") else PurePath("model")
    return f"{folder}/{name}" if name else f"{folder}/ (the fine-tune's saved model)"


def export_folder(record: dict[str, Any]) -> str:
    """The export job's export/ folder ('' before the engine said where the run lies)."""
    return str(PurePath(record["run_dir"]) / "export") if record.get("run_dir") else ""


def format_folder(record: dict[str, Any], fmt: str) -> str:
    """Where the export job writes format ``fmt``: export/<format>/ ('' before the run's folder is known)."""
    folder = export_folder(record)
    return str(PurePath(folder) / fmt) if folder and fmt else folder
