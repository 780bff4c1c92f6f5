"""Typed job specs: what a job needs to run, validated before it starts.

Each job kind has a pydantic model; a spec travels as YAML (``spec.yaml`` in the
run dir, or a file a user writes by hand for ``ember run``). Validation reports
every problem at once, each with the field and a plain-language fix.
Imports only stdlib, pydantic and yaml: the GUI validates with these too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from engine.api.chain_spec import ChainSpec
from engine.api.compress_spec import (  # noqa: F401 - re-exported: the compress specs' old home
    RUN_ID,
    CalibrationSpec,
    CompressSpec,
    EvalSpec,
    LoraMergeSpec,
    PruneSpec,
    QatSpec,
    QuantizeSpec,
    Spec,
)
from engine.api.job_terms import (
    CHAIN,
    EVALUATE,
    EXPORT,
    FINETUNE,
    LORA_MERGE,
    MODEL_DOWNLOAD,
    MODEL_PREPARE,
    PII_SCAN,
    PII_SCRUB,
    PRUNE,
    QAT,
    QUANTIZE,
    SERVE,
    SWEEP,
    SYSTEM_PROBE,
    kind_noun,
)
from engine.api.pii_spec import PiiScanSpec, PiiScrubSpec
from engine.api.playground import ModelRef
from engine.api.prepared_models import PREPARED
from engine.api.resources import HOST, NAME_OR_PATH, PROGRAM, READ, RUN, SECRET_FILE, resource
from engine.api.sweep_spec import SweepSpec
from engine.api.train_spec import HUB_ID, HUB_REVISION, TrainSpec


class ProbeSpec(Spec):
    """system.probe: facts about this machine, then optional utilisation samples."""

    samples: int = Field(0, ge=0, le=86_400, description="utilisation samples to take after the facts")
    interval_s: float = Field(1.0, gt=0, le=3600, description="seconds between samples")




class ModelDownloadSpec(Spec):
    """model.download: a model (or a dataset) from the Hugging Face Hub into the Hugging Face cache (docs/hub.md)."""

    repo_id: str = Field(..., min_length=1, max_length=200, pattern=HUB_ID,
                         description="the model's id on the Hub, owner/name (e.g. Qwen/Qwen2.5-0.5B-Instruct)")
    revision: str | None = Field(None, max_length=200, pattern=HUB_REVISION,
                                 description="a branch, tag or commit; None = main")
    repo_type: Literal["model", "dataset"] = Field("model", description="model, or dataset for a dataset repo "
                                                   "(a fine-tune's data.hub)")


class ModelPrepareSpec(Spec):
    """system.prepare_model: a built-in model written once as a model folder (engine/api/prepared_models.py)."""

    builtin: Literal[tuple(PREPARED)] = Field(..., description="the built-in model to prepare")  # type: ignore[valid-type]


EXPORT_FORMATS = ("onnx", "ort", "torchscript", "pt2", "tensorrt", "triton", "jetson")
JETSON_TARGETS = ("orin_nano", "orin_nx", "agx_orin", "xavier_nx", "agx_xavier", "nano")


LLM_FORMATS = ("hf", "gguf", "onnx_genai")  # a causal LM's formats, each checked by generating


def _no_endpoint(ref: ModelRef | None) -> ModelRef | None:
    """Jobs that load the weights themselves cannot take a served endpoint."""
    if ref is not None and ref.url:
        raise ValueError("a served endpoint (url) is chatted with only (Playground, ember chat); name the model's "
                         "run, builtin, path or hub")
    return ref


class ExportSpec(Spec):
    """export.model: turn a finished run or variant into deployable files, each checked against the model.

    docs/export.md describes every format, the files written and the parity checks.
    """

    source_run: str | None = Field(None, json_schema_extra=resource(RUN), min_length=1, max_length=200, pattern=RUN_ID,
                                   description="id of a finished fine-tune or variant")
    model: ModelRef | None = Field(None, description="a base language model instead of a run (builtin, path or hub): "
                                                     "the language-model formats only")
    _model_files = field_validator("model")(_no_endpoint)
    formats: list[Literal["onnx", "ort", "torchscript", "pt2", "tensorrt", "triton", "jetson", "hf", "gguf",
                          "onnx_genai"]] = Field(
        default_factory=lambda: ["onnx"], min_length=1,
        description="onnx, ort (ONNX Runtime package), torchscript, pt2 (torch.export), tensorrt (engine built "
                    "here: needs TensorRT and a CUDA GPU), triton (model repository), jetson (deploy bundle); "
                    "language models: hf (merged checkpoint), gguf (llama.cpp), onnx_genai (ONNX with KV cache)")
    gguf_types: list[Literal["f16", "bf16", "q8_0", "q5_k_m", "q4_k_m", "q4_0"]] = Field(
        default_factory=lambda: ["f16", "q4_k_m"], min_length=1, description="GGUF files to write (llama.cpp types)")
    genai_precisions: list[Literal["fp32", "fp16", "int4"]] = Field(
        default_factory=lambda: ["fp32", "int4"], min_length=1,
        description="ONNX-GenAI models to build: fp32, fp16, int4 (weight-only, MatMulNBits)")
    jetson_gguf: Literal["f16", "bf16", "q8_0", "q5_k_m", "q4_k_m", "q4_0"] | None = Field(
        None, description="language models: the GGUF type in the Jetson bundle; None = the smallest written")
    adapter: Literal["merge", "separate"] = Field(
        "merge", description="hf of a LoRA run: merge the adapter into the weights, or keep it separate")
    data: str | None = Field(None, json_schema_extra=resource(NAME_OR_PATH), min_length=1, max_length=4096,
                             description="language models: the rows the formats are checked on (a JSONL file or a "
                                         "built-in dataset); None = the run's validation data (short-answers for "
                                         "a base model)")
    check_prompts: int = Field(8, ge=1, le=1000, description="language models: prompts answered greedily by "
                                                            "every format and compared with the source model")
    check_batch: int = Field(4, ge=0, le=64, description="language models: tokens/s with this many requests at "
                                                         "once, batched in each runtime (0: skip)")
    check_tokens: int = Field(24, ge=1, le=1024, description="language models: the longest greedy answer compared")
    opset: int = Field(18, ge=13, le=23, description="ONNX opset; TensorRT on older JetPacks reads only older ones")
    dynamic_batch: bool = Field(True, description="any batch size at run time (else the example's size)")
    dynamic_sequence: bool = Field(True, description="text models: any sequence length up to seq_len")
    max_batch: int = Field(8, ge=1, le=4096, description="largest batch: TensorRT profile max, Triton max_batch_size")
    opt_batch: int = Field(1, ge=1, le=4096, description="the batch TensorRT tunes for (profile opt)")
    seq_len: int | None = Field(None, ge=1, le=131_072,
                                description="text models: the longest sequence; None = the run's data.max_length")
    slim: bool = Field(False, description="simplify the ONNX graph with onnxslim (constant folding, fusions)")
    optimize: bool = Field(True, description="the ONNX Runtime package (ort) gets ONNX Runtime's fused attention, "
                                             "LayerNorm and GELU (transformers); the onnx format stays portable")
    torchscript_mode: Literal["trace", "script"] = Field("trace", description="how TorchScript captures the model")
    precision: Literal["fp32", "fp16", "int8"] = Field(
        "fp16", description="TensorRT engine precision; int8 needs a QDQ model (compress.quantize static, tensorrt)")
    target: Literal["orin_nano", "orin_nx", "agx_orin", "xavier_nx", "agx_xavier", "nano"] | None = Field(
        None, description="the Jetson the bundle is for (needed by format jetson)")
    jetpack: str | None = Field(None, max_length=20, pattern=r"^[0-9]+(\.[0-9]+)*$",
                                description="the JetPack on that Jetson; None = the target's newest "
                                            "(with a host: what the host reports)")
    tensorrt_version: str | None = Field(None, max_length=20, pattern=r"^[0-9]+(\.[0-9]+)*$",
                                         description="check the graph against this TensorRT; None = the target's "
                                                     "(or this machine's for format tensorrt)")
    host: str | None = Field(None, json_schema_extra=resource(HOST), min_length=1, max_length=100,
                             description="a Jetson host (Hosts page): build and benchmark the engine on it")
    workspace_mb: int = Field(1024, ge=16, le=1_048_576, description="TensorRT builder workspace")
    dla_core: int | None = Field(None, ge=0, le=1, description="build for this DLA core (GPU fallback on)")
    archive: bool = Field(True, description="also write the Jetson bundle as a .tar.gz")
    parity_samples: int = Field(64, ge=1, le=100_000, description="validation examples every format is checked on")
    tolerance: float = Field(1e-4, gt=0, le=1, description="max abs logit difference allowed for fp32 formats")
    benchmark_s: float = Field(10.0, gt=0, le=600, description="seconds the on-device benchmark runs")

    @model_validator(mode="after")
    def _check(self) -> ExportSpec:
        problems = []
        if (self.source_run is None) == (self.model is None):
            problems.append("name the model to export: source_run (a run) or model (a base language model)")
        if len(set(self.formats)) != len(self.formats):
            problems.append("formats lists a format twice")
        llm = [f for f in self.formats if f in LLM_FORMATS]
        others = [f for f in self.formats if f not in LLM_FORMATS and f != "jetson"]
        if llm and others:
            problems.append(f"{', '.join(llm)} (language-model formats) cannot share a job with "
                            f"{', '.join(others)}: export them separately")
        if self.model is not None and not llm:
            problems.append("a base model (model) exports to the language-model formats only: hf, gguf, onnx_genai "
                            "(and jetson with gguf)")
        if llm and "jetson" in self.formats and "gguf" not in self.formats:
            problems.append("a language model's Jetson bundle carries a GGUF file: add gguf to formats")
        if self.jetson_gguf and self.jetson_gguf not in self.gguf_types:
            problems.append(f"jetson_gguf {self.jetson_gguf} is not in gguf_types ({', '.join(self.gguf_types)})")
        if self.model is not None and self.model.run:
            problems.append("name a run with source_run, not model.run")
        for name in ("gguf_types", "genai_precisions"):
            if len(set(getattr(self, name))) != len(getattr(self, name)):
                problems.append(f"{name} lists a value twice")
        if "jetson" in self.formats and self.target is None:
            problems.append("format jetson needs target (orin_nano, orin_nx, agx_orin, xavier_nx, agx_xavier, nano)")
        if self.host and "jetson" not in self.formats:
            problems.append("host builds a Jetson bundle on the device: add jetson to formats")
        if self.opt_batch > self.max_batch:
            problems.append(f"opt_batch {self.opt_batch} is larger than max_batch {self.max_batch}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


LM_EVAL_TASK = r"^[A-Za-z0-9_][A-Za-z0-9_.:*+-]*$"  # lm-eval task, group or tag names (globs too)


class LmEvalSpec(Spec):
    """Benchmarks through lm-evaluation-harness, on the model the job has loaded (docs/evaluate.md)."""

    tasks: list[str] = Field(..., min_length=1, max_length=100,
                             description="lm-eval task, group or tag names (e.g. arc_easy, or a task your YAML defines)")
    include_path: str | None = Field(None, json_schema_extra=resource(READ), min_length=1, max_length=4096,
                                     description="a folder of task YAML files; its tasks run offline")
    limit: int | None = Field(None, ge=1, le=10_000_000, description="documents per task; None = every document")
    num_fewshot: int | None = Field(None, ge=0, le=100, description="worked examples in each prompt; None = the task's own")
    batch_size: int = Field(8, ge=1, le=1024, description="requests per forward pass")
    apply_chat_template: bool = Field(False, description="wrap each prompt in the model's chat template")

    @model_validator(mode="after")
    def _names(self) -> LmEvalSpec:
        bad = [t for t in self.tasks if len(t) > 200 or not re.match(LM_EVAL_TASK, t)]
        if bad:
            raise ValueError(f"not an lm-eval task name: {', '.join(map(repr, bad))} (letters, digits, _ . : - and *)")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError("tasks lists a task twice")
        return self


class EvaluateSpec(Spec):
    """evaluate.model: score a run, a variant or a base model on a dataset, and optionally on lm-eval
    benchmarks; the result is stored with the run (docs/evaluate.md)."""

    model: ModelRef = Field(..., description="the model: run (a finished fine-tune or variant), builtin, path or hub")
    _model_files = field_validator("model")(_no_endpoint)
    data: str | None = Field(None, json_schema_extra=resource(NAME_OR_PATH), min_length=1, max_length=4096,
                             description="a JSONL file (prompt/response or messages rows; text and label for a "
                                         "classifier) or a built-in dataset name; None = the run's validation data")
    validation_of: str | None = Field(None, json_schema_extra=resource(RUN), min_length=1, max_length=200, pattern=RUN_ID,
                                      description="score on this run's validation data (a base model beside its "
                                                  "fine-tune)")
    generation: bool = Field(True, description="score answers (or a classifier's labels) on the data; off: only lm_eval")
    limit: int = Field(100, ge=0, le=1_000_000, description="rows of the data to score; 0 = every row")
    max_new_tokens: int = Field(64, ge=1, le=4096, description="the longest answer generated (greedy decoding)")
    batch_size: int = Field(8, ge=1, le=1024, description="prompts generated together")
    text_column: str | None = Field(None, min_length=1, max_length=200,
                                    description="a classifier's text column; None = the run's (else text)")
    label_column: str | None = Field(None, min_length=1, max_length=200,
                                     description="a classifier's label column; None = the run's (else label)")
    lm_eval: LmEvalSpec | None = Field(None, description="lm-evaluation-harness benchmarks to run as well")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: a CUDA GPU when there is one")

    @property
    def source_run(self) -> str | None:
        """The run evaluated: the engine records it as this job's parent, as it does a variant's."""
        return self.model.run

    @model_validator(mode="after")
    def _check(self) -> EvaluateSpec:
        problems = []
        if self.data and self.validation_of:
            problems.append("data and validation_of both name the data: set only one")
        if not self.generation and self.lm_eval is None:
            problems.append("nothing to evaluate: turn generation on, or add lm_eval tasks")
        if self.generation and not (self.data or self.validation_of or self.model.run):
            problems.append(f"{self.model.label()} has no validation data of its own: set data (a JSONL file or a "
                            "built-in dataset such as short-answers) or validation_of (a run), or turn generation "
                            "off and run lm_eval only")
        if problems:
            raise ValueError("; ".join(problems))
        return self


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class ServeSpec(Spec):
    """serve.model: an OpenAI-compatible HTTP endpoint for a run, a variant or a base model (docs/serve.md)."""

    model: ModelRef = Field(..., description="the model: run (a finished fine-tune or variant), builtin, path or hub")
    _model_files = field_validator("model")(_no_endpoint)
    bind: str = Field("127.0.0.1", min_length=1, max_length=255, pattern=r"^[A-Za-z0-9.:-]+$",
                      description="the address to listen on: loopback (the default) needs no key; any other "
                                  "address (0.0.0.0: every interface) needs an API key")
    port: int = Field(8000, ge=0, le=65535, description="0: any free port (the job reports the one it took)")
    served_name: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]*$",
                                    description="the model's name in /v1/models and requests; None: the run's name, "
                                                "the built-in's or the Hub id")
    max_new_tokens: int = Field(512, ge=1, le=32768, description="a request's max_tokens when it sends none, and "
                                                                 "the most it may ask for")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: a CUDA GPU when there is one")
    backend: Literal["auto", "ember", "vllm"] = Field(
        "auto", description="auto: vLLM for a language model where CUDA GPUs and vLLM are (tensor parallel across "
                            "the GPUs), else Ember's server (transformers, llama.cpp or ONNX Runtime GenAI)")
    tensor_parallel: int | None = Field(None, ge=1, le=64, description="vLLM: GPUs the model is split across; "
                                                                        "None = every GPU the machine has")
    vllm_python: str | None = Field(None, json_schema_extra=resource(PROGRAM), min_length=1, max_length=4096,
                                    description="vLLM: the Python that has it (often a venv of its own); None = "
                                                "the engine's")
    api_key_file: str | None = Field(None, json_schema_extra=resource(SECRET_FILE), min_length=1, max_length=4096,
                                     description="a file holding the key clients must send (Authorization: Bearer "
                                                 "KEY); None: none on loopback, and on any other address the job "
                                                 "writes a new random key to api_key in its folder (yours only)")
    host: str | None = Field(None, json_schema_extra=resource(HOST), min_length=1, max_length=100,
                             description="an SSH host (Hosts page) to serve on: a model path is copied there, the "
                                         "server listens on the host's loopback, and the engine forwards a port of "
                                         "this machine to it")

    @property
    def source_run(self) -> str | None:
        return self.model.run

    @model_validator(mode="after")
    def _check(self) -> ServeSpec:
        if self.host and self.model.run:
            raise ValueError("a run is served on this machine; to serve it on a host, export it as hf (a merged "
                             "checkpoint, or gguf) and serve that folder or file there: model: {path: ...}")
        if self.host and self.bind not in LOOPBACK_HOSTS:
            raise ValueError(f"bind {self.bind!r}: on a host the server listens on the host's loopback and the "
                             "engine forwards a port of this machine to it; leave bind at 127.0.0.1")
        return self

    @property
    def needs_key(self) -> bool:
        """Clients must send a key: always when bound beyond loopback, where anyone on the network could call."""
        return bool(self.api_key_file) or self.bind not in LOOPBACK_HOSTS


@dataclass(frozen=True)
class JobKind:
    name: str
    description: str
    module: str  # run as `python -m <module> --run-dir <dir>`; empty: the engine runs it itself (a sweep)
    spec_model: type[BaseModel]
    resumable: bool = False  # jobs.resume re-runs it in its run dir, continuing from its checkpoint

    @property
    def title(self) -> str:
        """The kind in words, one for the GUI, the CLI and jobs.kinds (job_terms.KIND_NOUNS)."""
        return kind_noun(self.name)


JOB_KINDS: dict[str, JobKind] = {
    k.name: k
    for k in [
        JobKind(
            FINETUNE,
            "Fine-tune a text classifier, image classifier or causal LM (full, LoRA, prompt tuning) "
            "on one or more processes (DDP, FSDP2).",
            "engine.recipes.finetune",
            TrainSpec,
            resumable=True,
        ),
        JobKind(
            SYSTEM_PROBE,
            "CPU, memory, disk, GPUs, Python, torch and CUDA facts of the machine the job runs on.",
            "engine.recipes.system_probe",
            ProbeSpec,
        ),
        JobKind(
            LORA_MERGE,
            "Fold a LoRA fine-tune's adapters into its base weights: a plain model, checked to give the same "
            "outputs on validation examples.",
            "engine.recipes.lora_merge",
            LoraMergeSpec,
        ),
        JobKind(
            QUANTIZE,
            "Post-training quantization with ONNX Runtime: dynamic int8, static int8 (QDQ, calibrated on the "
            "run's data) or fp16, evaluated next to the parent.",
            "engine.recipes.compress",
            QuantizeSpec,
        ),
        JobKind(
            QAT,
            "Fine-tune with fake int8 quantization exactly as the deployed graph rounds, then export that int8 "
            "QDQ ONNX graph.",
            "engine.recipes.compress",
            QatSpec,
        ),
        JobKind(
            PRUNE,
            "Remove attention heads, FFN width or CNN channels (torch-pruning) to a target ratio, then "
            "recover with a short fine-tune.",
            "engine.recipes.compress",
            PruneSpec,
        ),
        JobKind(
            EXPORT,
            "Export a run or variant to ONNX, an ONNX Runtime package, TorchScript, torch.export, TensorRT, a "
            "Triton model repository or a Jetson bundle, each checked against the model; optionally build and "
            "benchmark the engine on a Jetson over SSH.",
            "engine.recipes.export",
            ExportSpec,
        ),
        JobKind(
            MODEL_DOWNLOAD,
            "Download a model from the Hugging Face Hub into the Hugging Face cache, with progress; a stopped "
            "or broken download continues where it stopped.",
            "engine.recipes.model_download",
            ModelDownloadSpec,
            resumable=True,
        ),
        JobKind(
            MODEL_PREPARE,
            "Write a built-in model's folder once (SmolLM2: de-quantized from its packaged GGUF file), with "
            "progress; checks and jobs that need it wait for it instead of converting it themselves.",
            "engine.recipes.model_prepare",
            ModelPrepareSpec,
        ),
        JobKind(
            EVALUATE,
            "Score a run, a compression variant or a base model: exact match, token F1, ROUGE-L, BLEU and chrF "
            "of its greedy answers on a dataset (accuracy and macro F1 for a classifier), and lm-eval benchmarks; "
            "stored with the run and compared beside its parent and base model.",
            "engine.recipes.evaluate",
            EvaluateSpec,
        ),
        JobKind(
            SERVE,
            "Serve a run, a variant or a base model behind an OpenAI-compatible HTTP endpoint (/v1/models, "
            "/v1/chat/completions and /v1/completions with streaming; /v1/classify for a classifier) until stopped, "
            "with live request and token figures.",
            "engine.recipes.serve",
            ServeSpec,
        ),
        JobKind(
            SWEEP,
            "Fine-tune one spec several times with some fields varied (grid, random or Optuna with pruning), "
            "each trial a fine-tune in the queue, the best by an evaluation metric marked.",
            "",
            SweepSpec,
            resumable=True,
        ),
        JobKind(
            PII_SCAN,
            "Look for personal data (e-mail, phone, card, IBAN, IP, URL, national ids; people, places and "
            "organisations with a named-entity model) in a dataset's text or an image folder's metadata, with "
            "Presidio: counts per column and type, a few masked examples.",
            "engine.recipes.pii",
            PiiScanSpec,
        ),
        JobKind(
            PII_SCRUB,
            "Write a copy of a dataset with the personal data a scan finds masked, tagged, faked or hashed "
            "(images: metadata stripped); the original is never changed, and a run trained on the copy "
            "records both in its lineage.",
            "engine.recipes.pii",
            PiiScrubSpec,
        ),
        JobKind(
            CHAIN,
            "Apply several techniques in order to one model (for example distil to fewer layers, prune, then int8), "
            "each stage a job whose parent is the previous stage; the last stage is scored beside the chain's start.",
            "",
            ChainSpec,
            resumable=True,
        ),
    ]
}


class SpecError(ValueError):
    """A spec that cannot run; ``fields`` lists every problem with a fix."""

    def __init__(self, message: str, fields: list[dict[str, str]], hint: str):
        super().__init__(message)
        self.fields = fields
        self.hint = hint

    def __str__(self) -> str:
        lines = [self.args[0]] + [f"  - {f['field']}: {f['message']} ({f['hint']})" for f in self.fields]
        return "\n".join(lines)


_HINTS = {
    "extra_forbidden": "remove it, or check its spelling",
    "missing": "add this field",
    "greater_than": "use a larger value",
    "greater_than_equal": "use a larger value",
    "less_than": "use a smaller value",
    "less_than_equal": "use a smaller value",
    "int_parsing": "write a whole number, such as 8",
    "int_from_float": "write a whole number, such as 8",
    "float_parsing": "write a number, such as 0.5",
    "literal_error": "use one of the values listed",
    "value_error": "change the values named in the message",
    "string_pattern_mismatch": "use an id from the runs list (letters, digits, '.', '_', '-')",
    "string_too_short": "fill it in",
}


def fields_of(exc: ValidationError) -> list[dict[str, str]]:
    return [
        {
            "field": ".".join(str(p) for p in err["loc"]) or "(spec)",
            "message": err["msg"],
            "hint": _HINTS.get(err["type"], "see the field's description in docs"),
        }
        for err in exc.errors()
    ]


def validate_spec(kind: str, spec: Any) -> BaseModel:
    """Return the validated spec model, or raise SpecError listing every problem."""
    if kind not in JOB_KINDS:
        raise SpecError(
            f"Unknown job kind {kind!r}",
            [{"field": "kind", "message": f"{kind!r} is not a job kind",
              "hint": f"use one of: {', '.join(sorted(JOB_KINDS))}"}],
            "Pick a job kind this engine knows (`ember jobs kinds`).",
        )
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise SpecError(f"Invalid spec for {kind}",
                        [{"field": "spec", "message": "must be a mapping", "hint": "write key: value pairs"}],
                        "The spec must be a mapping of field names to values.")
    try:
        return JOB_KINDS[kind].spec_model.model_validate(spec)
    except ValidationError as exc:
        raise SpecError(f"Invalid spec for {kind}", fields_of(exc),
                        "Fix the fields listed and start again.") from None


MAX_JOB_FILE_BYTES = 1 << 20  # a job file is a page of settings; the protocol's frame limit is 1 MiB too
MAX_JOB_FILE_NODES = 100_000  # values after anchors/aliases are expanded (a "billion laughs" file has 10**9)


def _check_size(doc: Any, path: Path, limit: int = MAX_JOB_FILE_NODES) -> None:
    """Refuse a document whose aliases expand past ``limit`` values; stops counting there, so it is bounded."""
    count, stack = 0, [doc]
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            raise SpecError(f"{path} expands to more than {limit:,} values (anchors and aliases)", [],
                            "Write the values out instead of repeating them through aliases (*name).")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def load_job_file(path: Path) -> tuple[str, BaseModel, str]:
    """Read a job YAML ``{kind, spec, name?}`` (the file ``ember run`` takes).

    safe_load only (no Python tags), a size limit, and a bound on what aliases expand to.
    """
    try:
        raw = Path(path).read_bytes()
        if len(raw) > MAX_JOB_FILE_BYTES:
            raise SpecError(f"{path} is {len(raw):,} bytes; a job file may be at most {MAX_JOB_FILE_BYTES:,}", [],
                            "A job file holds settings; point data.path at the dataset instead of pasting it in.")
        doc = yaml.safe_load(raw.decode("utf-8"))
    except FileNotFoundError:
        raise SpecError(f"No such file: {path}", [], "Check the path.") from None
    except IsADirectoryError:
        raise SpecError(f"{path} is a folder, not a job file", [], "Give the path of a .yaml job file.") from None
    except OSError as exc:
        raise SpecError(f"Cannot read {path}: {exc.strerror or exc}", [], "Check the path and its permissions.") from None
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise SpecError(f"{path} is not valid YAML: {str(exc)[:500]}", [], "Fix the YAML syntax.") from None
    _check_size(doc, path)
    if not isinstance(doc, dict) or "kind" not in doc:
        raise SpecError(f"{path} has no 'kind'",
                        [{"field": "kind", "message": "missing", "hint": "add kind: system.probe (for example)"}],
                        "A job file is a mapping with kind, spec and an optional name.")
    extra = set(doc) - {"kind", "spec", "name"}
    if extra:
        raise SpecError(f"{path} has unknown top-level keys",
                        [{"field": k, "message": "not a top-level key", "hint": "move it under spec:"} for k in sorted(extra)],
                        "A job file has only kind, spec and name at the top level.")
    kind, name = doc["kind"], doc.get("name") or ""
    for key, value in (("kind", kind), ("name", name)):
        if not isinstance(value, str) or len(value) > 200:
            raise SpecError(f"{path}: {key} must be a short text",
                            [{"field": key, "message": "must be a string of at most 200 characters",
                              "hint": "write it as plain text"}], "Fix the field listed.")
    return kind, validate_spec(kind, doc.get("spec") or {}), name


def dump_job_yaml(kind: str, spec: BaseModel, name: str = "") -> str:
    doc: dict[str, Any] = {"kind": kind}
    if name:
        doc["name"] = name
    doc["spec"] = spec.model_dump(mode="json")
    return yaml.safe_dump(doc, sort_keys=False)
