"""A compression chain: several techniques applied in order to one model, each stage a job of its own.

``compress.chain`` names the model it starts from (``source_run``, a finished fine-tune) and its
``stages``, for example distil to 3 layers, then prune 30% of the parameters, then int8. The engine runs
the stages one after the other (engine/daemon/chains.py): a distil stage is a fine-tune whose teacher is
the previous stage, the others are the compression jobs of their technique with the previous stage as
their ``source_run``. The last stage is scored beside the chain's start (``baseline_run``), so the chain's
row on Compare shows what the whole chain cost and gained, measured side by side.
Stdlib + pydantic: the GUI imports this module (docs/compression.md, "Chains").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.api.compress_spec import RUN_ID, EvalSpec, PruneSpec, QatSpec, QuantizeSpec
from engine.api.job_terms import FINETUNE, PRUNE, QAT, QUANTIZE
from engine.api.resources import RUN, resource

TECHNIQUES = ("distill", "prune", "quantize", "qat")
TECHNIQUE_KINDS = {"distill": FINETUNE, "prune": PRUNE, "quantize": QUANTIZE, "qat": QAT}
# Quantized stages write an ONNX graph: nothing after them can train or prune it.
LAST_ONLY = ("quantize", "qat")


class DistillStage(BaseModel):
    """A distil stage's settings: the student keeps ``student_layers`` of the previous stage's blocks."""

    model_config = ConfigDict(extra="forbid")

    student_layers: int = Field(3, ge=1, le=1024, description="transformer blocks the student keeps")
    steps: int = Field(300, ge=1, le=1_000_000, description="fine-tuning steps of the student")
    lr: float = Field(5e-5, gt=0, le=1)
    batch_size: int = Field(16, ge=1, le=4096)
    temperature: float = Field(2.0, gt=0, le=100)
    alpha: float = Field(0.5, ge=0, le=1, description="weight of the teacher's soft labels")


STAGE_MODELS: dict[str, type[BaseModel]] = {"distill": DistillStage, "prune": PruneSpec, "quantize": QuantizeSpec,
                                            "qat": QatSpec}


class ChainStage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    technique: Literal["distill", "prune", "quantize", "qat"]
    settings: dict[str, Any] = Field(default_factory=dict,
                                     description="the technique's own fields (those of its job kind's spec, "
                                                 "without source_run and eval)")

    @model_validator(mode="after")
    def _settings_fit(self) -> ChainStage:
        for key in ("source_run", "eval", "baseline_run"):
            if key in self.settings:
                raise ValueError(f"{self.technique} stage: {key} is set by the chain, not by a stage")
        try:
            STAGE_MODELS[self.technique].model_validate(self._doc("placeholder"))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"{self.technique} stage: {problems}") from None
        return self

    def _doc(self, source_run: str) -> dict[str, Any]:
        return dict(self.settings) if self.technique == "distill" else {**self.settings, "source_run": source_run}

    def label(self) -> str:
        s = self.settings
        if self.technique == "distill":
            return f"distilled to {s.get('student_layers', 3)} layers"
        if self.technique == "prune":
            return f"pruned {float(s.get('ratio', 0.3)):.0%}" + (" with vocabulary" if s.get("vocabulary") else "")
        if self.technique == "qat":
            return "QAT int8"
        mode = s.get("mode", "dynamic")
        return {"dynamic": "int8 dynamic", "static": "int8 static", "fp16": "fp16", "fp32": "fp32 fused"}[mode]


class ChainSpec(BaseModel):
    """compress.chain: apply the stages in order to one model, each stage's output the next stage's input."""

    model_config = ConfigDict(extra="forbid")

    source_run: str = Field(..., json_schema_extra=resource(RUN), min_length=1, max_length=200, pattern=RUN_ID,
                            description="id of the finished fine-tune the chain starts from")
    stages: list[ChainStage] = Field(..., min_length=1, max_length=8, description="applied in this order")
    eval: EvalSpec = Field(default_factory=EvalSpec, description="how every stage is scored")

    @model_validator(mode="after")
    def _order(self) -> ChainSpec:
        names = [s.technique for s in self.stages]
        for i, name in enumerate(names):
            if name in LAST_ONLY and i != len(names) - 1:
                raise ValueError(f"stage {i + 1} ({name}) writes an int8 or fp16 ONNX graph, which no later stage "
                                 "can change: put it last")
            if name == "distill" and i != 0:
                raise ValueError(f"stage {i + 1} (distill) builds its student from the fine-tune's spec, which a "
                                 "pruned model no longer matches: put distill first")
        return self

    def label(self) -> str:
        return " → ".join(s.label() for s in self.stages)

    def stage_job(self, number: int, previous: str, start_spec: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        """Stage ``number`` (0-based) as ``(kind, spec)``, applied to run ``previous``.

        ``start_spec`` is the spec of the fine-tune the chain starts from (a distil stage is that fine-tune
        again, with the previous stage as its teacher).
        """
        stage = self.stages[number]
        last = number == len(self.stages) - 1
        if stage.technique == "distill":
            if start_spec is None:
                raise ValueError("distill needs the chain to start from a fine-tune (train.finetune)")
            return FINETUNE, distill_spec(start_spec, DistillStage.model_validate(stage.settings), previous)
        doc = {**stage._doc(previous), "eval": self.eval.model_dump(mode="json")}
        if last and number > 0:
            doc["baseline_run"] = self.source_run
        return TECHNIQUE_KINDS[stage.technique], doc


def distill_spec(start: dict[str, Any], stage: DistillStage, teacher: str) -> dict[str, Any]:
    """The fine-tune ``start`` again as a student of ``teacher``: the whole model trained, ``stage.steps`` steps."""
    optim = {**(start.get("optim") or {}), "lr": stage.lr}
    return {**start, "method": {"kind": "full"}, "max_steps": stage.steps, "epochs": None, "batch_size": stage.batch_size,
            "grad_accum": 1, "optim": optim, "eval_every": max(1, stage.steps // 4), "early_stopping": None,
            "resume": True, "distill": {"teacher_run": teacher, "student_layers": stage.student_layers,
                                        "temperature": stage.temperature, "alpha": stage.alpha}}


# Chains a user can start from in the Compress wizard, by what they promise.
PRESETS: dict[str, list[dict[str, Any]]] = {
    "smallest within 1 point": [
        # A 3-block student in int8 is a fifth of MiniLM's size. Measured on the built-in tickets (docs/
        # compression.md): distil 3 -> int8 dynamic +0.62 point at 0.19x the size in two runs; with a 10% prune
        # of heads and FFN between them -1.88 in two runs (0.17x), and vocabulary pruning cost 5 points.
        {"technique": "distill", "settings": {"student_layers": 3, "steps": 300}},
        {"technique": "quantize", "settings": {"mode": "dynamic"}},
    ],
    "fast on a CPU": [
        {"technique": "prune", "settings": {"ratio": 0.3, "iterative_steps": 2, "recovery_steps": 100}},
        {"technique": "quantize", "settings": {"mode": "dynamic"}},
    ],
}
