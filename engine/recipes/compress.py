"""compress.quantize, compress.qat and compress.prune: one process per job, lineage to the parent run.

Reads the parent's ``model/`` (never changes it) and writes this run's ``model/``
(``model.onnx``, plus ``model.pt`` for a pruned torch module), ``evaluation.json``
(the variant scored beside its parent) and ``result.json``. Run by hand:

    python -m engine.recipes.compress --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

from engine.api.specs import PruneSpec, QatSpec, QuantizeSpec
from engine.compress.variant import Job, progress
from engine.training.context import JobContext, JobFailed, exit_process, run_job

MODE_LABELS = {"dynamic": "int8 dynamic", "static": "int8 static (QDQ)", "fp16": "fp16", "fp32": "fp32, fused graph"}
TARGET_LABELS = {"tensorrt": "TensorRT form", "cpu": "CPU form"}


def quantize(job: Job, spec: QuantizeSpec) -> str | None:
    from engine.compress import quantize as q

    parent_onnx = job.parent_onnx()
    out = job.model_dir / "model.onnx"
    src, graph = parent_onnx, None
    if spec.optimize and fuses(spec.mode, spec.target):
        # Static int8 quantizes the query, key and value projections one by one (graph_opt.ATTENTION).
        fused, graph = job.optimized(job.parent, "parent", attention="separate" if spec.mode == "static" else "packed")
        src = fused or parent_onnx
    progress(job.ctx, "quantize", 0.4, f"quantizing: {MODE_LABELS[spec.mode]}")
    exclude = {"exclude_nodes": spec.exclude_nodes, "exclude_op_types": spec.exclude_op_types}
    if spec.mode == "dynamic":
        report = q.quantize_dynamic(src, out, per_channel=spec.per_channel, **exclude)
    elif spec.mode == "static":
        names = _input_names(src)
        feeds = job.calibration_feeds(names, spec.calibration.samples)
        # The CPU form of a transformer: only what QAT quantizes (the weighted MatMuls and the embeddings).
        only = q.linear_nodes(src) if spec.target == "cpu" and not (spec.exclude_nodes or spec.exclude_op_types) \
            else []
        report = q.quantize_static(src, out, feeds, method=spec.calibration.method,
                                   per_channel=spec.per_channel, target=spec.target, only_nodes=only, **exclude)
    elif spec.mode == "fp32":
        if src == parent_onnx:
            raise JobFailed(f"nothing to fuse in this model's graph: {(graph or {}).get('skipped') or 'optimize is off'}",
                            "The parent's ONNX export is already as ONNX Runtime runs it; use int8 to go faster.")
        shutil.copyfile(src, out)
        report = {"mode": "fp32", "bytes_before": parent_onnx.stat().st_size, "bytes_after": out.stat().st_size}
    else:
        report = q.convert_fp16(src, out, exclude_op_types=spec.exclude_op_types)
    if "quantized_nodes" in report:
        job.ctx.log(f"{report['quantized_nodes']} nodes quantized, {report['bytes_before']:,} -> "
                    f"{report['bytes_after']:,} bytes")
    settings = {"mode": spec.mode, "per_channel": spec.per_channel, "optimize": spec.optimize, **exclude}
    if spec.mode == "static":
        settings["calibration"] = spec.calibration.model_dump()
        settings["target"] = spec.target
    label = MODE_LABELS[spec.mode] + (f", {TARGET_LABELS[spec.target]}" if spec.mode == "static" else "")
    extra = {"quantization": report, **({"graph": graph} if graph else {})}
    job.finish(label, f"quantize.{spec.mode}", out, None, settings, extra)
    return None


def fuses(mode: str, target: str) -> bool:
    """Whether a variant's graph gets ONNX Runtime's fused operators: only those ONNX Runtime on a CPU runs
    (TensorRT reads no com.microsoft operators; fp16 is for GPUs and Jetsons)."""
    return mode in ("dynamic", "fp32") or (mode == "static" and target == "cpu")


def qat(job: Job, spec: QatSpec) -> str | None:
    from engine.compress import qat as fq
    from engine.compress import quantize as q

    scheme = fq.Scheme(target=spec.target)
    progress(job.ctx, "prepare", 0.1, f"inserting fake int8 quantization ({TARGET_LABELS[spec.target]})")
    model = fq.prepare_qat(copy.deepcopy(job.parent), scheme)
    # The same training examples static quantization calibrates on, one at a time, through the float model.
    n = fq.calibrate(model, job.calibration_batches(spec.calibration.samples), spec.calibration.method)
    job.ctx.log(f"{fq.fake_quant_modules(model)} Linear layers fake-quantized; activation ranges from {n} examples "
                f"({spec.calibration.method})")
    trained = job.train(model.train(), spec.steps, spec.lr, spec.batch_size, "quantization-aware fine-tune",
                        teacher_alpha=spec.teacher_alpha)
    if trained is None:
        return "stopped"
    layers = fq.trained_layers(trained)
    plain = fq.convert_qat(trained)
    progress(job.ctx, "export", 0.7, "exporting the QAT model and writing its int8 QDQ graph")
    float_onnx, graph = None, None
    if spec.optimize and fuses("static", spec.target):
        float_onnx, graph = job.optimized(plain, "qat", attention="separate")
    float_onnx = float_onnx or job.export(plain, "qat_float.onnx")["path"]
    deploy = fq.deployment(layers, float_onnx)
    out = job.model_dir / "model.onnx"
    feeds = job.calibration_feeds(_input_names(float_onnx), min(spec.calibration.samples, 8))
    report = q.quantize_static(float_onnx, out, feeds, per_channel=True, reduce_range=scheme.reduce_range,
                               target=spec.target, only_nodes=deploy.nodes, overrides=deploy.overrides)
    settings = {"steps": spec.steps, "lr": spec.lr, "teacher_alpha": spec.teacher_alpha,
                "calibration": spec.calibration.model_dump(),
                "target": spec.target, "reduce_range": scheme.reduce_range, "quantized_layers": len(deploy.nodes),
                "optimize": spec.optimize}
    extra = {"quantization": report, **({"graph": graph} if graph else {})}
    job.finish(f"QAT int8, {TARGET_LABELS[spec.target]}", "qat", out, None, settings, extra)
    return None


def prune(job: Job, spec: PruneSpec) -> str | None:
    import torch

    from engine.compress.prune import prune_steps

    model, ratio, vocabulary = job.parent, spec.ratio, None
    params0 = sum(p.numel() for p in model.parameters())
    if spec.vocabulary:
        from engine.compress import vocab

        progress(job.ctx, "prune", 0.05, "keeping the embedding rows of the tokens the training data uses")
        model = copy.deepcopy(model)
        vocabulary = vocab.trim(model, job.data.train, job.data.val, job.data.info)
        job.ctx.log(f"vocabulary: {vocabulary['vocabulary_before']:,} -> {vocabulary['vocabulary_after']:,} tokens "
                    f"({vocabulary['params_removed']:,} parameters); {vocabulary['val_tokens_unknown']:.2%} of the "
                    "held-out tokens were not in the training data and now read as the nearest kept token")
        if spec.target == "params":  # the ratio is of the whole model: the vocabulary's share counts
            ratio = (spec.ratio * params0 - vocabulary["params_removed"]) / (params0 - vocabulary["params_removed"])
    report: dict[str, Any] = {}
    if ratio > 0.005:
        progress(job.ctx, "prune", 0.1, f"pruning {ratio:.0%} of the {spec.target} in {spec.iterative_steps} step(s)")
        steps = prune_steps(model, job.task_name, job.example_batch(), target=spec.target, ratio=ratio,
                            iterative_steps=spec.iterative_steps, log=job.ctx.log)
        # The recovery fine-tune is shared out between the steps: each step prunes a model that has recovered.
        share = [spec.recovery_steps // spec.iterative_steps] * spec.iterative_steps
        share[-1] += spec.recovery_steps - sum(share)
        for (work, report), steps_here in zip(steps, share, strict=True):
            if steps_here:
                what = "recovery fine-tune" + (f" after step {report['iterative_steps']} of {spec.iterative_steps}"
                                               if spec.iterative_steps > 1 else "")
                trained = job.train(work.train(), steps_here, spec.lr, spec.batch_size, what)
                if trained is None:
                    return "stopped"
                if trained is not work:
                    work.load_state_dict(trained.state_dict())
            model = work.eval()
    elif spec.recovery_steps:
        model = job.train(model.train(), spec.recovery_steps, spec.lr, spec.batch_size, "recovery fine-tune")
        if model is None:
            return "stopped"
    params = sum(p.numel() for p in model.parameters())
    report.update(params_before=params0, params_after=params, achieved=round(1 - params / params0, 6),
                  ratio=spec.ratio, target=spec.target, **({"vocabulary": vocabulary} if vocabulary else {}))
    job.ctx.log(f"pruned: {params0:,} -> {params:,} parameters")
    torch.save(model, job.model_dir / "model.pt")
    progress(job.ctx, "export", 0.8, "exporting the pruned model to ONNX")
    onnx_path = job.export(model, "model.onnx")["path"]
    settings = {"target": spec.target, "ratio": spec.ratio, "iterative_steps": spec.iterative_steps,
                "recovery_steps": spec.recovery_steps, "vocabulary": spec.vocabulary}
    label = f"pruned {spec.ratio:.0%}" + (" with vocabulary" if spec.vocabulary else "")
    job.finish(label, "prune", onnx_path, model, settings, {"pruning": report})
    return None


def _input_names(path: Any) -> list[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in init]


TECHNIQUES = {QuantizeSpec: quantize, QatSpec: qat, PruneSpec: prune}


def main(ctx: JobContext, spec: Any) -> str | None:
    technique = TECHNIQUES.get(type(spec))
    if technique is None:
        raise JobFailed(f"engine.recipes.compress cannot run a {type(spec).__name__}", "Check the job's kind.")
    job = Job.open(ctx, spec)
    try:
        return technique(job, spec)
    finally:
        shutil.rmtree(job.work, ignore_errors=True)  # intermediate exports: hundreds of MB for a transformer


if __name__ == "__main__":
    exit_process(run_job(main))
