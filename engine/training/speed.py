"""The spec's "auto" speed choices made concrete for the device a run got (docs/speed.md).

``resolve`` runs once per process at the start of a fine-tune, before the task builds the
model, so every later reader (the task, the strategies, the checkpoint's copy of the spec)
sees concrete values. It also returns ``choices``: what was picked and why, which the run
reports in its ``run_info`` event and the Monitor shows.

What "auto" picks, and why:
- precision: bf16 autocast on a CUDA GPU that runs bf16 natively (compute capability 8.0+:
  A100, H100, L4, RTX 30xx and later, Jetson Orin); fp32 elsewhere. CPU autocast to bf16 is
  slower than fp32 on most CPUs without AMX, and fp16 needs loss scaling, so neither is a default.
- attention: left to transformers, which uses PyTorch's scaled dot-product attention (flash or
  memory-efficient kernels on CUDA) for every architecture that supports it. flash_attention_2
  (the flash-attn package) is used only when asked for.
- compile: on for CUDA with strategy single or ddp. FSDP2 and DeepSpeed wrap parameters in ways
  whole-model compilation does not always follow, QLoRA's 4-bit kernels break graphs, and on CPU
  compile time rarely pays back in the short runs people make there.
- optimizer_impl: fused AdamW on CUDA (one kernel for all parameters), foreach on CPU and with
  DeepSpeed (which steps the optimizer on its own partitions).
- data workers: 0 on CPU (examples are tokenized in memory up front; workers would compete
  with the compute for the same cores); on CUDA up to 4 per process, leaving a core per process.
"""

from __future__ import annotations

import os
from typing import Any

from engine.api.train_spec import TrainSpec

# GPUs without native bf16 (compute capability below 8.0); matched against the name nvidia-smi gives.
NO_BF16_GPUS = ("T4", "V100", "P100", "P40", "P4 ", "K80", "M60", "M40", "TITAN V", "TITAN X", "GTX",
                "RTX 20", "Quadro RTX", "Quadro P")


def gpu_has_bf16(name: str) -> bool:
    """By name, for the estimator, which reads nvidia-smi and never imports torch."""
    return not any(old.lower() in f"{name} ".lower() for old in NO_BF16_GPUS)


def estimated_precision(spec: TrainSpec, kind: str, gpu_name: str = "") -> str:
    """The precision "auto" will resolve to on a device of this kind (for the fit estimate)."""
    if spec.precision != "auto":
        return spec.precision
    return "bf16" if kind == "cuda" and gpu_has_bf16(gpu_name) else "fp32"


def _cuda_bf16(device: str) -> bool:
    import torch

    major, _minor = torch.cuda.get_device_capability(device)
    return major >= 8


def auto_workers(device: str, local_world: int) -> int:
    if not device.startswith("cuda"):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(4, cores // max(1, local_world) - 1))


def resolve(spec: TrainSpec, device: str, local_world: int = 1) -> tuple[TrainSpec, dict[str, Any]]:
    """(the spec with every "auto" replaced, the choices with a note for each automatic one)."""
    cuda = device.startswith("cuda")
    strategy = spec.distributed.strategy
    notes: list[str] = []
    precision = spec.precision
    if precision == "auto":
        precision = "bf16" if cuda and _cuda_bf16(device) else "fp32"
        notes.append(f"precision {precision}: " + ("the GPU runs bf16 natively" if precision == "bf16" else
                                                   "bf16 autocast is not faster here" if not cuda else
                                                   "this GPU has no native bf16"))
    compile_on = spec.speed.compile == "on"
    if spec.speed.compile == "auto":
        compile_on = cuda and strategy in ("single", "ddp") and spec.method.kind != "qlora"
        why = ("CUDA with " + strategy) if compile_on else (
            "CPU" if not cuda else "QLoRA" if spec.method.kind == "qlora" else f"strategy {strategy}")
        notes.append(f"torch.compile {'on' if compile_on else 'off'} ({why})")
    impl = spec.speed.optimizer_impl
    if impl == "auto":
        impl = "fused" if cuda and strategy != "deepspeed" and spec.optim.optimizer == "adamw" else "foreach"
        notes.append(f"{impl} optimizer kernel")
    workers = spec.data.num_workers
    if workers is None:
        workers = auto_workers(device, local_world)
        notes.append(f"{workers} data worker(s) per process")
    resolved = spec.model_copy(deep=True)
    resolved.precision = precision  # type: ignore[assignment]
    resolved.speed.compile = "on" if compile_on else "off"
    resolved.speed.optimizer_impl = impl  # type: ignore[assignment]
    resolved.data.num_workers = workers
    choices = {"precision": precision, "attention": spec.speed.attention, "compile": compile_on,
               "optimizer_impl": impl if spec.optim.optimizer == "adamw" else "sgd", "num_workers": workers,
               "pin_memory": cuda, "prefetch_factor": spec.data.prefetch_factor if workers else None,
               "packing": spec.data.packing, "group_by_length": spec.data.group_by_length, "notes": notes}
    return resolved, choices


def attention_kwargs(spec: TrainSpec) -> dict[str, str]:
    """from_pretrained's attn_implementation when the spec names one ("auto": the transformers default)."""
    return {} if spec.speed.attention == "auto" else {"attn_implementation": spec.speed.attention}


def attention_in_use(model: Any) -> str | None:
    """The attention kernel a transformers model was built with (sdpa, eager, flash_attention_2)."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) if config is not None else None
