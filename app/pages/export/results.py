"""An export's results as rows a person can read: per format, compatibility findings, device figures.

Plain functions of the ``export`` events and ``result.json`` (docs/export.md), so the
Run step and its tests read the same text.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from app.text import format as fmt

NONE = "—"
PASSED, FAILED, REPORTED = "passed", "failed", "reported"
VERDICT_COLOURS = {PASSED: "#2b8a3e", FAILED: "#c92a2a", REPORTED: "#5a6472"}
SEVERITY_COLOURS = {"error": "#c92a2a", "warning": "#a35f00", "info": "#5a6472"}
FORMAT_COLUMNS = ("Format", "File", "Size", "Max abs diff", "Top-1 agreement", "Parity")
LLM_COLUMNS = ("Format", "File", "Size", "Perplexity (change)", "Same greedy answers", "Tokens/s (1 · N at once)",
               "First token", "Check")
FINDING_COLUMNS = ("Severity", "Node", "Op", "Message", "Fix")


def verdict(entry: dict[str, Any]) -> str:
    """passed / failed, or reported when the figures were not enforced (a quantized variant)."""
    if entry.get("error"):
        return FAILED
    parity = entry.get("parity") or {}
    if not parity:
        return NONE
    if parity.get("enforced") is False:
        return REPORTED
    return PASSED if parity.get("passed") else FAILED


def _diff(value: Any) -> str:
    return f"{value:.2e}" if isinstance(value, (int, float)) else NONE


def _share(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else NONE


def _in_export(path: str) -> str:
    """The path inside the run's export/ folder ('ort', 'onnx/model.onnx'), where every format is written."""
    parts = PurePath(path).parts
    if "export" in parts:
        cut = len(parts) - 1 - parts[::-1].index("export")
        return "/".join(parts[cut + 1:]) or PurePath(path).name
    return PurePath(path).name


def format_row(name: str, entry: dict[str, Any]) -> tuple[str, ...]:
    """(format, file, size, max abs diff, top-1 agreement, parity) for one ``export`` entry."""
    parity = entry.get("parity") or {}
    path = str(entry.get("path") or "")
    shown = _in_export(path) if path else (str(entry.get("error") or NONE))
    if entry.get("files") and path and not PurePath(path).suffix:  # a folder (ORT package, Triton, Jetson bundle)
        shown += "/"
    if isinstance(entry.get("archive"), dict):
        shown += " + .tar.gz"
    samples = parity.get("samples")
    share = _share(parity.get("top1_agreement"))
    if isinstance(samples, int) and share != NONE:
        share += f" of {samples}"
    size = fmt.size(entry["bytes"]) if isinstance(entry.get("bytes"), (int, float)) else NONE
    return (name, shown, size, _diff(parity.get("max_abs_diff")), share, verdict(entry))


def is_llm(entry: dict[str, Any]) -> bool:
    """A language-model format's entry (hf, gguf, onnx_genai): checked by generating, not by logits."""
    files = entry.get("files")
    return "check" in entry or (isinstance(files, dict) and any("check" in f for f in files.values()
                                                                 if isinstance(f, dict)))


def _llm_verdict(check: dict[str, Any]) -> str:
    if not check:
        return NONE
    return PASSED if check.get("enforced") else REPORTED


def llm_rows(name: str, entry: dict[str, Any]) -> list[tuple[str, ...]]:
    """(file, path, size, perplexity and its change, identical greedy answers, check) per file written."""
    files = entry.get("files") if isinstance(entry.get("files"), dict) else {name: entry}
    rows = []
    for kind, f in files.items():
        check = f.get("check") or {}
        ppl, change = check.get("perplexity"), check.get("perplexity_change")
        shown_ppl = f"{ppl:.3f} ({change:+.2%})" if isinstance(ppl, (int, float)) and isinstance(change, (int, float)) \
            else NONE
        same = f"{check['identical_answers']} of {check['prompts']}" if "prompts" in check else NONE
        size = fmt.size(f["bytes"]) if isinstance(f.get("bytes"), (int, float)) else NONE
        speed = NONE
        if isinstance(check.get("tokens_per_s"), (int, float)):
            speed = f"{check['tokens_per_s']:.1f}"
            if isinstance(check.get("batch_tokens_per_s"), (int, float)):
                speed += f" · {check['batch_tokens_per_s']:.1f} ({check.get('batch')})"
        first = f"{check['ttft_s'] * 1000:.0f} ms" if isinstance(check.get("ttft_s"), (int, float)) else NONE
        rows.append((name if kind == name else f"{name} {kind}", _in_export(str(f.get("path") or "")) or NONE, size,
                     shown_ppl, same, speed, first, _llm_verdict(check)))
    return rows


def llm_note(formats: dict[str, dict[str, Any]]) -> str:
    """What the language-model checks mean, with the runtimes that ran them."""
    if not any(is_llm(e) for e in formats.values()):
        return ""
    return ("Each file ran in its own runtime in a fresh process (transformers, llama.cpp, ONNX Runtime GenAI) on "
            "the same prompts as the source model in PyTorch: a full-precision file (hf, fp32, f16) must give the "
            "same greedy answers, token for token, and a perplexity within 1%; a quantized one (int4, q4_k_m, "
            "q8_0) is reported.")


def format_tooltip(entry: dict[str, Any]) -> str:
    """The whole path, the exporter and opset, and any error: what the row has no room for."""
    lines = [str(entry["path"])] if entry.get("path") else []
    how = [f"exporter {entry['exporter']}" if entry.get("exporter") else "",
           f"opset {entry['opset']}" if entry.get("opset") else "",
           f"{entry['seconds']:.1f} s" if isinstance(entry.get("seconds"), (int, float)) else ""]
    if any(how):
        lines.append(", ".join(h for h in how if h))
    archive = entry.get("archive")
    if isinstance(archive, dict) and archive.get("path"):
        lines.append(f"{archive['path']} ({fmt.size(archive.get('bytes'))})")
    if entry.get("target"):
        lines.append(" ".join(filter(None, [f"for {entry['target']}",
                                            f"JetPack {entry['jetpack']}" if entry.get("jetpack") else "",
                                            f"TensorRT {entry['tensorrt']}" if entry.get("tensorrt") else ""])))
    if entry.get("files"):
        lines.append("files: " + ", ".join(str(f) for f in entry["files"]))
    if (entry.get("parity") or {}).get("enforced") is False:
        lines.append("A quantized variant is compared with its lineage's fp32 model: figures are reported, "
                     "not enforced.")
    if entry.get("error"):
        lines.append(str(entry["error"]))
    return "\n".join(lines)


def _reported_because(parity: dict[str, Any]) -> str:
    """quantized | precision: why a parity check was not enforced (results before the engine said so: guessed)."""
    why = parity.get("reported_because")
    if why in ("quantized", "precision"):
        return str(why)
    return "quantized" if "parent" in str(parity.get("reference") or "") else "precision"


def parity_note(formats: dict[str, dict[str, Any]]) -> str:
    """The line under the table that says why a row's parity is "reported", with its top-1 agreement."""
    reported = {name: entry["parity"] for name, entry in formats.items()
                if isinstance(entry.get("parity"), dict) and entry["parity"].get("enforced") is False}
    lines = []
    for why, lead in (("quantized", "A quantized variant is compared with its fp32 parent, so its logits differ "
                                    "by design: its figures are reported, not enforced. Top-1 agreement is the "
                                    "share of examples where it picks the same class as the parent"),
                      ("precision", "A reduced-precision TensorRT engine (fp16 or int8) is compared with the fp32 "
                                    "model: its figures are reported, not enforced")):
        figures = []
        for name, parity in reported.items():
            if _reported_because(parity) != why:
                continue
            samples = parity.get("samples")
            of = f" of {samples} examples" if isinstance(samples, int) else ""
            figures.append(f"{name} {_share(parity.get('top1_agreement'))}{of} "
                           f"(max abs diff {_diff(parity.get('max_abs_diff'))})")
        if figures:
            lines.append(f"{lead}: {'; '.join(figures)}.")
    return "\n".join(lines)


def finding_rows(compat: dict[str, Any] | None) -> list[tuple[str, ...]]:
    """(severity, node, op, message, fix) of each TensorRT compatibility finding, errors first."""
    order = {"error": 0, "warning": 1, "info": 2}
    findings = [f for f in (compat or {}).get("findings") or [] if isinstance(f, dict)]
    findings.sort(key=lambda f: order.get(str(f.get("severity")), 3))
    return [(str(f.get("severity") or "info"), str(f.get("node") or NONE), str(f.get("op") or NONE),
             str(f.get("message") or ""), str(f.get("fix") or "")) for f in findings]


def compat_summary(compat: dict[str, Any] | None) -> str:
    if not compat:
        return ""
    rows = finding_rows(compat)
    counts = {s: sum(1 for r in rows if r[0] == s) for s in ("error", "warning", "info")}
    version = f"TensorRT {compat['tensorrt_version']}" if compat.get("tensorrt_version") else "TensorRT"
    if compat.get("where"):
        version += f" ({compat['where']})"
    if not rows:
        return f"Checked against {version}: no problems found."
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    verdict_text = "compatible" if compat.get("ok", not counts["error"]) else "not compatible"
    return f"Checked against {version}: {verdict_text} ({', '.join(parts)})."


def _ms(value: Any) -> str:
    return f"{value:.2f} ms" if isinstance(value, (int, float)) else NONE


def device_rows(device: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Host, JetPack, TensorRT, precision, latency and throughput measured on the Jetson."""
    if not device:
        return []
    latency = device.get("latency_ms") or {}
    rows = [("Host", str(device.get("host") or NONE)), ("JetPack", str(device.get("jetpack") or NONE)),
            ("TensorRT", str(device.get("tensorrt") or NONE)), ("Precision", str(device.get("precision") or NONE)),
            ("Latency", f"median {_ms(latency.get('median'))}, p99 {_ms(latency.get('p99'))}")]
    qps = device.get("throughput_qps")
    batch = device.get("batch")
    rows.append(("Throughput", (f"{qps:,.0f} inferences/s" if isinstance(qps, (int, float)) else NONE)
                 + (f" at batch {batch}" if batch else "")))
    return rows


def device_line(data: dict[str, Any]) -> str:
    """One streamed line of the Jetson's output, with its stage (upload | build | benchmark)."""
    stage = str(data.get("stage") or "device")
    return f"[{stage}] {str(data.get('line') or data.get('message') or '').rstrip()}"
