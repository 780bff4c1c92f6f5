"""The parallelism planner: for a model, a batch and the GPUs at hand, every layout that fits, fastest first.

Pure Python, like the estimate it calls: each candidate layout (data-parallel strategy and ZeRO stage,
tensor- and pipeline-parallel sizes, activation checkpointing and offload) is applied to the user's spec,
validated as a spec, and estimated with ``memory._estimate`` on N GPUs of the given memory. Relative
throughput is N times an efficiency: each technique's usual cost, documented in docs/estimator.md (a
first-order ranking, not a measurement). docs/parallelism.md shows the plans for Llama 1B and 8B.
"""

from __future__ import annotations

import math
from typing import Any

from engine.api.train_spec import TrainSpec
from engine.estimate.memory import _estimate, _merge, apply_patch
from engine.training.pipeline_split import bubble

GiB = 1 << 30
# Efficiency of each technique against an ideal share of the work (first-order, docs/estimator.md).
EFFICIENCY = {"ddp": 0.97, "fsdp": 0.93, "zero1": 0.96, "zero2": 0.95, "zero3": 0.90, "offload_optimizer": 0.6,
              "offload_params": 0.5, "checkpointing": 0.75, "activation_offload": 0.85, "tp_step": 0.92,
              "pp_hand_off": 0.97}
LIMIT = 12


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _microbatches(batch: int, pp: int) -> int | None:
    """The fewest micro-batches that divide the batch and keep the bubble small (2 per stage), or None."""
    for m in _divisors(batch):
        if m >= 2 * pp:
            return m
    return batch if batch >= pp else None


def candidates(spec: TrainSpec, facts: dict[str, Any], gpus: int, per_node: int) -> list[tuple[str, dict, float]]:
    """(description, spec patch, efficiency) for every layout worth estimating on ``gpus`` GPUs."""
    heads = int(facts.get("num_heads") or 0)
    layers = int(facts.get("num_blocks") or 0)
    lm = spec.task == "causal_lm"
    out: list[tuple[str, dict, float]] = []
    for tp in _divisors(gpus):
        if tp > 1 and (not lm or tp > per_node or not heads or heads % tp):
            continue  # tensor parallelism within a machine, for a language model whose heads split evenly
        for pp in _divisors(gpus // tp):
            if pp > 1 and (not lm or not layers or pp > layers or spec.data.packing or spec.objective != "sft"):
                continue
            dp = gpus // (tp * pp)
            for base, dist, eff in _data_parallel(dp, tp * pp > 1):
                schedules = [("", {}, 1.0)]
                if pp > 1:
                    m = _microbatches(spec.batch_size, pp)
                    if m is None:
                        continue
                    schedules = []
                    for schedule in ("1f1b", "interleaved_1f1b"):
                        if schedule == "interleaved_1f1b" and (m % pp or layers < 2 * pp):
                            continue
                        schedules.append((f"{pp} stages ({schedule}, {m} micro-batches)",
                                          {"pipeline_parallel": pp, "pipeline_schedule": schedule,
                                           "pipeline_microbatches": m},
                                          (1 - bubble(schedule, pp, m)) * EFFICIENCY["pp_hand_off"]))
                for pp_text, pp_patch, pp_eff in schedules:
                    tp_text = f"{tp}-way tensor split" if tp > 1 else ""
                    tp_eff = EFFICIENCY["tp_step"] ** math.log2(tp)
                    distributed = {**dist, "nproc": gpus, "tensor_parallel": tp, "pipeline_parallel": 1, **pp_patch}
                    for memory_text, memory_patch, memory_eff in MEMORY_OPTIONS:
                        text = ", ".join(t for t in (base, tp_text, pp_text, memory_text) if t)
                        patch = {"distributed": distributed, **memory_patch}
                        out.append((text, patch, eff * tp_eff * pp_eff * memory_eff))
    return out


def _data_parallel(dp: int, split: bool) -> list[tuple[str, dict, float]]:
    """How the replicas share their work: (text, distributed fields, efficiency)."""
    off = {"zero_stage": 2, "offload_optimizer": False, "offload_params": False}
    if dp == 1 and split:
        return [("", {"strategy": "fsdp", **off}, 1.0)]  # one replica, split: nothing to share
    if dp == 1:
        # One GPU; DeepSpeed can still move the optimizer state (and the weights) to host RAM.
        return [("1 GPU", {"strategy": "single", **off}, 1.0),
                ("1 GPU, ZeRO-2 with the optimizer state in RAM",
                 {"strategy": "deepspeed", **off, "offload_optimizer": True}, EFFICIENCY["offload_optimizer"]),
                ("1 GPU, ZeRO-3 with the optimizer state and weights in RAM",
                 {"strategy": "deepspeed", "zero_stage": 3, "offload_optimizer": True, "offload_params": True},
                 EFFICIENCY["offload_optimizer"] * EFFICIENCY["offload_params"])]
    if split:  # DDP and DeepSpeed do not take split models
        return [(f"FSDP2 over {dp} replicas", {"strategy": "fsdp", **off}, EFFICIENCY["fsdp"])]
    out = [(f"DDP over {dp} GPUs", {"strategy": "ddp", **off}, EFFICIENCY["ddp"]),
           (f"FSDP2 over {dp} GPUs", {"strategy": "fsdp", **off}, EFFICIENCY["fsdp"])]
    for stage in (1, 2, 3):
        out.append((f"ZeRO-{stage} over {dp} GPUs", {"strategy": "deepspeed", **off, "zero_stage": stage},
                    EFFICIENCY[f"zero{stage}"]))
    out.append((f"ZeRO-3 over {dp} GPUs, optimizer state in RAM",
                {"strategy": "deepspeed", **off, "zero_stage": 3, "offload_optimizer": True},
                EFFICIENCY["zero3"] * EFFICIENCY["offload_optimizer"]))
    out.append((f"ZeRO-3 over {dp} GPUs, optimizer state and weights in RAM",
                {"strategy": "deepspeed", "zero_stage": 3, "offload_optimizer": True, "offload_params": True},
                EFFICIENCY["zero3"] * EFFICIENCY["offload_optimizer"] * EFFICIENCY["offload_params"]))
    return out


# Activation memory options: (text, spec fields, efficiency).
MEMORY_OPTIONS = (
    ("", {"activation_checkpointing": False, "activation_offload": False}, 1.0),
    ("activation checkpointing", {"activation_checkpointing": True, "activation_offload": False},
     EFFICIENCY["checkpointing"]),
    ("activation checkpointing and offload", {"activation_checkpointing": True, "activation_offload": True},
     EFFICIENCY["checkpointing"] * EFFICIENCY["activation_offload"]),
)


def plan(spec: TrainSpec, facts: dict[str, Any], gpus: int, gpu_memory: int, per_node: int = 8,
         gpu_name: str = "", host_ram: int | None = None) -> dict[str, Any]:
    """{plans: [{layout, spec_patch, memory_per_gpu, capacity, verdict, throughput, recommended}], fitting,
    considered, notes}: every candidate layout on ``gpus`` GPUs of ``gpu_memory`` bytes, the fitting ones
    fastest first."""
    base = spec.model_copy(update={"device": "cuda", "precision": "bf16" if spec.precision == "auto"
                                   else spec.precision})
    nodes = math.ceil(gpus / per_node)
    machine = {"gpus": [{"name": gpu_name or f"GPU ({gpu_memory / GiB:.0f} GB)", "memory_total": gpu_memory}] * gpus,
               "ram": {"available": host_ram if host_ram is not None else nodes * 1024 * GiB},
               "cpu": {"cores": 32 * nodes}}
    rows: list[dict[str, Any]] = []
    for text, patch, eff in candidates(base, facts, gpus, per_node):
        trial = apply_patch(base, patch)
        if trial is None:
            continue  # a combination the spec refuses (e.g. QLoRA with a split model)
        result = _estimate(trial, facts, machine)
        worst = max((d for d in result["devices"] if d["kind"] == "cuda"), key=lambda d: d["total"])
        shown = patch if gpus <= per_node else _merge(patch, {"distributed": {"nproc": per_node}})
        rows.append({"layout": text, "spec_patch": shown, "memory_per_gpu": worst["total"],
                     "capacity": gpu_memory, "verdict": result["verdict"], "throughput": round(gpus * eff, 2)})
    order = {"fits": 0, "tight": 1, "will_not_fit": 2}
    rows.sort(key=lambda r: (order[r["verdict"]], -r["throughput"] if r["verdict"] != "will_not_fit"
                             else r["memory_per_gpu"], r["memory_per_gpu"]))
    fitting = sum(r["verdict"] != "will_not_fit" for r in rows)
    if rows and rows[0]["verdict"] != "will_not_fit":
        rows[0]["recommended"] = True
    notes = [f"{gpus} GPU(s) of {gpu_memory / GiB:.0f} GB" + (f" on {nodes} machines of {per_node}" if nodes > 1
                                                               else "") + "; precision "
             f"{base.precision}. Throughput is in GPUs' worth of work: the GPUs times each technique's usual "
             "efficiency (docs/estimator.md), a ranking rather than a measurement."]
    if nodes > 1:
        notes.append("Tensor parallelism stays within a machine; the layout's nproc is per machine (set the "
                     "machines under Several machines).")
    return {"plans": rows[:LIMIT], "fitting": fitting, "considered": len(rows), "notes": notes}
