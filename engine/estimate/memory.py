"""Will a fine-tune fit, and how fast will it run: memory per device before launch.

Pure Python (no torch): the engine process calls ``estimate(spec, facts, machine)`` with the
model facts from engine/estimate/facts.py and the machine.info reply. Model states follow
the ZeRO paper (Rajbhandari et al., 2020) as DeepSpeed implements them; activations come from
the facts (measured on the meta device); the rest is documented constants. docs/estimator.md
gives the formulas, the constants and the accuracy measured against real runs.
"""

from __future__ import annotations

import math
from typing import Any

from engine.api.train_spec import TrainSpec
from engine.estimate.throughput import throughput
from engine.training.pipeline_split import split, stage_costs, stages_per_process
from engine.training.speed import estimated_precision

MiB = 1 << 20
GiB = 1 << 30
FITS_BELOW = 0.85  # of capacity: above it a run is "tight" (fragmentation, other processes)
CUDA_CONTEXT = 512 * MiB  # CUDA context and kernel images: outside the allocator, not in its peak
CUDA_WORKSPACE = 64 * MiB  # cuBLAS workspaces (32 MiB a handle on Hopper; forward and backward threads)
ALLOCATOR_SLACK = 0.10  # the caching allocator reserves about this much beyond what it hands out
AMP_ACTIVATIONS = 0.65  # autocast: matmul outputs in 16 bits, norms/residuals fp32, 16-bit input copies
HALF_ACTIVATIONS = 0.5  # DeepSpeed 16-bit: the whole module runs in bf16/fp16
NF4_BYTES = 0.5 + 4 / 64 / 4 + 2 / 256  # QLoRA: 4 bits, an fp8 absmax per 64, fp32 per 256 (double quant)
STATE_BYTES = {"adamw": 8, "sgd": 4, "none": 0}  # Adam: momentum + variance; SGD: momentum; SGD at momentum 0
PARTS = ("weights", "gradients", "optimizer", "activations", "overhead")
# Tensor parallelism without sequence parallelism: of a block's activations (Korthikanti et al. 2022,
# s·b·h·(34 + 5as/h) bytes), the norms' and residuals' 10 stay whole on every process, the rest is split.
TP_WHOLE_ACTIVATIONS = 10 / 34


# ---------------------------------------------------------------- model states


def model_state_bytes(params_total: int, trainable: int, largest_layer: int, stage: int, world: int,
                      precision: str, offload_optimizer: bool = False, offload_params: bool = False, *,
                      layout: str = "zero", optimizer: str = "adamw") -> dict[str, dict[str, int]]:
    """Bytes of weights, gradients and optimizer states per rank, on the device and in host RAM.

    ``layout="zero"`` is DeepSpeed's: with 16-bit precision every parameter has a 16-bit copy
    (2 bytes) and each trainable one 2 bytes of 16-bit gradient, 4 of fp32 gradient and 12 of
    optimizer state (fp32 master weight, Adam momentum and variance). Stage 1 partitions the
    optimizer state and fp32 gradients over ``world`` ranks, stage 2 also the 16-bit gradients,
    stage 3 also the parameters, plus the largest layer gathered whole (16-bit parameters and
    gradients). Offload moves the optimizer state and fp32 gradients (and at stage 3 with
    ``offload_params`` the parameters) to host RAM. fp32 training keeps 4-byte copies instead.

    ``layout="amp"`` is the engine's own loop (single, DDP, FSDP2): fp32 weights, fp32
    gradients for trainable parameters, optimizer states; stage 3 here means FSDP2 full
    sharding, with the largest block (``largest_layer``) gathered.
    """
    half = precision in ("bf16", "fp16")
    n = max(1, world)
    states = STATE_BYTES.get(optimizer, 8)
    dev = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
    host = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
    if layout == "amp":
        dev["weights"] = 4 * params_total
        dev["gradients"] = 4 * trainable
        dev["optimizer"] = states * trainable
        if stage >= 3:
            w16 = 2 if half else 4
            dev = {k: v / n for k, v in dev.items()}
            dev["weights"] += 2 * w16 * largest_layer  # the block in use and the one prefetched
            dev["gradients"] += 4 * largest_layer  # its unsharded gradients, reduced in fp32
        return _rounded(dev, host)
    w = 2 if half else 4
    weights = w * params_total
    work_grads = w * trainable
    fp32_grads = 4 * trainable
    optim = (4 + states) * trainable  # fp32 master weights + states
    if stage >= 1:
        fp32_grads, optim = fp32_grads / n, optim / n
    if stage >= 2:
        work_grads /= n
    gather = 0
    if stage >= 3:
        weights /= n
        work_grads = 0  # reduced straight into the fp32 partition
        gather = w * largest_layer
    if offload_optimizer:
        host["optimizer"], host["gradients"] = optim, fp32_grads
        optim = fp32_grads = work_grads = 0
    if offload_params and stage >= 3:
        host["weights"], weights = weights, 0
    dev["weights"] = weights + gather
    dev["gradients"] = work_grads + fp32_grads + gather
    dev["optimizer"] = optim
    return _rounded(dev, host)


def _rounded(dev: dict[str, float], host: dict[str, float]) -> dict[str, dict[str, int]]:
    out = {}
    for where, parts in (("device", dev), ("host", host)):
        r = {k: int(round(v)) for k, v in parts.items()}
        r["total"] = sum(r.values())
        out[where] = r
    return out


# ---------------------------------------------------------------- the estimate


def estimate(spec: TrainSpec, facts: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """The estimate.fit reply: devices, verdict, reason, suggestions, params, throughput, notes."""
    if spec.precision == "auto":  # what the run will pick on this machine (engine/training/speed.py)
        gpus = machine.get("gpus") or []
        name = str(gpus[0].get("name", "")) if gpus else ""
        spec = spec.model_copy(update={"precision": estimated_precision(spec, _device_kind(spec, machine), name)})
    reply = _estimate(spec, facts, machine)
    if reply["verdict"] != "fits":
        reply["suggestions"] = suggestions(spec, facts, machine, reply)
    return reply


def _device_kind(spec: TrainSpec, machine: dict[str, Any]) -> str:
    """Where the run will train: "cuda" when asked for, or on "auto" when the machine has a GPU."""
    return "cuda" if spec.device == "cuda" or (spec.device == "auto" and machine.get("gpus")) else "cpu"


def _method_counts(spec: TrainSpec, facts: dict[str, Any]) -> tuple[int, int]:
    counts = (facts.get("by_method") or {}).get(spec.method.kind)
    if counts:
        return int(counts["total"]), int(counts["trainable"])
    return int(facts["params_total"]), int(facts["params_trainable"])


def _estimate(spec: TrainSpec, facts: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    d = spec.distributed
    gpus = machine.get("gpus") or []
    kind = _device_kind(spec, machine)
    nproc = d.nproc if d.strategy != "single" else 1
    total, trainable = _method_counts(spec, facts)
    split_share = _split_share(spec, facts, kind, total, trainable)
    replicas = max(1, nproc // (d.tensor_parallel * d.pipeline_parallel))
    if split_share["params"] < 1.0:
        # One process's slice of a model split by tensor or pipeline parallelism: its model states are
        # those of that slice, sharded (FSDP2) over the data-parallel replicas only.
        total, trainable = split_share["total"], split_share["trainable"]
    half = spec.precision in ("bf16", "fp16")
    notes: list[str] = []
    opt = spec.optim.optimizer if not (spec.optim.optimizer == "sgd" and spec.optim.momentum == 0) else "none"

    # Model states
    if d.strategy == "deepspeed":
        states = model_state_bytes(total, trainable, int(facts.get("largest_layer_params") or 0), d.zero_stage,
                                   nproc, spec.precision, d.offload_optimizer, d.offload_params, optimizer=opt)
        act_factor = HALF_ACTIVATIONS if half else 1.0
        notes.append(f"DeepSpeed ZeRO-{d.zero_stage} over {nproc} process(es): model states as DeepSpeed keeps them"
                     + (" (optimizer state offloaded to RAM)" if d.offload_optimizer else "")
                     + (" (parameters offloaded to RAM)" if d.offload_params and d.zero_stage == 3 else "") + ".")
    else:
        sharded = d.strategy == "fsdp" and replicas > 1
        unit = int(facts.get("largest_block_params") or facts.get("largest_layer_params") or 0)
        unit = int(unit / d.tensor_parallel)
        states = model_state_bytes(total, trainable, unit, 3 if sharded else 0, replicas, spec.precision,
                                   layout="amp", optimizer=opt)
        act_factor = AMP_ACTIVATIONS if half else 1.0
        if d.strategy == "ddp" and replicas > 1:
            states["device"]["gradients"] += 4 * trainable  # DDP's all-reduce buckets, a second copy
            notes.append("DDP keeps a second fp32 copy of the gradients in its all-reduce buckets.")
        if half and not sharded:
            # autocast casts each linear/conv weight to 16 bits per forward and keeps it for backward
            copies = int(2 * int(facts.get("matmul_params") or 0) * split_share["params"])
            if spec.activation_checkpointing and facts.get("num_blocks"):
                copies = 2 * int(facts.get("largest_block_params") or 0) + copies // max(1, facts["num_blocks"])
            states["device"]["weights"] += copies
            notes.append("Weights include the 16-bit copies autocast makes of linear and conv weights.")
    if spec.method.kind == "qlora":
        q = int(facts.get("quantizable_params") or 0)
        states["device"]["weights"] = int(q * NF4_BYTES + 4 * max(0, total - q))
        notes.append("QLoRA: linear weights in 4-bit NF4, the rest in fp32 (as peft prepares them).")

    # Activations: per example at the full sequence length (batches padded shorter need less)
    mode = "checkpointed" if spec.activation_checkpointing else "plain"
    per = (facts.get("activation_bytes_per_sample") or {}).get(mode, 0)
    activations = int(per * spec.batch_size * act_factor * split_share["activations"])
    if split_share["note"]:
        notes.append(split_share["note"])
    if facts.get("seq_len"):
        notes.append(f"Activations assume every example fills data.max_length ({facts['seq_len']} tokens); "
                     "shorter batches need less.")

    dev = dict(states["device"])
    dev.pop("total")
    host = dict(states["host"])
    host.pop("total")
    devices = []
    baseline = int(facts.get("baseline_rss") or 0)
    if kind == "cpu":
        ram = int((machine.get("ram") or {}).get("available") or 0)
        cap = ram // nproc
        for rank in range(nproc):
            parts = {k: dev[k] + host[k] for k in ("weights", "gradients", "optimizer")}
            parts.update(activations=activations, overhead=baseline)
            devices.append(_device(f"CPU (rank {rank})" if nproc > 1 else "CPU", "cpu", rank, cap, parts))
        notes.append("Overhead is the resident memory of a process that has loaded PyTorch and the model code "
                     "(measured)." + (f" The {nproc} processes share the RAM: each gets 1/{nproc} of the "
                                      "available RAM." if nproc > 1 else ""))
        peak = max(x["total"] for x in devices)
    else:
        if len(gpus) < nproc:
            notes.append(f"{nproc} processes but {len(gpus)} GPU(s) here; each process needs a GPU of its own.")
        allocated = sum(dev.values()) + activations + CUDA_WORKSPACE  # what the allocator's peak counts
        for rank in range(nproc):
            gpu = gpus[rank] if rank < len(gpus) else None
            cap = int(gpu["memory_total"]) if gpu else 0
            parts = {**dev, "activations": activations,
                     "overhead": CUDA_CONTEXT + CUDA_WORKSPACE + int(ALLOCATOR_SLACK * allocated)}
            name = f"cuda:{rank} {gpu['name']}" if gpu else f"cuda:{rank} (missing)"
            devices.append(_device(name, "cuda", rank, cap, parts))
            if gpu and gpu.get("memory_free") is not None and int(gpu["memory_free"]) < devices[-1]["total"]:
                notes.append(f"cuda:{rank} has only {_fmt(int(gpu['memory_free']))} free now: "
                             "other processes are using it.")
        # Host RAM: every process loads the fp32 model before moving it, and holds what is offloaded.
        load = 4 * int(facts.get("params_base") or total)
        hparts = {"weights": nproc * max(load, host["weights"]), "gradients": nproc * host["gradients"],
                  "optimizer": nproc * host["optimizer"], "activations": 0, "overhead": nproc * baseline}
        ram = int((machine.get("ram") or {}).get("available") or 0)
        devices.append(_device("RAM (host)", "cpu", None, ram, hparts))
        notes.append(f"CUDA overhead: {_fmt(CUDA_CONTEXT)} CUDA context, {_fmt(CUDA_WORKSPACE)} cuBLAS workspaces "
                     f"and {ALLOCATOR_SLACK:.0%} allocator slack; the measured peak "
                     "(torch.cuda.max_memory_allocated) counts the workspaces only.")
        peak = allocated

    worst = max(devices, key=lambda x: x["total"] / x["capacity"] if x["capacity"] else math.inf)
    verdict = _verdict(worst)
    return {"devices": devices, "verdict": verdict, "reason": _reason(worst, verdict), "suggestions": [],
            "params": {"total": total, "trainable": trainable},
            "throughput": throughput(spec, facts, machine, kind, nproc, total, trainable),
            "notes": notes, "estimated_peak": peak, "pipeline": pipeline_stages(spec, facts)}


def pipeline_stages(spec: TrainSpec, facts: dict[str, Any]) -> dict[str, Any] | None:
    """Where a pipeline will cut the model, by parameter count as the run cuts it (engine/strategies/pipeline.py):
    each stage's layer range, its process and its parameters. A split by time is measured at launch; this is
    what a split by parameters gives, for the wizard to show before then."""
    d = spec.distributed
    layers, block = int(facts.get("num_blocks") or 0), int(facts.get("largest_block_params") or 0)
    vocab, hidden = int(facts.get("vocab_size") or 0), int(facts.get("hidden_size") or 0)
    if d.pipeline_parallel == 1 or not (layers and block and vocab and hidden):
        return None
    n = d.pipeline_parallel * stages_per_process(d.pipeline_schedule)
    ends = vocab * hidden  # the embeddings on the first stage, the head (and norm) on the last
    ranges = split([block] * layers, ends, ends + hidden, n)
    return {"split_by": d.pipeline_split, "stages": [list(r) for r in ranges],
            "processes": [s % d.pipeline_parallel for s in range(n)],
            "stage_params": [int(c) for c in stage_costs(ranges, [ends, *[block] * layers, ends + hidden])]}


def _split_share(spec: TrainSpec, facts: dict[str, Any], kind: str, total: int, trainable: int) -> dict[str, Any]:
    """What one process holds of a model split by tensor and pipeline parallelism (docs/estimator.md): its
    parameters (its stage's blocks divided by tp, plus the embeddings and head, which stay whole), its
    trainable ones, and the share of one replica's activations it keeps."""
    d = spec.distributed
    tp, pp = d.tensor_parallel, d.pipeline_parallel
    out: dict[str, Any] = {"params": 1.0, "activations": 1.0, "total": total, "trainable": trainable, "note": ""}
    layers, block = int(facts.get("num_blocks") or 0), int(facts.get("largest_block_params") or 0)
    if tp * pp == 1 or not layers or not block:
        if spec.activation_offload and kind == "cuda" and layers:
            out["activations"] = 2 / layers  # the block being computed and the one being copied
        return out
    mine = math.ceil(layers / pp)  # the largest stage's layers
    outside = max(0, int(facts.get("params_base") or total) - layers * block)  # embeddings, head, norms
    share = mine / layers / tp
    out["params"] = share
    out["total"] = int(mine * block / tp + outside)
    # Adapters and trainable weights sit in the blocks (a full fine-tune also trains the embeddings).
    out["trainable"] = int(trainable * share) if trainable < total else out["total"]
    act = (TP_WHOLE_ACTIVATIONS + (1 - TP_WHOLE_ACTIVATIONS) / tp) * mine / layers
    if pp > 1:
        m = d.pipeline_microbatches
        inflight = m if d.pipeline_schedule == "gpipe" else min(pp, m)  # micro-batches' activations held at once
        act *= inflight / m
    if spec.activation_offload and kind == "cuda":
        act *= 2 / mine
    out["activations"] = act
    parts = [f"{pp} pipeline stages (the largest {mine} of {layers} layers)"] if pp > 1 else []
    if tp > 1:
        parts.append(f"a {tp}-way tensor split")
    out["note"] = (f"Split over {' and '.join(parts)}: each process holds its slice of the blocks plus the "
                   "embeddings and head, whole; activations are its stage's share"
                   + (f", {inflight} of {m} micro-batches in flight" if pp > 1 else "") + ".")
    return out


def _device(name: str, kind: str, rank: int | None, capacity: int, parts: dict[str, int]) -> dict[str, Any]:
    parts = {k: int(parts.get(k, 0)) for k in PARTS}
    total = sum(parts.values())
    return {"name": name, "kind": kind, "rank": rank, "capacity": int(capacity), "parts": parts, "total": total,
            "headroom": int(capacity) - total}


def _verdict(device: dict[str, Any]) -> str:
    cap = device["capacity"]
    if cap <= 0 or device["total"] > cap:
        return "will_not_fit"
    return "fits" if device["total"] < FITS_BELOW * cap else "tight"


def _fmt(n: int) -> str:
    if abs(n) >= GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n / MiB:.0f} MiB"


def _reason(device: dict[str, Any], verdict: str) -> str:
    largest = max(device["parts"], key=lambda k: device["parts"][k])
    need, cap = device["total"], device["capacity"]
    if cap <= 0:
        return f"{device['name']} is not available here, and the run needs {_fmt(need)} on it."
    share = f"{device['name']} needs {_fmt(need)} of {_fmt(cap)} ({need / cap:.0%})"
    if verdict == "fits":
        return f"{share}: it fits."
    if verdict == "tight":
        return f"{share}: it fits with little room to spare; the largest part is {largest}."
    return f"{share}: it will not fit; the largest part is {largest} ({_fmt(device['parts'][largest])})."


def estimated_peak(reply: dict[str, Any]) -> int | None:
    """The estimate's figure to compare with ``measured_peak``: peak RSS on CPU, allocator peak on CUDA."""
    return reply.get("estimated_peak")


def measured_peak(memory_events: list[dict[str, Any]]) -> int | None:
    """The highest per-rank peak in a run's memory events (CUDA ``peak`` when present, else ``peak_rss``).

    Takes the events' data ({step, ranks: [...]}) or whole events carrying it under ``data``.
    """
    best: int | None = None
    for event in memory_events:
        data = event.get("data", event) if "ranks" not in event else event
        for rank in data.get("ranks") or []:
            value = rank.get("peak") if rank.get("peak") is not None else rank.get("peak_rss")
            if isinstance(value, (int, float)):
                best = max(best or 0, int(value))
    return best


# ---------------------------------------------------------------- suggestions


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def apply_patch(spec: TrainSpec, patch: dict[str, Any]) -> TrainSpec | None:
    """The spec with a nested partial patch applied, or None when the result is not a valid spec."""
    try:
        return TrainSpec.model_validate(_merge(spec.model_dump(), patch))
    except ValueError:
        return None


def _candidates(spec: TrainSpec, facts: dict[str, Any], machine: dict[str, Any], kind: str) -> list[tuple[str, dict]]:
    """Changes in the order of their cost to the user: same training first, then cheaper training."""
    out: list[tuple[str, dict]] = []
    gpus = machine.get("gpus") or []
    if kind == "cuda" and not gpus:
        out.append(("run on the CPU (this machine has no GPU)", {"device": "cpu"}))
    b, ga = spec.batch_size, spec.grad_accum
    smaller = b // 2
    while smaller >= 1:
        k = math.ceil(b / smaller)
        out.append((f"batch_size {smaller} with grad_accum {ga * k} (the same {b * ga} examples per step)",
                    {"batch_size": smaller, "grad_accum": ga * k}))
        smaller //= 2
    if not spec.activation_checkpointing:
        out.append(("activation checkpointing (recomputes activations: about 30% slower)",
                    {"activation_checkpointing": True}))
    if kind == "cuda" and spec.precision == "fp32":
        out.append(("bf16 mixed precision", {"precision": "bf16"}))
    if spec.method.kind == "full" and "lora" in (facts.get("by_method") or {}):
        out.append(("LoRA instead of full fine-tuning", {"method": {"kind": "lora"}}))
    d = spec.distributed
    if kind == "cuda" and gpus:
        n = max(d.nproc if d.strategy != "single" else 1, len(gpus))
        for stage in (2, 3):
            if n > 1 and not (d.strategy == "deepspeed" and d.zero_stage >= stage):
                out.append((f"DeepSpeed ZeRO-{stage} over {n} GPUs",
                            {"distributed": {"strategy": "deepspeed", "nproc": n, "zero_stage": stage}}))
        if not d.offload_optimizer:
            out.append(("DeepSpeed ZeRO-2 with the optimizer state offloaded to RAM",
                        {"distributed": {"strategy": "deepspeed", "nproc": n, "zero_stage": 2,
                                         "offload_optimizer": True}}))
        if not d.offload_params:
            out.append(("DeepSpeed ZeRO-3 with optimizer state and parameters offloaded to RAM",
                        {"distributed": {"strategy": "deepspeed", "nproc": n, "zero_stage": 3,
                                         "offload_optimizer": True, "offload_params": True}}))
        if spec.method.kind in ("full", "lora") and spec.task != "image_classification":
            out.append(("QLoRA (4-bit base model, LoRA adapters)", {"method": {"kind": "qlora"}, "precision": "bf16"}))
    return out


def suggestions(spec: TrainSpec, facts: dict[str, Any], machine: dict[str, Any], reply: dict[str, Any],
                limit: int = 4) -> list[dict[str, Any]]:
    """The cheapest changes that make the run fit, each re-estimated; a combination if no single one does."""
    kind = reply["devices"][0]["kind"]
    good = ("fits",) if reply["verdict"] == "tight" else ("fits", "tight")
    found: list[dict[str, Any]] = []
    rest: list[tuple[str, dict]] = []  # changes not enough alone, to combine in the same order
    batch_done = False
    for change, patch in _candidates(spec, facts, machine, kind):
        is_batch = "batch_size" in patch
        if is_batch and batch_done:
            continue
        new = apply_patch(spec, patch)
        if new is None:
            continue
        result = _estimate(new, facts, machine)
        if result["verdict"] in good:
            batch_done = batch_done or is_batch
            found.append({"change": change, "spec_patch": patch, "total": _worst_total(result),
                          "verdict": result["verdict"]})
        elif not is_batch or patch["batch_size"] == 1:
            rest.append((change, patch))
    if not found:
        combined: dict[str, Any] = {}
        names: list[str] = []
        for change, patch in rest:  # add changes until the run fits
            trial = _merge(combined, patch)
            new = apply_patch(spec, trial)
            if new is None:
                continue
            combined, names = trial, names + [change]
            result = _estimate(new, facts, machine)
            if result["verdict"] in good:
                found.append({"change": " + ".join(names), "spec_patch": combined, "total": _worst_total(result),
                              "verdict": result["verdict"]})
                break
    return found[:limit]


def _worst_total(reply: dict[str, Any]) -> int:
    return max(d["total"] for d in reply["devices"] if d["rank"] is not None)
