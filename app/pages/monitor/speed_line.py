"""The Monitor's speed and utilisation lines, built from what the run reported.

A field the run did not report (an older run, an image task with no tokens, a device with no
known peak) is left out, never shown as "None" or "nan".
"""

from __future__ import annotations

from typing import Any

from app.pages.monitor.run_charts import number

_ATTENTION = {"sdpa": "SDPA attention", "flash_attention_2": "FlashAttention-2", "eager": "eager attention",
              "auto": "default attention"}
_OPTIMIZER = {"fused": "fused AdamW", "foreach": "foreach optimizer", "for_loop": "for-loop optimizer"}


def speed_summary(speed: dict[str, Any], task: str = "") -> str:
    """run_info's ``speed`` as one line: "bf16 · SDPA attention · compiled · fused AdamW · 4 workers · packing"."""
    parts: list[str] = []
    if isinstance(speed.get("precision"), str):
        parts.append(speed["precision"])
    attention = speed.get("attention")
    if attention in _ATTENTION and task != "image_classification":  # a CNN has no attention
        parts.append(_ATTENTION[attention])
    if speed.get("compile") is True:
        parts.append("compiled")
    if speed.get("optimizer_impl") in _OPTIMIZER:
        parts.append(_OPTIMIZER[speed["optimizer_impl"]])
    workers = speed.get("num_workers")
    if isinstance(workers, int) and not isinstance(workers, bool):
        parts.append(f"{workers} data worker{'s' if workers != 1 else ''}" if workers else "no data workers")
    if speed.get("pin_memory") is True:
        parts.append("pinned memory")
    if speed.get("packing") is True:
        parts.append("packing")
    if speed.get("group_by_length") is True:
        parts.append("length-grouped batches")
    return "  ·  ".join(parts)


def perf_summary(train: dict[str, Any], info: dict[str, Any]) -> str:
    """The latest train event's utilisation: "MFU 41% · 402 TFLOP/s of 989 peak (H200) · padding 12% · …"."""
    parts: list[str] = []
    mfu, tflops, peak = number(train.get("mfu")), number(train.get("tflops")), number(info.get("peak_tflops"))
    if mfu is not None:
        parts.append(f"MFU {_percent(min(mfu, 1.0))}")  # an older run may have reported above 100%
    if tflops is not None:
        scale, unit = (1.0, "TFLOP/s") if max(tflops, peak or 0.0) >= 1 else (1000.0, "GFLOP/s")
        text = f"{_figure(tflops * scale)} {unit}"
        if peak is not None and peak > 0:
            text += f" of {_figure(peak * scale)} peak"
            if _says(info.get("peak_source")):
                text += f" ({info['peak_source'].strip()})"
        elif mfu is None and _says(info.get("peak_source")):
            text += f" (no MFU: {info['peak_source'].strip()})"  # e.g. a GPU missing from the table, and the fix
        parts.append(text)
    padding = number(train.get("padding_frac"))
    if padding is not None:
        parts.append(f"padding {_percent(padding)}")
    moved = number(train.get("offloaded_bytes"))
    if moved is not None:
        parts.append(f"activations offloaded {_figure(moved / 2**20)} MiB/step")
    wait = number(train.get("data_wait_frac"))
    if wait is not None:
        parts.append(f"data wait {_percent(wait)}")
    return "  ·  ".join(parts)


def layout_summary(info: dict[str, Any]) -> str:
    """How a split model's processes divide: "2 stages × 1 replica × 2-way tensor split (1f1b, 4
    micro-batches, bubble 20%)"; empty when nothing is split."""
    mesh = info.get("mesh") if isinstance(info.get("mesh"), dict) else {}
    pp, dp, tp = (mesh.get(k) for k in ("pp", "dp", "tp"))
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (pp, dp, tp)) or (pp == 1 and tp == 1):
        return ""
    parts = [f"{pp} stages"] if pp > 1 else []
    parts.append(f"{dp} replica{'s' if dp != 1 else ''}")
    if tp > 1:
        parts.append(f"{tp}-way tensor split")
    text = " × ".join(parts)
    pipe = info.get("pipeline") if isinstance(info.get("pipeline"), dict) else {}
    bubble = number(pipe.get("bubble"))
    if pp > 1 and bubble is not None:
        text += (f" ({pipe.get('schedule', '?')}, {pipe.get('microbatches', '?')} micro-batches, "
                 f"bubble {_percent(bubble)})")
    return text


def _says(value: Any) -> bool:
    return isinstance(value, str) and value.strip() not in ("", "unknown")


def _percent(fraction: float) -> str:
    pct = 100.0 * fraction
    return f"{pct:.1f}%" if abs(pct) < 10 else f"{pct:.0f}%"


def _figure(value: float) -> str:
    """Three significant figures without an exponent: 402, 40.2, 4.02, 0.402."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value >= 0.001 else f"{value:.1e}"
