"""``ember export RUN ...``: the Export page as one command; prints each format's parity and the device's figures."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.api.job_terms import EXPORT
from engine.api.specs import EXPORT_FORMATS, LLM_FORMATS, SpecError, validate_spec
from engine.cli.chat import model_ref
from engine.cli.client import ensure_engine
from engine.cli.follow import exit_code, follow
from engine.cli.progress import display_for


def _size(n: Any) -> str:
    return f"{n / 2**20:.1f} MiB" if isinstance(n, (int, float)) else "-"


def print_result(result: dict[str, Any]) -> None:
    print(f"{'format':<12} {'size':>10}  {'max abs diff':>12}  {'top-1':>7}  parity   path")
    for fmt, entry in (result.get("formats") or {}).items():
        p = entry.get("parity") or {}
        verdict = "-" if not p else ("passed" if p.get("passed") else "FAILED") + ("" if p.get("enforced") else "*")
        diff = f"{p['max_abs_diff']:.2e}" if p.get("max_abs_diff") is not None else "-"
        top1 = f"{p['top1_agreement']:.1%}" if p.get("top1_agreement") is not None else "-"
        print(f"{fmt:<12} {_size(entry.get('bytes')):>10}  {diff:>12}  {top1:>7}  {verdict:<8} {entry.get('path')}")
    reported = [e["parity"] for e in (result.get("formats") or {}).values()
                if (e.get("parity") or {}).get("enforced", True) is False]
    why = {p.get("reported_because") or "quantized" for p in reported}
    if "quantized" in why:
        print("* reported, not enforced: a quantized model measured against its fp32 parent "
              "(top-1: how often it picks the parent's class)")
    if "precision" in why:
        print("* reported, not enforced: a reduced-precision TensorRT engine measured against the fp32 model")
    compat = result.get("compat")
    if compat:
        print(f"TensorRT {compat['tensorrt_version']} check ({compat.get('where')}): "
              f"{compat.get('errors', 0)} errors, {compat.get('warnings', 0)} warnings")
        for f in compat.get("findings") or []:
            print(f"  {f['severity']}: {f.get('node') or '-'} ({f.get('op') or '-'}): {f['message']}\n"
                  f"    fix: {f.get('fix') or '-'}")
    device = result.get("device")
    if device and device.get("latency_ms"):
        lat = device["latency_ms"]
        print(f"on {device['host']} (TensorRT {device.get('tensorrt')}, JetPack {device.get('jetpack') or '?'}, "
              f"{device.get('precision')}, batch {device.get('batch')}): median {lat.get('median')} ms, "
              f"p99 {lat.get('p99')} ms, {device.get('throughput_qps')} inferences/s")


def print_llm_result(result: dict[str, Any]) -> None:
    """A language model's files: each one's answers and perplexity against the source model, in its runtime."""
    ref = result.get("reference") or {}
    print(f"reference: the source model in PyTorch, perplexity {ref.get('perplexity', 0):.3f} on the "
          f"{result.get('check_rows')}")
    batch = ref.get("batch") or 0
    print(f"{'file':<18} {'size':>10}  {'runtime':<18} {'same answers':>12}  {'perplexity':>16}  {'tokens/s':>8}  "
          f"{f'b{batch} tok/s' if batch > 1 else '':>10}  {'first token':>11}  path")
    for fmt, entry in (result.get("formats") or {}).items():
        files = entry.get("files") or {fmt: entry}
        for kind, f in files.items():
            c = f.get("check") or {}
            name = fmt if kind == fmt else f"{fmt} {kind}"
            mark = "" if c.get("enforced") else "*"
            ppl = f"{c['perplexity']:.3f} ({c['perplexity_change']:+.2%})" if c.get("perplexity") else "-"
            speed = f"{c['tokens_per_s']:.1f}" if c.get("tokens_per_s") else "-"
            batched = f"{c['batch_tokens_per_s']:.1f}" if c.get("batch_tokens_per_s") else ""
            first = f"{c['ttft_s'] * 1000:.0f} ms" if c.get("ttft_s") else "-"
            print(f"{name:<18} {_size(f.get('bytes')):>10}  {c.get('runtime', '-'):<18} "
                  f"{c.get('identical_answers', 0)}/{c.get('prompts', 0):<10}{mark} {ppl:>16}  {speed:>8}  "
                  f"{batched:>10}  {first:>11}  {f.get('path')}")
        if entry.get("modelfile"):
            print(f"{'':<18} Ollama: cd {Path(entry['modelfile']).parent} && ollama create NAME -f Modelfile")
    print("* reported, not enforced: a quantized file measured against the source model; the others must give "
          "the same greedy answers and a perplexity within 1%")


def cmd_export(args: argparse.Namespace) -> int:
    ref = model_ref(args.run)
    llm = args.formats is None and "run" not in ref
    spec: dict[str, Any] = {"formats": (args.formats or ("hf,gguf,onnx_genai" if llm else "onnx")).split(",")}
    spec.update({"source_run": ref["run"]} if "run" in ref else {"model": ref})
    for key in ("target", "host", "precision", "opset", "jetpack", "parity_samples", "max_batch", "adapter", "data",
                "check_prompts", "check_tokens", "check_batch", "jetson_gguf"):
        value = getattr(args, key)
        if value is not None:
            spec[key] = value
    for key in ("gguf_types", "genai_precisions"):
        if getattr(args, key):
            spec[key] = getattr(args, key).split(",")
    try:
        checked = validate_spec(EXPORT, spec)
    except SpecError as exc:
        print(f"error: {exc}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    with ensure_engine() as c:
        job = c.call("jobs.start", kind=EXPORT, spec=checked.model_dump(mode="json"), name=args.name or "")
        display = display_for(sys.stdout, as_json=args.verbose)
        display.started(job)
        code = exit_code(follow(c, job, display))
        result_file = Path(job["run_dir"]) / "result.json"
        if result_file.is_file():
            result = json.loads(result_file.read_text(encoding="utf-8"))
            (print_llm_result if result.get("task") == "causal_lm" and "reference" in result else print_result)(result)
        return code


def add_parser(sub: Any) -> None:
    e = sub.add_parser("export", help="export a fine-tune or variant (ONNX, ORT package, TorchScript, .pt2, TensorRT, "
                                      "Triton, Jetson bundle; a language model as a merged checkpoint, GGUF or "
                                      "ONNX-GenAI), optionally deploying to a Jetson host")
    e.add_argument("run", metavar="MODEL", help="id of a finished fine-tune or variant; or, for the language-model "
                                                "formats, a built-in model, a model folder or a cached Hub id")
    e.add_argument("--formats", help=f"comma-separated: {','.join(EXPORT_FORMATS)}; language models: "
                                     f"{','.join(LLM_FORMATS)} (default: onnx for a run, all three for a base model)")
    e.add_argument("--gguf-types", dest="gguf_types", help="comma-separated GGUF types: f16,bf16,q8_0,q5_k_m,q4_k_m,q4_0 "
                                                           "(default f16,q4_k_m)")
    e.add_argument("--genai-precisions", dest="genai_precisions", help="comma-separated ONNX-GenAI precisions: "
                                                                       "fp32,fp16,int4 (default fp32,int4)")
    e.add_argument("--adapter", choices=["merge", "separate"], help="hf of a LoRA run: merged (default) or the adapter")
    e.add_argument("--data", help="language models: the JSONL file (or built-in dataset) the formats are checked on")
    e.add_argument("--check-prompts", type=int, dest="check_prompts")
    e.add_argument("--check-tokens", type=int, dest="check_tokens")
    e.add_argument("--jetson-gguf", dest="jetson_gguf",
                   help="language models: the GGUF type in the Jetson bundle (default: the smallest written)")
    e.add_argument("--check-batch", type=int, dest="check_batch",
                   help="language models: tokens/s with this many requests at once (default 4; 0: skip)")
    e.add_argument("--target", help="Jetson model for the jetson format (orin_nano, agx_orin, ...)")
    e.add_argument("--host", help="a Jetson host (ember hosts list) to build and benchmark on")
    e.add_argument("--precision", choices=["fp32", "fp16", "int8"])
    e.add_argument("--jetpack")
    e.add_argument("--opset", type=int)
    e.add_argument("--max-batch", type=int, dest="max_batch")
    e.add_argument("--parity-samples", type=int, dest="parity_samples")
    e.add_argument("--name")
    e.add_argument("--verbose", action="store_true",
                   help="print every event as it arrives, one JSON object a line, instead of the progress bar")
    e.set_defaults(fn=cmd_export)
