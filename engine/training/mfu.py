"""Model FLOPs utilization (MFU): the model's useful FLOP/s divided by the device's peak.

Convention (Chowdhery et al. 2022, "PaLM", appendix B; Korthikanti et al. 2022 for the name):
- Training FLOPs per token of a transformer = forward 2N (one multiply-add per matmul weight),
  backward 2N for the activation gradients plus 2N_trainable for the weight gradients, where N
  counts the weights of the matmul layers (linear layers, the LM head or classifier; embedding
  lookups are not matmuls, tied embeddings still count once as the LM head). Frozen weights get
  no weight gradients, so LoRA costs about 4N, a full fine-tune 6N (Kaplan et al. 2020's 6N).
  (With LoRA the first layer's frozen projections of the frozen embeddings need no input
  gradients either; the formula still counts them: a few percent on a tiny model, under 2% at 16+ layers.)
- Plus attention's score and value matmuls: 2 x 2 x seq_len x attn_width per token and layer
  forward, three times that for training: 12 x n_layers x attn_width x seq_len. The full
  square is counted, not the causal half (PaLM's convention; eager attention computes it all).
- Activation recomputation (activation checkpointing) is NOT counted: it is work the hardware
  does, not work the model needs. Counting it would give hardware FLOPs utilization (HFU).
- Peaks are dense (non-sparse) vendor data-sheet figures for the precision the matmuls run in:
  16-bit tensor cores for bf16/fp16 autocast, else fp32. On CPU the peak is measured: the best
  rate of a square matmul over several rounds, with this process's torch thread count, remembered
  per machine in the data folder (a better figure replaces a worse one), so a run started on a
  busy machine does not read a low peak and report too high an MFU. MFU is at most 100%.

Models that are not Hugging Face transformers (CNNs, custom models) are counted once with
``torch.utils.flop_counter.FlopCounterMode`` over a forward pass of a sample batch.

The trainer calls ``flop_model`` and ``device_peak`` once per process at the start of a run
(engine/trainer/loop.py), on every rank: the counted path runs a forward, which is a collective for
sharded models. Peaks are per process; the trainer sums them over processes. torch is imported
inside the functions (the estimator imports the GPU table without it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Peak dense TFLOP/s: (name substring, 16-bit tensor cores (bf16/fp16, fp32 accumulate), fp32 without tensor
# cores); first match wins, so longer names come before the names they contain ("H100 NVL" before "H100",
# "L40S" and "L40" before "L4", "A100" before "A10"). Sources: NVIDIA's data sheets, the figures marked
# "with sparsity" halved.
GPU_PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H200 NVL", 835.0, 60.0),  # H200 data sheet, NVL column: BF16 1,671 sparse, FP32 60
    ("H200", 989.0, 67.0),  # H200 SXM (and GH200): BF16 1,979 sparse, FP32 67
    ("H100 NVL", 835.0, 60.0),  # H100 data sheet, NVL column (per GPU): BF16 1,671 sparse, FP32 60
    ("H100 PCIe", 756.0, 51.0),  # H100 PCIe: BF16 1,513 sparse, FP32 51
    ("H100", 989.0, 67.0),  # H100 SXM: BF16 1,979 sparse, FP32 67
    ("A100", 312.0, 19.5),  # A100 (SXM and PCIe): BF16 312 dense, FP32 19.5
    ("L40S", 362.0, 91.6),  # L40S: BF16 733 sparse, FP32 91.6
    ("L40", 181.0, 90.5),  # L40: BF16 362 sparse, FP32 90.5
    ("L4", 121.0, 30.3),  # L4: BF16 242 sparse, FP32 30.3
    ("A10", 125.0, 31.2),  # A10: BF16 250 sparse, FP32 31.2
    ("RTX 4090", 165.0, 82.6),  # Ada whitepaper: FP16 tensor with FP32 accumulate 165.2 dense, FP32 82.6
    # Jetson Orin (Ampere GPU, 512 dense FP16 FLOP per tensor core per clock: the data sheets' sparse INT8 TOPS of
    # the GPU / 4). torch names every module just "Orin"; device_peak adds the board name from the device tree.
    ("AGX Orin", 42.5, 5.3),  # AGX Orin 64GB: 64 tensor cores at 1.3 GHz (170 sparse INT8 TOPS); 32GB: 26.7 / 3.3
    ("Orin NX", 15.0, 1.9),  # Orin NX 16GB: 32 tensor cores at 918 MHz; 8GB (765 MHz): 12.5 / 1.6
    ("Orin Nano", 10.2, 1.3),  # Orin Nano 8GB: 32 tensor cores at 625 MHz; "Super" mode (1020 MHz) 16.7 / 2.1
    ("Orin", 42.5, 5.3),  # a bare "Orin": assume the largest (AGX Orin 64GB); a smaller board shows a lower MFU
    ("T4", 65.0, 8.1),  # T4: FP16 mixed precision 65 (no bf16), FP32 8.1
)
GPU_DEFAULT = (100.0, 20.0)  # an unknown GPU, for the fit estimate only: a mid-range data-centre card
UNKNOWN_GPU = "unknown GPU"
PEAK_OVERRIDE = "speed.peak_tflops"


def gpu_peak(name: str, half: bool) -> tuple[float, str]:
    """(peak dense TFLOP/s, the table row it came from) for a GPU name as torch or nvidia-smi report it.

    ``half``: bf16/fp16 tensor cores, else fp32. An unknown name gets GPU_DEFAULT and the row "unknown GPU"."""
    for key, sixteen, fp32 in GPU_PEAKS:
        if key.lower() in name.lower():
            return (sixteen if half else fp32), key
    return GPU_DEFAULT[0 if half else 1], UNKNOWN_GPU


# ---------------------------------------------------------------- device peaks


def _cpu_size(threads: int) -> int:
    """Matmul size: a few ms on a 2-core box, big enough to keep many cores busy on a server."""
    return 512 if threads <= 4 else 1024 if threads <= 16 else 2048


CPU_PEAK_ROUNDS = 5  # rounds of a CPU peak measurement; the best counts
CPU_PEAKS_FILE = "cpu_peaks.json"  # in the data folder: the best peak measured on this machine, per key
QUICK_CHECK_S = 0.05  # a run's check of a remembered peak


def _matmul_round(a: Any, b: Any, out: Any, seconds: float) -> float:
    """FLOP/s of the fastest pair of matmuls in a loop of about ``seconds``."""
    import torch

    flops = 2.0 * 2.0 * a.shape[0] ** 3
    best = 0.0
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        torch.mm(a, b, out=out)
        t1 = time.perf_counter()
        best = max(best, flops / max(t1 - t0, 1e-9))
        if t1 - start >= seconds:
            return best


def measure_cpu_peak(dtype: str = "fp32", seconds: float = 0.3, rounds: int = CPU_PEAK_ROUNDS) -> float:
    """TFLOP/s of a square matmul loop in this process, with its current torch thread count.

    ``rounds`` loops of ``seconds / rounds`` with a short pause between them; the best pair of matmuls
    of all counts. Another process busy on the same cores slows some pairs, never speeds one up, so the
    best is the closest to what the cores can do; the pauses let a burst of someone else's work pass.
    Uses its own random generator, so a seeded run's random stream is untouched."""
    import torch

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    n = _cpu_size(torch.get_num_threads())
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, generator=gen).to(torch_dtype)
    b = torch.rand(n, n, generator=gen).to(torch_dtype)
    out = torch.empty(n, n, dtype=torch_dtype)
    for _ in range(2):  # warm up: thread pool, kernel selection
        torch.mm(a, b, out=out)
    best = 0.0
    for r in range(max(1, rounds)):
        if r:
            time.sleep(0.02)
        best = max(best, _matmul_round(a, b, out, seconds / max(1, rounds)))
    return best / 1e12


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform module says."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name") and ":" in line:
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_peak_key(dtype: str, threads: int) -> str:
    """What a remembered CPU peak is valid for: the CPU, its cores, the threads the matmul ran on, the dtype.

    Threads too: a CPU run of several processes gives each a share of the cores, and its peak per process."""
    return f"{cpu_name()} | {os.cpu_count() or 0} cores | {threads} threads | {dtype}"


def _peaks_file() -> Path:
    from engine.api.paths import data_home

    return data_home() / CPU_PEAKS_FILE


def remembered_cpu_peaks() -> dict[str, dict[str, Any]]:
    """The data folder's remembered CPU peaks by key; empty when there are none or the file is unreadable."""
    try:
        data = json.loads(_peaks_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("tflops"), (int, float))} \
        if isinstance(data, dict) else {}


def remember_cpu_peak(key: str, tflops: float, peaks: dict[str, dict[str, Any]] | None = None) -> float:
    """Keep ``tflops`` for ``key`` when it beats the remembered figure; returns the best of the two.

    Written whole to a temporary file and renamed, so processes measuring at once never leave half a file.
    A data folder that cannot be written costs the memory, never the run. ``peaks``: the file as just read."""
    peaks = remembered_cpu_peaks() if peaks is None else peaks
    old = peaks.get(key, {}).get("tflops")
    if old is not None and old >= tflops:
        return float(old)
    peaks[key] = {"tflops": tflops, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    path = _peaks_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{CPU_PEAKS_FILE}-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(peaks, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass
    return tflops


def cpu_peak(dtype: str, threads: int, refresh: bool = False) -> tuple[float, bool]:
    """(TFLOP/s, whether a remembered figure was known) of this CPU for ``dtype`` on ``threads`` threads.

    The first time on a machine (or with ``refresh``): a full measurement, remembered in the data folder.
    After that the remembered figure, topped up by one short round (QUICK_CHECK_S, not the full
    measurement: a run's start-up stays short): the better of the two is kept, so a peak first measured
    on a busy machine rises to the true one over later runs, and a busy moment never lowers it."""
    key = cpu_peak_key(dtype, threads)
    peaks = remembered_cpu_peaks()  # read once: remember_cpu_peak compares against the same figures
    if key in peaks and not refresh:
        return remember_cpu_peak(key, measure_cpu_peak(dtype, seconds=QUICK_CHECK_S, rounds=1), peaks), True
    return remember_cpu_peak(key, measure_cpu_peak(dtype), peaks), False


def _board_name(name: str) -> str:
    """A Jetson's board ("NVIDIA Jetson AGX Orin Developer Kit") beside torch's bare "Orin"."""
    if "orin" not in name.lower():
        return name
    try:
        with open("/proc/device-tree/model", "rb") as f:
            board = f.read().replace(b"\x00", b"").decode(errors="replace").strip()
    except OSError:
        return name
    return f"{name} ({board})" if board else name


def _tf32_on() -> bool:
    """Whether fp32 matmuls run on TF32 tensor cores in this process (torch's default: no)."""
    import torch

    mode = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    if mode not in (None, "none"):
        return mode == "tf32"
    return torch.get_float32_matmul_precision() != "highest"


_PEAKS: dict[tuple[str, str, int], tuple[float | None, str]] = {}


def forget_peaks() -> None:
    """Forget this process's peaks, as a new process starts (the data folder's CPU peaks stay)."""
    _PEAKS.clear()


def device_peak(device: str, precision: str, override: float | None) -> tuple[float | None, str]:
    """(peak TFLOP/s of this process's device, where the figure comes from); None when no figure is known.

    ``precision`` is the resolved spec precision ("bf16", "fp16" or "fp32"). The spec's override
    wins. On CUDA the table: 16-bit tensor cores for bf16/fp16; for fp32 the fp32 figure, unless
    this process allowed TF32 matmuls on an Ampere or newer GPU, where TF32's dense peak is half
    the 16-bit one on every GPU in the table. An unknown GPU gets None (a guessed peak would make
    the MFU a guess too). On CPU a measured matmul (once per process). Other devices: None.
    """
    if override:
        return float(override), f"{PEAK_OVERRIDE} in the spec ({float(override):g} TFLOP/s per device)"
    half = precision in ("bf16", "fp16")
    if device.startswith("cuda"):
        import torch

        index = torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
        name = _board_name(torch.cuda.get_device_name(index))
        peak, row = gpu_peak(name, half)
        if row == UNKNOWN_GPU:
            return None, f"{name} is not in the GPU table; set {PEAK_OVERRIDE} to its dense peak to see MFU"
        if not half and _tf32_on() and torch.cuda.get_device_capability(index)[0] >= 8:
            return gpu_peak(name, True)[0] / 2, f"{name}: {row} data sheet, dense TF32 (fp32 matmuls use TF32)"
        kind = "dense 16-bit tensor cores" if half else "fp32"
        return peak, f"{name}: {row} data sheet, {kind}"
    if device.startswith("cpu"):
        import torch

        # CPU autocast runs bf16 matmuls, but many CPUs (no AMX or AVX-512 BF16) run them slower than
        # fp32, and oneDNN's linear layers may reach a rate a plain bf16 matmul does not: the peak is
        # the faster of the two, so the MFU of a bf16 run is measured against what the CPU can do.
        dtypes = ("fp32", "bf16") if precision == "bf16" else ("fp32",)
        threads = torch.get_num_threads()
        key = ("cpu", "+".join(dtypes), threads)
        if key not in _PEAKS:
            n = _cpu_size(threads)
            (rate, remembered), dtype = max((cpu_peak(d, threads), d) for d in dtypes)
            how = "the best measured on this machine" if remembered else f"best of {CPU_PEAK_ROUNDS} rounds"
            _PEAKS[key] = (rate, f"measured {dtype} {n}x{n} matmul on {threads} thread{'s' if threads != 1 else ''}, "
                                 f"{how}")
        return _PEAKS[key]
    return None, f"no peak known for device {device}; set {PEAK_OVERRIDE} to see MFU"


def mfu(achieved_flops_per_s: float, peak_tflops: float | None) -> float | None:
    """Achieved model FLOP/s as a fraction of the peak, at most 1.

    Above 1 can only mean the peak is wrong (a CPU measured while busy, a wrong ``speed.peak_tflops``):
    shown as 100%, never more; the TFLOP/s figure beside it is still the true one."""
    if not peak_tflops or peak_tflops <= 0 or achieved_flops_per_s is None:
        return None
    return min(1.0, achieved_flops_per_s / (peak_tflops * 1e12))


# ---------------------------------------------------------------- model FLOPs


def transformer_flops_per_token(*, matmul_params: int, trainable_matmul_params: int, n_layers: int,
                                attn_width: int, seq_len: int) -> float:
    """Training FLOPs (forward and backward) per token: 4N + 2N_trainable + 12 * n_layers * attn_width * seq_len.

    ``attn_width``: query heads x head dim (with grouped-query attention the scores still span every
    query head). Activation recomputation is not counted (see the module doc)."""
    n, trainable = float(matmul_params), float(trainable_matmul_params)
    return 2 * n + 2 * n + 2 * trainable + 12.0 * n_layers * attn_width * seq_len


@dataclass
class FlopModel:
    """Training FLOPs of one model: per token at a sequence length (token models), per example, and how counted.

    ``per_token(seq_len) = token_fixed + token_per_position * seq_len``; None for models without tokens."""

    basis: str
    token_fixed: float | None = None
    token_per_position: float = 0.0
    sample: float | None = None

    def per_token(self, seq_len: int) -> float | None:
        if self.token_fixed is None:
            return None
        return self.token_fixed + self.token_per_position * seq_len

    def per_sample(self) -> float | None:
        return self.sample


_WRAPPERS = ("DistributedDataParallel", "DataParallel", "FullyShardedDataParallel", "DeepSpeedEngine")
TOKEN_TASKS = ("causal_lm", "text_classification")


def unwrap(model: Any) -> Any:
    """The module inside DDP / FSDP1 / DeepSpeed (``.module``) and torch.compile (``._orig_mod``) wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif type(model).__name__ in _WRAPPERS and hasattr(model, "module"):
            model = model.module
        else:
            return model


def _matmul_size(m: Any) -> int | None:
    """Multiply-adds per row of a linear-like layer (weights of the matmul), or None for other modules.

    nn.Linear (and subclasses: bitsandbytes' 4-bit layers store packed weights) by its shape;
    Hugging Face's Conv1D (GPT-2) by its weight."""
    from torch import nn

    if isinstance(m, nn.Linear):
        return int(m.in_features) * int(m.out_features)
    if type(m).__name__ == "Conv1D" and getattr(m, "weight", None) is not None:
        return int(m.weight.numel())
    return None


def _requires_grad(m: Any) -> bool:
    w = getattr(m, "weight", None)
    return bool(w is not None and w.requires_grad)


def _hf_config(model: Any) -> Any:
    """The text config of the first module carrying a transformers config with layers and a width."""
    for m in model.modules():
        config = getattr(m, "config", None)
        if config is None or not hasattr(config, "to_dict"):
            continue
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        if getattr(text, "num_hidden_layers", None) and getattr(text, "hidden_size", None):
            return text
    return None


def _is_moe(config: Any) -> bool:
    """Mixture of experts: a token runs through only some experts, so the weights do not count the work."""
    experts = max(int(getattr(config, k, 0) or 0) for k in ("num_local_experts", "num_experts", "n_routed_experts"))
    return experts > 1 and bool(getattr(config, "num_experts_per_tok", 0))


def flop_model(model: Any, task: str, sample_batch: dict, forward: Callable[[Any, dict], Any]) -> FlopModel:
    """Training FLOPs of ``model`` for ``task``: analytic for Hugging Face transformers, counted otherwise.
    ``forward(model, batch)`` is the task's own forward pass (what is counted): the trainer hands it down, as
    this module sits below the tasks.

    Transformers (a config with num_hidden_layers and hidden_size, through peft, DDP, FSDP,
    DeepSpeed and torch.compile wrappers) use ``transformer_flops_per_token`` with the matmul
    weights and trainable ones read from the modules: no forward pass. ``per_sample`` is then the
    cost of one row of ``sample_batch``'s width. (A BERT-style pooler and classifier run once per
    sequence but are counted per token: under 1% at base size.) Everything else (image models, custom models,
    mixtures of experts) is counted with FlopCounterMode over one forward of ``sample_batch``.
    """
    inner = unwrap(model)
    config = _hf_config(inner) if task in TOKEN_TASKS else None
    if config is not None and not _is_moe(config):
        analytic = _analytic(inner, config, sample_batch)
        if analytic is not None:
            return analytic
    return _counted(inner, task, sample_batch, forward)


def _analytic(model: Any, config: Any, batch: dict) -> FlopModel | None:
    total = trainable = 0
    for m in model.modules():
        size = _matmul_size(m)
        if size is None:
            continue
        total += size
        trainable += size if _requires_grad(m) else 0
    if not total:
        return None
    layers = int(config.num_hidden_layers)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    head_dim = getattr(config, "head_dim", None) or (int(config.hidden_size) // heads if heads else 0)
    width = heads * int(head_dim) if heads else int(config.hidden_size)
    fixed = transformer_flops_per_token(matmul_params=total, trainable_matmul_params=trainable, n_layers=layers,
                                        attn_width=width, seq_len=0)
    per_position = 12.0 * layers * width
    ids = batch.get("input_ids") if isinstance(batch, dict) else None
    sample = None
    if ids is not None and getattr(ids, "ndim", 0) >= 1:
        seq = int(ids.shape[-1])
        sample = (fixed + per_position * seq) * seq
    basis = (f"analytic: 4N + 2N_trainable + 12 x layers x attention width x sequence length per token, "
             f"N = {total / 1e6:.3g}M matmul weights ({trainable / 1e6:.3g}M trainable), {layers} layers, "
             f"attention width {width}")
    return FlopModel(basis=basis, token_fixed=fixed, token_per_position=per_position, sample=sample)


def _counted(model: Any, task: str, batch: dict, forward: Callable[[Any, dict], Any]) -> FlopModel:
    """One forward of the batch under FlopCounterMode, in eval mode and without gradients.

    Eval mode: dropout draws no random numbers and batch norm keeps its running statistics, so
    the run continues exactly as it would have. Training costs forward x (2 + trainable share):
    the backward's activation gradients cost one forward, the weight gradients one forward of
    the layers whose weights train; the share is weighed by those layers' counted FLOPs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    trainable_flops = 0
    starts: list[int] = []

    def before(module: Any, args: Any) -> None:
        starts.append(counter.get_total_flops())

    def after(module: Any, args: Any, out: Any) -> None:
        nonlocal trainable_flops
        spent = counter.get_total_flops() - starts.pop()
        if _requires_grad(module):
            trainable_flops += spent

    def is_layer(m: Any) -> bool:
        return _matmul_size(m) is not None or isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d))

    # Only the innermost layers: a wrapper that is itself a layer (a quantized Linear around one) would count twice.
    layers = [m for m in model.modules() if is_layer(m) and not any(is_layer(c) for c in m.modules() if c is not m)]
    handles = [h for m in layers for h in (m.register_forward_pre_hook(before), m.register_forward_hook(after))]
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        with torch.no_grad(), counter:
            forward(model, batch)
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes:
            m.training = mode
    forward = float(counter.get_total_flops())
    if forward <= 0:
        return FlopModel(basis="counted: the forward pass ran no matmul or convolution FLOPs PyTorch can count")
    share = min(1.0, trainable_flops / forward)
    training = forward * (2.0 + share)
    rows = _rows(batch)
    ids = batch.get("input_ids")
    positions = int(ids.numel()) if task in TOKEN_TASKS and ids is not None else 0
    basis = (f"counted: {forward / rows / 1e9:.3g} GFLOP forward per example (FlopCounterMode) x {2 + share:.2f} "
             f"for training ({share:.0%} of the forward FLOPs in layers whose weights train)")
    return FlopModel(basis=basis, token_fixed=training / positions if positions else None,
                     sample=training / rows)


def _rows(batch: dict) -> int:
    for key in ("labels", "input_ids", "pixel_values"):
        value = batch.get(key)
        if value is not None and getattr(value, "ndim", 0) >= 1:
            return max(1, int(value.shape[0]))
    first = next((v for v in batch.values() if getattr(v, "ndim", 0) >= 1), None)
    return max(1, int(first.shape[0])) if first is not None else 1


__all__ = ["GPU_PEAKS", "GPU_DEFAULT", "FlopModel", "cpu_peak", "cpu_peak_key", "device_peak", "flop_model",
           "forget_peaks", "gpu_peak",
           "measure_cpu_peak", "mfu", "remember_cpu_peak", "remembered_cpu_peaks", "transformer_flops_per_token",
           "unwrap"]
