"""system.prepare_model: a built-in model's folder written once (engine/api/prepared_models.py says which and why).

``progress`` events name the stage (reading the tokenizer, de-quantizing, writing) and the fraction done;
the result names the folder and its size. A second job for the same model waits for the first one's lock,
then finds the folder written and ends at once. Run by hand:

    python -m engine.recipes.model_prepare --run-dir DIR   # DIR/spec.yaml holds {kind, spec}

Test hook: ``EMBER_FAULT_PREPARE_DELAY_S`` makes the job wait that long before it converts, so tests can
show that a check never waits on a slow preparation (a busy laptop takes minutes).
"""

from __future__ import annotations

import os
import time

from engine.api.prepared_models import SMOLLM2, folder, is_ready
from engine.api.specs import ModelPrepareSpec
from engine.training.context import JobContext, JobFailed, exit_process, run_job

FAULT_DELAY_ENV = "EMBER_FAULT_PREPARE_DELAY_S"


def main(ctx: JobContext, spec: ModelPrepareSpec) -> str | None:
    from engine.tasks import builtin_models
    from engine.tasks.base import InputError

    out = folder(spec.builtin)
    if is_ready(spec.builtin):
        ctx.log(f"{spec.builtin} is prepared already: {out}")
    else:
        delay = float(os.environ.get(FAULT_DELAY_ENV) or 0)
        if delay > 0:
            ctx.log(f"waiting {delay:.0f} s before converting ({FAULT_DELAY_ENV})")
            time.sleep(delay)
        ctx.log(f"preparing {spec.builtin} once into {out}")
        started = time.monotonic()

        def report(stage: str, done: float) -> None:
            ctx.emit("progress", stage=stage, fraction=round(done, 3),
                     elapsed_s=round(time.monotonic() - started, 1))
            ctx.log(stage)

        try:
            if spec.builtin == SMOLLM2:
                builtin_models.ensure_smollm2(report)
        except InputError as exc:  # the packaged file or the gguf reader is missing: say which, and how to fix
            raise JobFailed(f"Cannot prepare {spec.builtin}: {exc}", exc.hint) from None
    files = [p for p in out.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    ctx.emit("progress", stage="ready", fraction=1.0)
    ctx.write_result({"model": spec.builtin, "path": str(out), "files": len(files), "size_bytes": size})
    ctx.emit("artifact", type="model", path=str(out))
    ctx.log(f"{spec.builtin} is ready: {len(files)} files, {size / 1e6:,.0f} MB in {out}")
    return None


if __name__ == "__main__":
    exit_process(run_job(main))
