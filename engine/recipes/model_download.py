"""model.download: a model (or with ``repo_type: dataset`` a dataset) from the Hugging Face Hub into the cache.

Files go to the standard cache (``$HF_HOME/hub``, or ``HF_HUB_CACHE``), where every Hugging Face
library and a fine-tune's ``model.hub`` find them. ``progress`` events carry bytes done and total,
speed and ETA. A stop keeps the partial file, and running the job again (``jobs.resume``, or a new
download of the same model) continues it with an HTTP Range request. The token is the one
huggingface_hub reads (``$HF_HOME/token``, ``HF_TOKEN``); it never appears in the spec. Run by hand:

    python -m engine.recipes.model_download --run-dir DIR   # DIR/spec.yaml holds {kind, spec}
"""

from __future__ import annotations

from engine.api.specs import ModelDownloadSpec
from engine.tasks import hub_models
from engine.training.context import JobContext, exit_process, run_job


def main(ctx: JobContext, spec: ModelDownloadSpec) -> str | None:
    rev = spec.revision or "main"
    what = "dataset " if spec.repo_type == "dataset" else ""
    ctx.log(f"downloading {what}{spec.repo_id} ({rev}) from {hub_models.hub_endpoint()} into {hub_models.cache_dir()}")
    folder = hub_models.download(spec.repo_id, spec.revision, report=lambda fields: ctx.emit("progress", **fields),
                                 should_stop=lambda: ctx.stop_requested, log=ctx.log, repo_type=spec.repo_type)
    if folder is None:
        ctx.log("stopped on request; run the download again to continue where it stopped")
        return "stopped"
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in files)
    result = {"repo_id": spec.repo_id, "revision": rev, "commit": folder.name, "path": str(folder),
              "files": len(files), "size_bytes": size, "repo_type": spec.repo_type}
    ctx.write_result(result)
    ctx.emit("artifact", type=spec.repo_type, path=str(folder))
    ctx.log(f"{spec.repo_id} is cached: {len(files)} files, {size:,} bytes in {folder}")
    return None


if __name__ == "__main__":
    exit_process(run_job(main))
