"""export.model: a run or variant as deployable files, each checked against the model (docs/export.md).

Reads the source run's ``model/`` (never changes it) and writes this run's
``export/<format>/`` folders and ``result.json``. Run by hand:

    python -m engine.recipes.export --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

from engine.api.job_terms import FINETUNE
from engine.api.specs import LLM_FORMATS, ExportSpec
from engine.compress.variant import progress
from engine.recipes.deploy_step import deploy_host, run_deploy
from engine.trainer import source as sources
from engine.training.context import JobContext, JobFailed, exit_process, run_job

TORCH_ONLY = ("torchscript", "pt2")
NEEDS_ONNX = ("onnx", "ort", "tensorrt", "triton", "jetson")


class Export:
    """One export job's state: the source, its data, the reference outputs and what has been written."""

    def __init__(self, ctx: JobContext, spec: ExportSpec):
        self.ctx = ctx
        self.spec = spec
        self.run_dir = Path(ctx.run_dir)
        self.out = self.run_dir / "export"
        self.source = sources.open_source(self.run_dir.resolve().parent / spec.source_run)
        self.task_name = self.source.spec.task
        self.onnx_only = not any((self.source.model_dir / n).is_file() for n in ("model.pt", "weights.safetensors"))
        self.result: dict[str, Any] = {"source_run": spec.source_run, "task": self.task_name,
                                       "source_kind": _source_kind(self.source), "formats": {}}
        self.onnx_report: dict[str, Any] | None = None

    # ---- inputs
    def check_formats(self) -> None:
        if "jetson" in self.spec.formats and self.spec.target:
            from engine.export.jetson_bundle import check_target

            check_target(self.spec.target, self.spec.jetpack, self.spec.precision, self.spec.dla_core)
        if self.onnx_only:
            refused = [f for f in self.spec.formats if f in TORCH_ONLY]
            if refused:
                technique = (self.source.meta.get("variant") or {}).get("technique", "an ONNX variant")
                raise JobFailed(f"Run {self.source.job_id} ({technique}) has only an ONNX model, so it cannot be "
                                f"exported as {' or '.join(refused)}: those formats need torch weights",
                                "Export it as onnx, ort, triton, tensorrt or jetson; or export its parent run "
                                f"({self.source.meta.get('parent_run', 'the fine-tune')}) as TorchScript / .pt2.")

    def load(self) -> None:
        import torch

        from engine.export import parity

        torch.manual_seed(self.source.spec.seed)
        progress(self.ctx, "load", 0.02, f"loading run {self.source.job_id} ({self.task_name})")
        self.data = sources.load_data(self.source)
        if self.onnx_only:
            # A quantized variant has no torch model; its lineage's fp32 model is the reference.
            parent_id = str(self.source.meta.get("parent_run"))
            try:
                parent = sources.open_source(self.run_dir.resolve().parent / parent_id)
            except JobFailed as exc:
                raise JobFailed(f"The parity reference of variant {self.source.job_id} is its parent run "
                                f"{parent_id}, which cannot be opened: {exc}",
                                "Export the variant while its parent run still exists, or export the parent.") from exc
            self.model = None
            reference_model = sources.load_model(parent, self.data)
            self.reference_from = f"run {parent.job_id} (fp32 PyTorch, the variant's parent)"
        else:
            self.model = sources.load_model(self.source, self.data)
            reference_model = self.model
            self.reference_from = f"run {self.source.job_id} (fp32 PyTorch)"
        size = min(16, self.spec.parity_samples)
        self.batches = parity.reference_batches(self.data, self.task_name, self.spec.parity_samples, size)
        self.reference = parity.reference_logits(reference_model, self.task_name, self.batches)
        self.ctx.log(f"reference: {self.reference_from} on {self.spec.parity_samples} validation examples")
        self.example = self.batches[0]

    # ---- formats
    def done(self, fmt: str, entry: dict[str, Any]) -> None:
        self.result["formats"][fmt] = entry
        self.ctx.emit("export", format=fmt, **entry)
        self.ctx.emit("artifact", type=f"export.{fmt}", path=entry["path"])
        self.ctx.write_result(self.result)

    def check(self, fmt: str, path: Path, enforce: bool | None = None) -> dict[str, Any]:
        from engine.export import parity

        enforce = (not self.onnx_only) if enforce is None else enforce
        report = parity.check(fmt, path, self.task_name, self.batches, self.reference, self.spec.tolerance,
                              enforce=enforce)
        report["reference"] = self.reference_from
        if not enforce:  # the GUI and docs say why on screen: a quantized model, or a reduced-precision engine
            report["reported_because"] = "quantized" if self.onnx_only else "precision"
        self.ctx.log(f"{fmt}: max abs diff {report['max_abs_diff']:.3g}, top-1 agreement "
                     f"{report['top1_agreement']:.2%} on {report['samples']} examples")
        return report

    def onnx(self) -> dict[str, Any]:
        from engine.export import metadata
        from engine.export.onnx import copy_variant, export_onnx

        meta = metadata.model_metadata(self.source, self.data, self.source.run_dir / "spec.yaml")
        path = self.out / "onnx" / "model.onnx"
        if self.onnx_only:
            report = copy_variant(self.source.model_dir / "model.onnx", path, meta, self.spec.opset)
            if report["converted_from"]:
                self.ctx.log(f"ONNX: the variant's model (opset {report['converted_from']}) was converted to "
                             f"opset {report['opset']}")
            kept = [text for asked, text in ((self.spec.slim, "slim"),
                                             (not self.spec.dynamic_batch, "a fixed batch"),
                                             (not self.spec.dynamic_sequence, "a fixed sequence")) if asked]
            if kept:  # the compression job's file is used as written: its axes are dynamic, its graph not slimmed
                self.ctx.log(f"ONNX: {', '.join(kept)} does not apply to a quantized variant's model; "
                             "it is kept as the compression job wrote it")
        else:
            report = export_onnx(self.model, self.task_name, self.example, path, opset=self.spec.opset,
                                 dynamic_batch=self.spec.dynamic_batch,
                                 dynamic_sequence=self.spec.dynamic_sequence, metadata=meta, slim=self.spec.slim)
        if report.get("fallback_reason"):
            self.ctx.log(f"ONNX: the TorchScript exporter was used: {report['fallback_reason']}")
        report["parity"] = self.check("onnx", path)
        self.onnx_report = report
        return report

    def ort(self) -> dict[str, Any]:
        from engine.export import metadata
        from engine.export.ort_package import write_ort_package

        assert self.onnx_report is not None
        onnx_path, graph = Path(self.onnx_report["path"]), None
        if self.spec.optimize and self.model is not None:
            onnx_path, graph = self.fused(onnx_path)
        report = write_ort_package(onnx_path, self.out / "ort", task_name=self.task_name,
                                   labels=self.labels(), preprocessing=metadata.preprocessing(self.source, self.data),
                                   tokenizer_dir=self.tokenizer_dir())
        if graph is not None:
            report["graph"] = graph
            shutil.rmtree(self.out / ".fused", ignore_errors=True)  # the package holds its own copy
        report["parity"] = self.check("ort", Path(report["path"]))
        return report

    def fused(self, onnx_path: Path) -> tuple[Path, dict[str, Any]]:
        """The ONNX file through ONNX Runtime's transformer optimizer, timed beside the unfused one."""
        from engine.compress import graph_opt

        work = self.out / ".fused"
        report = graph_opt.export_fused(self.model, self.task_name, self.example, work / "model.onnx")
        if not report["path"]:
            self.ctx.log(f"ORT package: graph not optimized ({report['skipped']})")
            return onnx_path, report
        report["latency"] = graph_opt.speedup(onnx_path, Path(report["path"]), self.task_name, self.example)
        lat = report["latency"]
        self.ctx.log("ORT package: " + ", ".join(f"{n} {op}" for op, n in report["fused"].items())
                     + f"; {lat['unfused_ms']:.2f} -> {lat['fused_ms']:.2f} ms per batch of {lat['batch']} "
                     f"({lat['speedup']:.2f}x)")
        return Path(report["path"]), report

    def torchscript(self) -> dict[str, Any]:
        from engine.export.torchscript import export_torchscript

        report = export_torchscript(self.model, self.task_name, self.example, self.out / "torchscript" / "model.ts",
                                    mode=self.spec.torchscript_mode)
        report["parity"] = self.check("torchscript", Path(report["path"]))
        return report

    def pt2(self) -> dict[str, Any]:
        from engine.export.pt2 import export_pt2

        report = export_pt2(self.model, self.task_name, self.example, self.out / "pt2" / "model.pt2",
                            dynamic_batch=self.spec.dynamic_batch, dynamic_sequence=self.spec.dynamic_sequence)
        report["parity"] = self.check("pt2", Path(report["path"]))
        return report

    def shapes(self) -> dict[str, Any]:
        from engine.export.trtexec import profile_shapes

        assert self.onnx_report is not None
        seq = self.spec.seq_len or getattr(self.source.spec.data, "max_length", None) or 128
        return profile_shapes(self.onnx_report["inputs"], task_name=self.task_name, max_batch=self.spec.max_batch,
                              opt_batch=self.spec.opt_batch, seq_len=int(seq),
                              dynamic_batch=self.spec.dynamic_batch, dynamic_sequence=self.spec.dynamic_sequence)

    def compat(self, tensorrt_version: str, where: str) -> dict[str, Any]:
        from engine.export import trt_compat

        assert self.onnx_report is not None
        findings = trt_compat.check(self.onnx_report["path"], tensorrt_version, precision=self.spec.precision,
                                    dla=self.spec.dla_core is not None, profile=self.shapes())
        summary = trt_compat.summary(findings)
        doc = {"tensorrt_version": tensorrt_version, "where": where, "findings": findings, **summary}
        self.result["compat"] = doc
        self.ctx.emit("compat", **doc)
        for f in findings:
            self.ctx.log(f"TensorRT {tensorrt_version} check, {f['severity']}: {f.get('node') or '-'} "
                         f"({f.get('op') or '-'}): {f['message']} -> {f.get('fix', '')}")
        if not summary["ok"]:
            self.ctx.write_result(self.result)
            first = next(f for f in findings if f["severity"] == "error")
            raise JobFailed(f"The model cannot run on TensorRT {tensorrt_version} ({where}): {first['message']}"
                            + (f" ({summary['errors'] - 1} more problems listed)" if summary["errors"] > 1 else ""),
                            first.get("fix") or "See the findings in the export's results.")
        return doc

    def tensorrt(self) -> dict[str, Any]:
        from engine.export import tensorrt_local

        ok, reason = tensorrt_local.available()
        if not ok:
            raise JobFailed(f"Format tensorrt builds the engine on this machine, which cannot: {reason}",
                            "Install TensorRT's Python package on a machine with an NVIDIA GPU, or choose the "
                            "jetson format (the engine is then built on the device).")
        self.compat(self.spec.tensorrt_version or tensorrt_local.version(), "this machine")
        assert self.onnx_report is not None
        plan = self.out / "tensorrt" / "model.plan"
        report = tensorrt_local.build_engine(Path(self.onnx_report["path"]), plan, precision=self.spec.precision,
                                             shapes=self.shapes(), workspace_mb=self.spec.workspace_mb)
        report["parity"] = self.check("tensorrt", plan, enforce=self.spec.precision == "fp32" and not self.onnx_only)
        report["benchmark"] = tensorrt_local.benchmark(plan, self.shapes(), duration_s=self.spec.benchmark_s)
        return report

    def triton(self) -> dict[str, Any]:
        from engine.export.triton import write_triton_repo

        assert self.onnx_report is not None
        plan = self.out / "tensorrt" / "model.plan"
        kind = "plan" if plan.is_file() else "onnx"
        return write_triton_repo(self.out / "triton", self.name(), model_file=plan if kind == "plan"
                                 else Path(self.onnx_report["path"]), inputs=self.onnx_report["inputs"],
                                 outputs=self.onnx_report["outputs"], max_batch=self.spec.max_batch, labels=self.labels(),
                                 kind=kind)

    def jetson(self) -> dict[str, Any]:
        from engine.export import jetson_bundle, jetson_profiles, metadata

        assert self.onnx_report is not None and self.spec.target is not None
        host = self.deploy_host()
        link_facts = None
        versions = jetson_profiles.jetpack_versions(self.spec.target, self.spec.jetpack)
        trt_version = self.spec.tensorrt_version or versions["tensorrt"]
        where = f"{jetson_profiles.profile(self.spec.target)['title']}, JetPack {versions.get('jetpack')}"
        if host is not None:
            from engine.export import deploy

            progress(self.ctx, "probe", 0.6, f"probing {host[0].name} ({host[0].address})")
            link_facts = deploy.probe(host[0], host[1])
            found = (link_facts.get("trtexec") or {}).get("tensorrt_version") \
                or jetson_profiles.from_probe(link_facts.get("jetson") or {}).get("tensorrt")
            if found and not self.spec.tensorrt_version:
                trt_version, where = str(found), f"{host[0].name}, as it reports"
        progress(self.ctx, "compat", 0.62, f"checking the graph against TensorRT {trt_version}")
        self.compat(trt_version, where)
        name = self.name()
        bundle = jetson_bundle.write_bundle(
            self.out / "jetson" / name, onnx_files=[Path(p) for p in self.onnx_report["files"]],
            inputs=self.onnx_report["inputs"], outputs=self.onnx_report["outputs"], task_name=self.task_name, labels=self.labels(),
            preprocessing=metadata.preprocessing(self.source, self.data), tokenizer_dir=self.tokenizer_dir(),
            target=self.spec.target, jetpack=versions.get("jetpack"), precision=self.spec.precision,
            shapes=self.shapes(), workspace_mb=self.spec.workspace_mb, dla_core=self.spec.dla_core,
            source_run=self.source.job_id, spec_sha256=metadata.spec_sha256(self.source.run_dir / "spec.yaml"),
            benchmark_s=self.spec.benchmark_s)
        report: dict[str, Any] = {"path": bundle["path"], "files": bundle["files"],
                                  "bytes": sum(Path(bundle["path"], f).stat().st_size for f in bundle["files"]
                                               if Path(bundle["path"], f).is_file()),
                                  "target": self.spec.target, "jetpack": versions.get("jetpack"),
                                  "tensorrt": trt_version}
        if self.spec.archive:
            report["archive"] = jetson_bundle.write_archive(Path(bundle["path"]),
                                                            self.out / "jetson" / f"{name}.tar.gz")
        if host is not None:
            report["device"] = self.deploy(host, Path(bundle["path"]), link_facts)
        return report

    def deploy(self, host: tuple[Any, Path], bundle: Path, facts: dict[str, Any] | None) -> dict[str, Any]:
        spec = host[0]
        out = run_deploy(self.ctx, host, bundle, facts)
        if out.get("stopped"):
            return {"host": spec.name, "remote_dir": out["remote_dir"], "stopped": out["stopped"]}
        bench = out.get("benchmark") or {}
        device_facts = out.get("facts") or {}
        jetson = device_facts.get("jetson") or {}
        device = {"host": spec.name, "remote_dir": out["remote_dir"],
                  "jetpack": jetson.get("jetpack"), "l4t": jetson.get("l4t"),
                  "tensorrt": bench.get("tensorrt_version")
                  or (device_facts.get("trtexec") or {}).get("tensorrt_version"),
                  "precision": self.spec.precision, "batch": self.spec.opt_batch,
                  "latency_ms": bench.get("latency_ms"), "gpu_compute_ms": bench.get("gpu_compute_ms"),
                  "throughput_qps": bench.get("throughput_qps"), "build_s": (out.get("build") or {}).get("seconds"),
                  "upload": out.get("upload")}
        self.result["device"] = device
        return device

    # ---- helpers
    def deploy_host(self) -> tuple[Any, Path] | None:
        return deploy_host(self.ctx, self.spec.host)

    def labels(self) -> list[str]:
        from engine.export.metadata import labels

        return labels(self.data)

    def tokenizer_dir(self) -> Path | None:
        from engine.export import metadata

        return metadata.tokenizer_dir(self.source) if self.task_name != "image_classification" else None

    def name(self) -> str:
        raw = f"{self.task_name}-{self.source.job_id}"
        return re.sub(r"[^A-Za-z0-9_-]", "_", raw)[:100]


def _source_kind(source: sources.Source) -> str:
    variant = source.meta.get("variant") or {}
    return str(variant.get("technique") or FINETUNE)


def main(ctx: JobContext, spec: Any) -> str | None:
    if not isinstance(spec, ExportSpec):
        raise JobFailed(f"engine.recipes.export cannot run a {type(spec).__name__}", "Check the job's kind.")
    if any(f in LLM_FORMATS for f in spec.formats):
        from engine.recipes import export_llm

        return export_llm.run(ctx, spec)
    job = Export(ctx, spec)
    job.check_formats()
    if job.out.exists():
        shutil.rmtree(job.out)  # a re-run starts clean: nothing half-written is mistaken for a result
    job.load()
    order = [f for f in ("onnx", "ort", "torchscript", "pt2", "tensorrt", "triton", "jetson") if f in spec.formats]
    if any(f in NEEDS_ONNX for f in order) and "onnx" not in order:
        order.insert(0, "onnx")  # the other formats start from it; it is kept as a format of its own
    for i, fmt in enumerate(order):
        if ctx.stop_requested:
            return "stopped"
        progress(ctx, fmt, 0.05 + 0.9 * i / len(order), f"exporting {fmt}")
        t0 = time.perf_counter()
        entry = getattr(job, fmt)()  # one method per format, named as the format
        entry.setdefault("seconds", round(time.perf_counter() - t0, 2))
        job.done(fmt, entry)
    ctx.emit("result", **job.result)
    ctx.write_result(job.result)
    progress(ctx, "done", 1.0, "exported: " + ", ".join(order))
    return None


if __name__ == "__main__":
    exit_process(run_job(main))
