"""compress.lora_merge: fold a finished LoRA fine-tune's adapters into its base weights.

Reads ``<runs>/<source_run>/model/`` (never changes it) and writes this run's
``model/weights.safetensors`` (a plain state dict) and ``model/ember_model.json``
(method ``full`` with ``merged_from``, ``parent_run``, parity figures). Run by hand:

    python -m engine.recipes.lora_merge --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.compress.lora_merge import merge
from engine.jobctx import JobContext, JobFailed, run_job
from engine.specs import LoraMergeSpec


def main(ctx: JobContext, spec: LoraMergeSpec) -> str | None:
    source = Path(ctx.run_dir).resolve().parent / spec.source_run
    if not source.is_dir():
        raise JobFailed(f"No run directory for source_run {spec.source_run!r} ({source})",
                        "Pick a finished LoRA fine-tune from the runs list.")
    ctx.log(f"merging the LoRA adapters of run {spec.source_run}")
    result = merge(source, ctx.run_dir, spec.parity_samples, ctx.log)
    parity = result["parity"]
    ctx.log(f"parity on {parity['samples']} examples: top-1 agreement {parity['top1_agreement']:.4f}, "
            f"max logit difference {parity['max_abs_logit_diff']:.2e}; "
            f"{result['params_before']:,} -> {result['params_after']:,} parameters, "
            f"{result['bytes_before']:,} -> {result['bytes_after']:,} bytes")
    ctx.write_result(result)
    ctx.emit("artifact", type="model", path=result["path"], source_run=spec.source_run)
    ctx.emit("result", **result)
    return None


if __name__ == "__main__":
    sys.exit(run_job(main))
