"""compress.quantize, compress.qat and compress.prune: one process per job, lineage to the parent run.

Reads the parent's ``model/`` (never changes it) and writes this run's ``model/``
(``model.onnx``, plus ``model.pt`` for a pruned torch module), ``evaluation.json``
(the variant scored beside its parent) and ``result.json``. Run by hand:

    python -m engine.recipes.compress --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

import copy
import shutil
import sys
from typing import Any

from engine.api.specs import PruneSpec, QatSpec, QuantizeSpec
from engine.compress.variant import Job, progress
from engine.training.context import JobContext, JobFailed, run_job

MODE_LABELS = {"dynamic": "int8 dynamic", "static": "int8 static (QDQ)", "fp16": "fp16"}
TARGET_LABELS = {"tensorrt": "TensorRT form", "cpu": "CPU form"}


def quantize(job: Job, spec: QuantizeSpec) -> str | None:
    from engine.compress import quantize as q

    parent_onnx = job.parent_onnx()
    out = job.model_dir / "model.onnx"
    progress(job.ctx, "quantize", 0.4, f"quantizing: {MODE_LABELS[spec.mode]}")
    exclude = {"exclude_nodes": spec.exclude_nodes, "exclude_op_types": spec.exclude_op_types}
    if spec.mode == "dynamic":
        report = q.quantize_dynamic(parent_onnx, out, per_channel=spec.per_channel, **exclude)
    elif spec.mode == "static":
        names = _input_names(parent_onnx)
        feeds = job.calibration_feeds(names, spec.calibration.samples)
        report = q.quantize_static(parent_onnx, out, feeds, method=spec.calibration.method,
                                   per_channel=spec.per_channel, target=spec.target, **exclude)
    else:
        report = q.convert_fp16(parent_onnx, out, exclude_op_types=spec.exclude_op_types)
    job.ctx.log(f"{report.get('quantized_nodes', '?')} nodes quantized, {report['bytes_before']:,} -> "
                f"{report['bytes_after']:,} bytes")
    settings = {"mode": spec.mode, "per_channel": spec.per_channel, **exclude}
    if spec.mode == "static":
        settings["calibration"] = spec.calibration.model_dump()
        settings["target"] = spec.target
    label = MODE_LABELS[spec.mode] + (f", {TARGET_LABELS[spec.target]}" if spec.mode == "static" else "")
    job.finish(label, f"quantize.{spec.mode}", out, None, settings, {"quantization": report})
    return None


def qat(job: Job, spec: QatSpec) -> str | None:
    from engine.compress import qat as fq
    from engine.compress import quantize as q

    progress(job.ctx, "prepare", 0.1, "inserting fake quantization (torchao)")
    model = fq.prepare_qat(copy.deepcopy(job.parent).train())
    trained = job.train(model, spec.steps, spec.lr, spec.batch_size, "quantization-aware fine-tune")
    if trained is None:
        return "stopped"
    plain = fq.convert_qat(trained)
    progress(job.ctx, "export", 0.7, "exporting the QAT model and quantizing it to int8 QDQ")
    float_onnx = job.export(plain, "qat_float.onnx")["path"]
    out = job.model_dir / "model.onnx"
    feeds = job.calibration_feeds(_input_names(float_onnx), spec.calibration.samples)
    # The head trained without fake quantization; it stays float in the int8 model too. The
    # exporter names nodes by module path ("/model/classifier/Gemm").
    head = [n["name"] for n in q.quantizable_nodes(float_onnx)
            if fq.is_head(".".join(part for part in n["name"].split("/") if part))]
    report = q.quantize_static(float_onnx, out, feeds, method=spec.calibration.method, per_channel=True,
                               exclude_nodes=head, target=spec.target)
    settings = {"steps": spec.steps, "lr": spec.lr, "calibration": spec.calibration.model_dump(),
                "target": spec.target, "float_nodes": head}
    job.finish("QAT int8", "qat", out, None, settings, {"quantization": report})
    return None


def prune(job: Job, spec: PruneSpec) -> str | None:
    import torch

    from engine.compress.prune import prune as prune_model

    progress(job.ctx, "prune", 0.1, f"pruning {spec.ratio:.0%} of the {spec.target}")
    model, report = prune_model(job.parent, job.task_name, job.example_batch(), target=spec.target,
                                ratio=spec.ratio, iterative_steps=spec.iterative_steps, log=job.ctx.log)
    job.ctx.log(f"pruned: {report['params_before']:,} -> {report['params_after']:,} parameters")
    if spec.recovery_steps:
        model = job.train(model.train(), spec.recovery_steps, spec.lr, spec.batch_size, "recovery fine-tune")
        if model is None:
            return "stopped"
    torch.save(model, job.model_dir / "model.pt")
    progress(job.ctx, "export", 0.8, "exporting the pruned model to ONNX")
    onnx_path = job.export(model, "model.onnx")["path"]
    settings = {"target": spec.target, "ratio": spec.ratio, "iterative_steps": spec.iterative_steps,
                "recovery_steps": spec.recovery_steps}
    job.finish(f"pruned {spec.ratio:.0%}", "prune", onnx_path, model, settings, {"pruning": report})
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
    sys.exit(run_job(main))
