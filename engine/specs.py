"""Typed job specs: what a job needs to run, validated before it starts.

Each job kind has a pydantic model; a spec travels as YAML (``spec.yaml`` in the
run dir, or a file a user writes by hand for ``ember run``). Validation reports
every problem at once, each with the field and a plain-language fix.
Imports only stdlib, pydantic and yaml: the GUI validates with these too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.train_spec import TrainSpec


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProbeSpec(Spec):
    """system.probe: facts about this machine, then optional utilisation samples."""

    samples: int = Field(0, ge=0, le=86_400, description="utilisation samples to take after the facts")
    interval_s: float = Field(1.0, gt=0, le=3600, description="seconds between samples")


class LoraMergeSpec(Spec):
    """compress.lora_merge: fold a LoRA fine-tune's adapters into its base weights."""

    source_run: str = Field(..., min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                            description="id of a finished train.finetune run with method lora")
    parity_samples: int = Field(64, ge=1, le=100_000,
                                description="validation examples on which the merged model must match the adapters")


@dataclass(frozen=True)
class JobKind:
    name: str
    title: str
    description: str
    module: str  # run as `python -m <module> --run-dir <dir>`
    spec_model: type[BaseModel]
    resumable: bool = False  # jobs.resume re-runs it in its run dir, continuing from its checkpoint


JOB_KINDS: dict[str, JobKind] = {
    k.name: k
    for k in [
        JobKind(
            "train.finetune",
            "Fine-tune",
            "Fine-tune a text classifier, image classifier or causal LM (full, LoRA, prompt tuning) "
            "on one or more processes (DDP, FSDP2).",
            "engine.recipes.finetune",
            TrainSpec,
            resumable=True,
        ),
        JobKind(
            "system.probe",
            "Probe this machine",
            "CPU, memory, disk, GPUs, Python, torch and CUDA facts of the machine the job runs on.",
            "engine.recipes.system_probe",
            ProbeSpec,
        ),
        JobKind(
            "compress.lora_merge",
            "Merge LoRA",
            "Fold a LoRA fine-tune's adapters into its base weights: a plain model, checked to give the same "
            "outputs on validation examples.",
            "engine.recipes.lora_merge",
            LoraMergeSpec,
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


def _fields_of(exc: ValidationError) -> list[dict[str, str]]:
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
        raise SpecError(f"Invalid spec for {kind}", _fields_of(exc),
                        "Fix the fields listed and start again.") from None


def load_job_file(path: Path) -> tuple[str, BaseModel, str]:
    """Read a job YAML ``{kind, spec, name?}`` (the file ``ember run`` takes)."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"No such file: {path}", [], "Check the path.") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path} is not valid YAML: {exc}", [], "Fix the YAML syntax.") from None
    if not isinstance(doc, dict) or "kind" not in doc:
        raise SpecError(f"{path} has no 'kind'",
                        [{"field": "kind", "message": "missing", "hint": "add kind: system.probe (for example)"}],
                        "A job file is a mapping with kind, spec and an optional name.")
    extra = set(doc) - {"kind", "spec", "name"}
    if extra:
        raise SpecError(f"{path} has unknown top-level keys",
                        [{"field": k, "message": "not a top-level key", "hint": "move it under spec:"} for k in sorted(extra)],
                        "A job file has only kind, spec and name at the top level.")
    kind = str(doc["kind"])
    return kind, validate_spec(kind, doc.get("spec") or {}), str(doc.get("name") or "")


def dump_job_yaml(kind: str, spec: BaseModel, name: str = "") -> str:
    doc: dict[str, Any] = {"kind": kind}
    if name:
        doc["name"] = name
    doc["spec"] = spec.model_dump(mode="json")
    return yaml.safe_dump(doc, sort_keys=False)
