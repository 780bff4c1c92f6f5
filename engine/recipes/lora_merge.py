"""compress.lora_merge: fold a finished LoRA fine-tune's adapters into its base weights.

Reads ``<runs>/<source_run>/model/`` (never changes it) and writes this run's
``model/weights.safetensors`` (a plain state dict) and ``model/ember_model.json``
(method ``full`` with ``merged_from``, ``parent_run``, parity figures). Run by hand:

    python -m engine.recipes.lora_merge --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.api.specs import LoraMergeSpec
from engine.compress.lora_merge import merge
from engine.compress.variant import Job
from engine.training.context import JobContext, JobFailed, exit_process, run_job


def main(ctx: JobContext, spec: LoraMergeSpec) -> str | None:
    source = Path(ctx.run_dir).resolve().parent / spec.source_run
    if not source.is_dir():
        raise JobFailed(f"No run directory for source_run {spec.source_run!r} ({source})",
                        "Pick a finished LoRA fine-tune from the runs list.")
    ctx.log(f"merging the LoRA adapters of run {spec.source_run}")
    figures = merge(source, ctx.run_dir, spec.parity_samples, ctx.log)
    parity = figures["parity"]
    ctx.log(f"parity on {parity['samples']} examples: top-1 agreement {parity['top1_agreement']:.4f}, "
            f"max logit difference {parity['max_abs_logit_diff']:.2e}; "
            f"{figures['params_before']:,} -> {figures['params_after']:,} parameters, "
            f"{figures['bytes_before']:,} -> {figures['bytes_after']:,} bytes")
    # The parent, loaded for evaluation, has its adapters merged in memory: in ONNX Runtime the two are
    # one graph, so the evaluation confirms parity on the whole held-out split rather than a speed-up.
    job = Job.open(ctx, spec)
    merged_from = figures.pop("merged_from")
    try:
        job.finish("LoRA merged", "lora_merge", job.parent_onnx(), job.parent,
                   {"parity_samples": spec.parity_samples}, figures,
                   meta_extra={"method": {"kind": "full", "merged_from": merged_from}, "parity": parity})
    finally:
        shutil.rmtree(job.work, ignore_errors=True)
    return None


if __name__ == "__main__":
    exit_process(run_job(main))
