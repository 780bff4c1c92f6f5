"""pii.scan and pii.scrub: personal data in a dataset, found with Presidio and replaced in a copy.

A scan's result (``result.json``) holds counts per column and entity type, a few masked examples (never
a whole value), which recognizers ran and whether names were looked for; its ``progress`` events carry
rows done. A scrub writes ``<name>.scrubbed<suffix>`` (or an image folder) into its own folder unless
``output`` says where, and its result records the source's and the copy's sha256 with the modes used:
the lineage of a run trained on the copy (engine/daemon/lineage.py). Run by hand:

    python -m engine.recipes.pii --run-dir DIR   # DIR/spec.yaml holds {kind, spec}
"""

from __future__ import annotations

from pathlib import Path

from engine.api.pii_spec import PiiScanSpec, PiiScrubSpec
from engine.pii import job
from engine.pii.analyzer import Analyzer
from engine.pii.scrub import Scrubber, load_salt
from engine.training.context import JobContext, JobFailed, exit_process, run_job


def _source(spec: PiiScanSpec) -> Path:
    path = Path(spec.path).expanduser()
    if not path.exists():
        raise JobFailed(f"{path} does not exist", "Check the path: a CSV, TSV or JSONL file, or a folder of images.")
    return path.resolve()


def _output(ctx: JobContext, spec: PiiScrubSpec, source: Path) -> Path:
    if spec.output:
        out = Path(spec.output).expanduser().resolve()
    elif source.is_dir():
        out = ctx.run_dir / f"{source.name}.scrubbed"
    else:
        out = ctx.run_dir / f"{source.stem}.scrubbed{source.suffix}"
    if out == source or source in out.parents:
        raise JobFailed(f"The scrubbed copy would overwrite or go inside {source}",
                        "Pick another output: the original is never changed.")
    if out.exists() and not source.is_dir():
        raise JobFailed(f"{out} already exists", "Pick another output path, or move that file away first.")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def main(ctx: JobContext, spec: PiiScanSpec) -> str | None:
    source = _source(spec)
    ctx.log(f"loading Presidio's recognizers (threshold {spec.threshold:g})")
    try:
        analyzer = Analyzer(spec.entities, spec.threshold, spec.ner_model)
    except ValueError as exc:
        raise JobFailed(str(exc), "Leave entities empty to look for every type, or name types from the list.") from None
    ner = analyzer.info["ner"]
    ctx.log(f"recognizers: {', '.join(analyzer.info['recognizers'])}")
    ctx.log(f"names, places, organisations: {'found with ' + ner['model'] if ner['ran'] else 'not looked for; ' + ner['why']}")

    def report(done: int, total: int) -> None:
        ctx.emit("progress", done=done, total=total, unit="rows")

    try:
        if isinstance(spec, PiiScrubSpec):
            out = _output(ctx, spec, source)
            scrubber = Scrubber(spec.modes, spec.default_mode, load_salt(ctx.run_dir.parent.parent))
            ctx.log(f"scrubbing {source} into {out}")
            result = job.scrub(source, out, analyzer, scrubber, report, lambda: ctx.stop_requested)
            ctx.emit("artifact", type="dataset", path=str(out))
            found = result["replaced"]
        else:
            ctx.log(f"scanning {source}")
            result = job.scan(source, analyzer, report, lambda: ctx.stop_requested)
            found = result["findings"]
    except job.Stopped:
        ctx.log("stopped on request; nothing was kept")
        return "stopped"
    except ValueError as exc:  # an unreadable file type
        raise JobFailed(str(exc), "Scan a CSV, TSV or JSONL file, or a folder of images.") from None
    ctx.write_result(result)
    by = ", ".join(f"{e} {n}" for e, n in found["by_entity"].items()) or "nothing"
    ctx.log(f"{result['rows']} rows in {result['seconds']:.1f} s: {found['total']} findings ({by})")
    if result.get("skipped_rows"):
        ctx.log(f"{result['skipped_rows']} unreadable lines were not scanned"
                + (" and are left out of the scrubbed copy" if isinstance(spec, PiiScrubSpec) else ""))
    return None


if __name__ == "__main__":
    exit_process(run_job(main))
