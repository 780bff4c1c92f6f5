"""The compression jobs' specs (compress.lora_merge, .quantize, .qat, .prune) and the evaluation they share.

Stdlib + pydantic: the GUI imports this module. ``engine.api.specs`` registers them as job kinds;
``engine.api.chain_spec`` strings them into a chain.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.api.resources import RUN, resource

RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvalSpec(Spec):
    """How a variant is scored next to its parent (docs/compression.md)."""

    samples: int = Field(200, ge=0, le=1_000_000, description="held-out examples to score; 0 = the whole split")
    batch_size: int = Field(16, ge=1, le=4096, description="the batch N of the second latency figure")
    warmup: int = Field(3, ge=0, le=1000, description="untimed runs before timing")
    repeats: int = Field(20, ge=3, le=100_000, description="timed runs per batch size")
    threads: int = Field(0, ge=0, le=1024, description="CPU threads for both models; 0 = every core")
    runtime: Literal["auto", "onnxruntime-cpu", "onnxruntime-cuda", "torch"] = Field(
        "auto", description="auto: ONNX Runtime (CUDA where present) for every model that exports")


class CalibrationSpec(Spec):
    samples: int = Field(64, ge=1, le=100_000, description="training examples the activation ranges come from")
    method: Literal["minmax", "entropy", "percentile"] = "minmax"


class CompressSpec(Spec):
    source_run: str = Field(..., json_schema_extra=resource(RUN), min_length=1, max_length=200, pattern=RUN_ID,
                            description="id of a finished train.finetune run (the parent)")
    eval: EvalSpec = Field(default_factory=EvalSpec)
    baseline_run: str | None = Field(None, json_schema_extra=resource(RUN), min_length=1, max_length=200, pattern=RUN_ID,
                                     description="score the variant beside this run instead of the parent (a "
                                                 "chain's last stage: beside the model the chain started from)")


class LoraMergeSpec(CompressSpec):
    """compress.lora_merge: fold a LoRA fine-tune's adapters into its base weights."""

    parity_samples: int = Field(64, ge=1, le=100_000,
                                description="validation examples on which the merged model must match the adapters")


class QuantizeSpec(CompressSpec):
    """compress.quantize: ONNX Runtime post-training quantization of the parent's ONNX export."""

    mode: Literal["dynamic", "static", "fp16", "fp32"] = Field(
        "dynamic", description="dynamic int8 (CPU servers), static int8 QDQ (calibrated; TensorRT), fp16 (GPU/Jetson), "
                               "fp32 (the graph optimization alone)")
    optimize: bool = Field(True, description="fuse attention, LayerNorm and GELU with ONNX Runtime's transformer "
                                             "optimizer first (variants ONNX Runtime runs on a CPU: dynamic, static "
                                             "cpu, fp32)")
    calibration: CalibrationSpec = Field(default_factory=CalibrationSpec)
    target: Literal["tensorrt", "cpu"] = Field(
        "tensorrt", description="static int8's form: tensorrt = symmetric int8 activations (TensorRT, Jetson); "
                                "cpu = unsigned asymmetric activations, ONNX Runtime's fast path on x86 CPUs")
    per_channel: bool = Field(True, description="one int8 scale per output channel of each weight")
    exclude_nodes: list[str] = Field(default_factory=list, description="ONNX node names kept in float")
    exclude_op_types: list[str] = Field(default_factory=list, description="ONNX op types kept in float (e.g. Gemm)")


class QatSpec(CompressSpec):
    """compress.qat: fine-tune with ONNX Runtime's int8 rounding simulated, then that int8 QDQ ONNX graph."""

    steps: int = Field(50, ge=1, le=1_000_000, description="fine-tuning steps with fake quantization")
    lr: float = Field(2e-5, gt=0, le=1)
    batch_size: int = Field(16, ge=1, le=4096)
    calibration: CalibrationSpec = Field(default_factory=CalibrationSpec)
    target: Literal["tensorrt", "cpu"] = Field("tensorrt", description="the int8 form, as in compress.quantize")
    teacher_alpha: float = Field(0.5, ge=0, le=1, description="weight of the fp32 parent's soft labels in the loss "
                                                            "(knowledge distillation from the unquantized model); "
                                                            "0 = the labels only")
    optimize: bool = Field(True, description="fuse LayerNorm and GELU with ONNX Runtime's transformer optimizer "
                                             "before quantizing (target cpu)")

    @field_validator("calibration")
    @classmethod
    def _ranges_qat_can_train(cls, value: CalibrationSpec) -> CalibrationSpec:
        if value.method == "entropy":  # its thresholds come from ORT's histogram search, which QAT does not run
            raise ValueError("QAT calibrates with minmax or percentile, not entropy")
        return value


class PruneSpec(CompressSpec):
    """compress.prune: structured pruning (torch-pruning), then a recovery fine-tune."""

    target: Literal["params", "macs"] = Field("params", description="what the ratio is a share of")
    ratio: float = Field(0.3, gt=0, lt=1, description="share of parameters (or MACs) to remove")
    iterative_steps: int = Field(1, ge=1, le=100, description="prune in this many steps, recovering between them")
    vocabulary: bool = Field(False, description="text models: also keep only the embedding rows of the tokens the "
                                                "training data uses (the rest read as the nearest kept token); "
                                                "counts toward ratio")
    recovery_steps: int = Field(50, ge=0, le=1_000_000, description="fine-tuning steps after pruning; 0 = none")
    lr: float = Field(5e-5, gt=0, le=1)
    batch_size: int = Field(16, ge=1, le=4096)
