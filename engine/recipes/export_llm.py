"""export.model for a language model: hf, gguf and onnx_genai, each checked by generating (docs/export.md).

The source is a finished causal-LM run (its model rebuilt and merged as the Playground opens it) or a base
model (built-in, folder or cached Hub id). The check rows are the run's validation conversations (or
``data``; short-answers for a base model): the first ``check_prompts`` prompts are answered greedily, up to
``check_tokens`` tokens, and the perplexity of ``parity_samples`` whole conversations is measured, first by
the source model in PyTorch in this process, then by every written file in a fresh process with its own
runtime (engine/export/llm_check.py). A full-precision format (hf, onnx_genai fp32, gguf f16/bf16) must give
the same answers, token for token, and a perplexity within 1%; a quantized one is reported.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api.specs import ExportSpec
from engine.compress.variant import progress
from engine.evaluate.facts import file_bytes
from engine.export import llm_check, llm_formats
from engine.recipes.deploy_step import deploy_host, run_deploy
from engine.training.context import JobContext, JobFailed

FULL_PRECISION = {"hf", "onnx_genai/fp32", "gguf/f16", "gguf/bf16"}
MAX_PPL_CHANGE = 0.01
CHECK_TIMEOUT_S = 1800


@dataclass
class Source:
    label: str
    model: Any  # fp32, CPU, merged
    tokenizer: Any
    folder: Path  # the base model's folder (a Hugging Face folder)
    rows: list[list[dict[str, str]]]
    rows_from: str
    adapter_model: Any = None  # a LoRA run's peft model (adapter: separate)
    is_base: bool = False


def _rows_from_file(name: str) -> tuple[list[list[dict[str, str]]], str]:
    from engine.evaluate.answers import read_messages
    from engine.tasks.causal_lm import DATASETS

    if name in DATASETS:
        return read_messages(DATASETS[name] / "validation.jsonl"), f"built-in {name} (validation)"
    path = Path(name).expanduser()
    if not path.is_file():
        raise JobFailed(f"Data file {name} not found", "Give a JSONL file of prompt/response or messages rows, "
                        f"a built-in dataset ({', '.join(DATASETS)}), or leave data empty.")
    return read_messages(path), path.name


def open_source(spec: ExportSpec, runs: Path) -> Source:
    from engine.tasks import causal_lm

    if spec.model is not None:
        from engine.inference.models import model_folder, open_model
        from engine.tasks.base import InputError

        ref = spec.model.model_dump(exclude_none=True)
        _kind, chat, info = open_model(ref, "cpu")
        if getattr(chat, "model", None) is None:
            raise JobFailed(f"{spec.model.label()} is already a {info.get('runtime')} file; the export starts from a "
                            "Hugging Face model folder", "Export the run or the model folder it came from.")
        try:
            folder = model_folder(ref)
        except InputError as exc:
            raise JobFailed(str(exc), exc.hint) from exc
        rows, rows_from = _rows_from_file(spec.data or "short-answers")
        return Source(str(info.get("name")), chat.model.float().eval(), chat.tokenizer, folder, rows, rows_from,
                      is_base=True)
    from engine.trainer import source as sources

    src = sources.open_source(runs / str(spec.source_run))
    if src.spec.task != "causal_lm":
        raise JobFailed(f"Run {spec.source_run} is a {src.spec.task.replace('_', ' ')} model; hf, gguf and "
                        "onnx_genai are language-model formats", "Export it as onnx, ort, torchscript, pt2, "
                        "tensorrt, triton or jetson.")
    if src.weights_file().suffix == ".onnx":
        raise JobFailed(f"Run {spec.source_run} is an ONNX variant; the language-model formats start from "
                        "torch weights", "Export its parent run, or a merged or pruned variant.")
    data = sources.load_data(src)
    folder = Path(data.info.get("model_dir") or causal_lm.resolve_model_dir(src.spec)[0] or "")
    tokenizer = causal_lm.load_tokenizer(folder, src.spec.data.chat_template)
    model = sources.load_model(src, data)
    adapter = None
    if spec.adapter == "separate" and "hf" in spec.formats:
        if src.spec.method.kind != "lora":
            raise JobFailed(f"adapter: separate keeps a LoRA adapter apart; run {spec.source_run} trained "
                            f"{src.spec.method.kind}", "Use adapter: merge.")
        adapter = sources.load_model(src, data, merge=False)
    rows, rows_from = (_rows_from_file(spec.data) if spec.data else
                       (list(data.val_messages or []), f"validation data of {spec.source_run}"))
    return Source(str(spec.source_run), model, tokenizer, folder, rows, rows_from, adapter)


def cases(src: Source, spec: ExportSpec) -> dict[str, Any]:
    """The token ids every runtime reads: prompts to answer, whole conversations to score."""
    from engine.evaluate.answers import _eos_ids
    from engine.tasks import chat_templates
    from engine.tasks.lm_generate import render_prompt, split_row

    rows = [r for r in src.rows if any(m["role"] == "assistant" for m in r)]
    if not rows:
        raise JobFailed(f"No conversation with an answer in the {src.rows_from} to check the export on",
                        "Point data at a JSONL file of prompt/response rows, or fine-tune with a validation split.")
    tok = src.tokenizer
    template = chat_templates.template_text(tok, "model")
    prompts = [tok(render_prompt(tok, split_row(r)[0]), add_special_tokens=False)["input_ids"]
               for r in rows[: spec.check_prompts]]
    texts = [tok(tok.apply_chat_template(r, chat_template=template, tokenize=False), add_special_tokens=False)
             ["input_ids"] for r in rows[: spec.parity_samples]]
    longest = max([len(p) + spec.check_tokens for p in prompts] + [len(t) for t in texts])
    return {"prompts": prompts, "texts": texts, "max_new_tokens": spec.check_tokens,
            "eos": _eos_ids(src.model, tok), "n_ctx": longest + 8, "batch": spec.check_batch,
            "references": [split_row(r)[1] for r in rows[: spec.check_prompts]]}


def answer_metrics(tokenizer: Any, tokens: list[list[int]], references: list[str]) -> dict[str, float]:
    """Exact match, token F1, ROUGE-L, ... of the decoded greedy answers against the rows' own answers."""
    from engine.evaluate.generation import score_pairs

    answers = [tokenizer.decode(t, skip_special_tokens=True).strip() for t in tokens]
    return score_pairs(list(zip(answers, references, strict=True)))


class LlmExport:
    def __init__(self, ctx: JobContext, spec: ExportSpec):
        self.ctx, self.spec = ctx, spec
        self.out = Path(ctx.run_dir) / "export"
        self.result: dict[str, Any] = {"source_run": spec.source_run, "task": "causal_lm", "formats": {}}
        self.staging: Path | None = None
        self.fraction = 0.0  # the job's progress when its current stage began

    def stage(self, stage: str, fraction: float, message: str) -> None:
        self.fraction = fraction
        progress(self.ctx, stage, fraction, message)

    def say(self, stage: str, message: str) -> None:
        """Where a stage is (a prompt n of N): shown as progress, not written to the log line by line."""
        self.ctx.emit("progress", stage=stage, fraction=round(self.fraction, 3), message=message)

    def check_tools(self) -> None:
        if "jetson" in self.spec.formats:
            from engine.export import jetson_profiles

            assert self.spec.target is not None  # ExportSpec requires it with jetson
            jetson_profiles.jetpack_versions(self.spec.target, self.spec.jetpack)
        for fmt, missing in (("gguf", llm_formats.gguf_missing), ("onnx_genai", llm_formats.genai_missing)):
            if fmt in self.spec.formats and (why := missing()):
                hint = llm_formats.SETUP_HINT if fmt == "gguf" else "Install it, or export the other formats."
                raise JobFailed(f"Cannot export {fmt}: {why}", hint)

    def load(self, runs: Path) -> None:
        self.stage("load", 0.02, "loading the model")
        self.src = open_source(self.spec, runs)
        if self.src.is_base:
            self.result["model"] = self.spec.model.model_dump(exclude_none=True) if self.spec.model else None
        self.cases = cases(self.src, self.spec)
        self.cases_file = self.out / "check_cases.json"
        self.out.mkdir(parents=True, exist_ok=True)
        self.cases_file.write_text(json.dumps(self.cases))
        self.stage("reference", 0.05, f"reference: {self.src.label} in PyTorch, {len(self.cases['prompts'])} "
                   f"prompts and {len(self.cases['texts'])} conversations from the {self.src.rows_from}")
        self.reference = llm_check.measure(llm_check.TorchRuntime(self.src.model), self.cases,
                                           say=lambda text: self.say("reference", f"reference in PyTorch: {text}"))
        params = list(self.src.model.parameters())
        self.result["reference"] = {
            **{k: self.reference[k] for k in ("perplexity", "ttft_s", "tokens_per_s", "batch", "batch_tokens_per_s")},
            "runtime": "torch", "metrics": answer_metrics(self.src.tokenizer, self.reference["tokens"],
                                                          self.cases["references"]),
            "bytes": sum(p.numel() * p.element_size() for p in params), "params": sum(p.numel() for p in params)}
        self.result["check_rows"] = self.src.rows_from
        self.ctx.log(f"reference perplexity {self.reference['perplexity']:.4f}")

    def merged_folder(self) -> Path:
        """A Hugging Face folder of the merged model: the hf format's, else a staging copy (or the base's own)."""
        if "hf" in self.spec.formats and self.src.adapter_model is None:
            return self.out / "hf"
        if self.src.is_base:
            return self.src.folder
        if self.staging is None:
            self.staging = self.out / ".merged"
            llm_formats.write_hf(self.src.model, self.src.tokenizer, self.staging)
        return self.staging

    def check(self, name: str, runtime: str, path: Path) -> dict[str, Any]:
        """``path`` in ``runtime`` in a fresh process, against the reference; JobFailed when it must agree."""
        got_file = self.out / f".check-{name.replace('/', '-')}.json"
        log = self.out / f".check-{name.replace('/', '-')}.log"
        cmd = [sys.executable, "-m", "engine.export.llm_check", runtime, str(path), str(self.cases_file), str(got_file)]
        self.say(name, f"checking {name} in {runtime}: loading it")
        with open(log, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            timer = threading.Timer(CHECK_TIMEOUT_S, proc.kill)
            timer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:  # its progress lines, and whatever else a runtime prints (to the log)
                    try:
                        said = json.loads(line).get("progress")
                    except (ValueError, AttributeError):
                        said = None
                    if said:
                        self.say(name, f"checking {name} in {runtime}: {said}")
                    else:
                        err.write(line)
                proc.wait()
            finally:
                timer.cancel()
        if proc.returncode != 0 or not got_file.is_file():
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-2:]
            raise JobFailed(f"{name} did not run in {runtime}: {' | '.join(tail)[-600:]}",
                            f"The check's output is in {log}.")
        got = json.loads(got_file.read_text())
        got_file.unlink()
        log.unlink()
        report = {**llm_check.compare(self.reference, got), "runtime": runtime,
                  **{k: got.get(k) for k in ("load_s", "ttft_s", "tokens_per_s", "batch", "batch_tokens_per_s",
                                             "peak_rss_bytes")},
                  "metrics": answer_metrics(self.src.tokenizer, got["tokens"], self.cases["references"])}
        change = report["perplexity_change"]
        self.ctx.log(f"{name} in {runtime}: {report['identical_answers']}/{report['prompts']} identical answers, "
                     f"perplexity {got['perplexity']:.4f} ({change:+.2%})")
        if name in FULL_PRECISION:
            if report["identical_answers"] != report["prompts"] or abs(change) > MAX_PPL_CHANGE:
                raise JobFailed(f"{name} does not match the source model: {report['identical_answers']} of "
                                f"{report['prompts']} greedy answers identical, perplexity change {change:+.2%} "
                                f"(allowed: every answer, within {MAX_PPL_CHANGE:.0%})",
                                f"The files are kept in {path} for a look; report this with the run's spec.yaml.")
            report["enforced"] = True
        else:
            report["reported_because"] = "quantized"
        return report

    def done(self, fmt: str, entry: dict[str, Any]) -> None:
        self.result["formats"][fmt] = entry
        self.ctx.emit("export", format=fmt, **entry)
        self.ctx.emit("artifact", type=f"export.{fmt}", path=entry["path"])
        self.ctx.write_result(self.result)

    # ---- the formats

    def hf(self) -> dict[str, Any]:
        target = self.out / "hf"
        if self.src.adapter_model is not None:
            llm_formats.write_adapter(self.src.adapter_model, self.src.tokenizer, self.src.folder, target)
            content = "adapter"
        else:
            llm_formats.write_hf(self.src.model, self.src.tokenizer, target)
            content = "merged"
        return {"path": str(target), "content": content, "bytes": file_bytes(target),
                "check": self.check("hf", "transformers", target)}

    def onnx_genai(self) -> dict[str, Any]:
        root, files = self.out / "onnx_genai", {}
        for precision in self.spec.genai_precisions:
            target = root / precision
            llm_formats.write_genai(self.merged_folder(), target, precision, self.out / ".genai-cache")
            files[precision] = {"path": str(target), "bytes": file_bytes(target),
                                "check": self.check(f"onnx_genai/{precision}", "onnxruntime-genai", target)}
        shutil.rmtree(self.out / ".genai-cache", ignore_errors=True)
        return {"path": str(root), "files": files, "bytes": file_bytes(root)}

    def gguf(self) -> dict[str, Any]:
        root, files = self.out / "gguf", {}
        root.mkdir(parents=True, exist_ok=True)
        stem = _stem(self.src.label)
        base_type = "bf16" if "bf16" in self.spec.gguf_types and "f16" not in self.spec.gguf_types else "f16"
        base = root / f"{stem}-{base_type}.gguf"
        llm_formats.convert_gguf(self.merged_folder(), base, base_type)
        for qtype in self.spec.gguf_types:
            target = root / f"{stem}-{qtype}.gguf"
            if qtype not in llm_formats.CONVERT_TYPES:
                llm_formats.quantize_gguf(base, target, qtype)
            elif qtype != base_type:
                llm_formats.convert_gguf(self.merged_folder(), target, qtype)
            files[qtype] = {"path": str(target), "bytes": target.stat().st_size,
                            "check": self.check(f"gguf/{qtype}", "llama.cpp", target)}
        if base_type not in self.spec.gguf_types:
            base.unlink()
        ollama = next((t for t in ("q4_k_m", "q5_k_m", "q8_0", "q4_0") if t in files), self.spec.gguf_types[0])
        from engine.tasks import chat_templates

        self.src.tokenizer.save_pretrained(str(root))  # what serving the file with Ember reads (docs/serve.md)
        tokenizer = self.src.tokenizer
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": "?"}], tokenize=False,
                                                 add_generation_prompt=True) if tokenizer.chat_template else ""
        modelfile = llm_formats.write_modelfile(root, Path(files[ollama]["path"]).name,
                                                chat_templates.template_text(tokenizer, "model"),
                                                tokenizer.eos_token, llm_formats.default_system(rendered))
        return {"path": str(root), "files": files, "modelfile": str(modelfile), "bytes": file_bytes(root)}

    def jetson(self) -> dict[str, Any]:
        """The Jetson bundle (engine/export/llm_bundle.py) of a GGUF file, and with a host the one-click deploy."""
        from engine.export import jetson_bundle, jetson_profiles, llm_bundle

        assert self.spec.target is not None
        kind, gguf = llm_bundle.pick_gguf(self.result["formats"]["gguf"]["files"], self.spec.jetson_gguf)
        host = deploy_host(self.ctx, self.spec.host)
        facts, jetpack = None, self.spec.jetpack
        if host is not None:
            from engine.export import deploy

            progress(self.ctx, "probe", 0.9, f"probing {host[0].name} ({host[0].address})")
            facts = deploy.probe(host[0], host[1], trtexec=False)
            reported = jetson_profiles.from_probe(facts.get("jetson") or {}).get("jetpack")
            if not jetpack and reported in jetson_profiles.JETPACKS:
                jetpack = reported
        source, version = llm_formats.llama_source()
        name = _stem(self.src.label)
        bundle = llm_bundle.write_llm_bundle(self.out / "jetson" / name, gguf=gguf, gguf_type=kind,
                                             target=self.spec.target, jetpack=jetpack, source=self.src.label,
                                             spec_sha256=None, llama_source=source, llama_version=version)
        manifest = bundle["manifest"]
        for note in manifest["notes"]:
            self.ctx.log(f"note: {note}")
        report: dict[str, Any] = {"path": bundle["path"], "files": bundle["files"], "bytes": file_bytes(Path(bundle["path"])),
                                  "target": self.spec.target, "jetpack": manifest["jetpack"], "runtime": "llama.cpp",
                                  "gguf_type": kind, "has_source": manifest["has_source"], "notes": manifest["notes"]}
        if self.spec.archive:
            report["archive"] = jetson_bundle.write_archive(Path(bundle["path"]), self.out / "jetson" / f"{name}.tar.gz")
        if host is not None:
            out = run_deploy(self.ctx, host, Path(bundle["path"]), facts, runtime="llama.cpp")
            if out.get("stopped"):
                report["device"] = {"host": host[0].name, "remote_dir": out["remote_dir"], "stopped": out["stopped"]}
                return report
            bench = out.get("benchmark") or {}
            found = (out.get("facts") or {}).get("jetson") or {}
            report["device"] = self.result["device"] = {
                "host": host[0].name, "remote_dir": out["remote_dir"], "runtime": "llama.cpp", "gguf_type": kind,
                "jetpack": found.get("jetpack"), "l4t": found.get("l4t"), "build_s": (out.get("build") or {}).get("seconds"),
                "upload": out.get("upload"), **{k: bench.get(k) for k in (
                    "tokens_per_s", "prompt_tokens_per_s", "ttft_ms", "prompt_tokens", "gen_tokens", "backends",
                    "gpu_info", "build_commit", "n_gpu_layers")}}
        return report

    def finish(self) -> None:
        for leftover in (self.staging, self.out / ".genai-cache"):
            if leftover is not None and leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)


def _stem(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(label).name)[:80] or "model"


def run(ctx: JobContext, spec: ExportSpec) -> str | None:
    job = LlmExport(ctx, spec)
    job.check_tools()
    if job.out.exists():
        shutil.rmtree(job.out)  # a re-run starts clean: nothing half-written is mistaken for a result
    job.load(Path(ctx.run_dir).resolve().parent)
    order = [f for f in ("hf", "onnx_genai", "gguf", "jetson") if f in spec.formats]
    try:
        for i, fmt in enumerate(order):
            if ctx.stop_requested:
                return "stopped"
            job.stage(fmt, 0.1 + 0.85 * i / len(order), f"exporting {fmt}")
            t0 = time.perf_counter()
            entry = getattr(job, fmt)()
            entry.setdefault("seconds", round(time.perf_counter() - t0, 2))
            job.done(fmt, entry)
    finally:
        job.finish()
    job.cases_file.unlink(missing_ok=True)
    ctx.emit("result", **job.result)
    ctx.write_result(job.result)
    progress(ctx, "done", 1.0, "exported: " + ", ".join(order))
    return None
