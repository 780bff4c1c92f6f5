"""``ember evaluate MODEL``: an evaluate.model job from a terminal, followed to the end, then its scores and
the table of the run's family (base model, fine-tune, variants; docs/evaluate.md).

MODEL is what ``ember chat`` takes: a finished job's id, a built-in model's name, a model folder, or a Hub
id in the Hugging Face cache.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from engine.api import evaluations as table
from engine.api.job_terms import EVALUATE
from engine.api.specs import SpecError, validate_spec
from engine.cli.chat import model_ref
from engine.cli.client import ensure_engine
from engine.cli.follow import exit_code, follow
from engine.cli.progress import display_for

SHOWN_SAMPLES = 3


def _path_or_name(text: str) -> str:
    """A file or folder that exists is passed on as an absolute path (the job runs in its own folder)."""
    expanded = os.path.expanduser(text)
    return os.path.abspath(expanded) if os.path.exists(expanded) else text


def spec_of(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": model_ref(args.model)}
    if args.data:
        spec["data"] = _path_or_name(args.data)
    for key in ("validation_of", "limit", "max_new_tokens", "batch_size", "device", "text_column", "label_column"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    if args.no_generation:
        spec["generation"] = False
    if args.lm_eval_tasks:
        lm: dict[str, Any] = {"tasks": [t.strip() for t in args.lm_eval_tasks.split(",") if t.strip()]}
        if args.include_path:
            lm["include_path"] = _path_or_name(args.include_path)
        if args.limit:
            lm["limit"] = args.limit
        if args.num_fewshot is not None:
            lm["num_fewshot"] = args.num_fewshot
        spec["lm_eval"] = lm
    elif args.include_path or args.num_fewshot is not None:
        raise SystemExit("error: --include-path and --num-fewshot go with --lm-eval-tasks")
    return spec


def print_result(result: dict[str, Any]) -> None:
    """The job's own figures: answer scores (or a classifier's), samples, lm-eval rows, times."""
    data = result.get("data") or {}
    scored = result.get("generation") or result.get("classification")
    if scored:
        print(f"{result['model']['label']} on {data.get('label')} ({scored.get('rows')} rows):")
        print("  " + "  ".join(f"{table.heading(k)} {v:.4f}" for k, v in scored["metrics"].items()))
        for s in (scored.get("samples") or [])[:SHOWN_SAMPLES]:
            if "prompt" in s:
                print(f"  Q: {s['prompt']!r}\n     expected {s['reference']!r}, got {s['generated']!r}")
            else:
                print(f"  {s['text'][:60]!r}: {s['label']} -> {s['predicted']}")
    for row in (result.get("lm_eval") or {}).get("tasks") or []:
        value = table.cell_text(row.get("value"), row.get("stderr"))
        print(f"  lm-eval {table.lm_column(row)}: {value} ({row.get('docs')} documents)")
    t = result.get("timings") or {}
    print("  time: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in t.items()))


def print_table(reply: dict[str, Any], data_key: str | None) -> None:
    """Base model, fine-tune and variants, one line each (the Compare page's Evaluations tab)."""
    columns, rows = table.build(reply, data_key)
    shown = [c for c in columns if any(r.cells.get(c) is not None for r in rows)]
    if not shown:
        return
    label_width = max(len(r.label) for r in rows) + 2
    widths = [max(len(table.heading(c)), 7) for c in shown]
    print()
    print(f"{'model':<{label_width}}" + "  ".join(f"{table.heading(c):>{w}}" for c, w in zip(shown, widths, strict=True)))
    for r in rows:
        cells = [table.cell_text(r.cells.get(c)) for c in shown]
        print(f"{r.label:<{label_width}}" + "  ".join(f"{v:>{w}}" for v, w in zip(cells, widths, strict=True)))


def cmd_evaluate(args: argparse.Namespace) -> int:
    try:
        checked = validate_spec(EVALUATE, spec_of(args))
    except SpecError as exc:
        print(f"error: {exc}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    with ensure_engine() as c:
        job = c.call("jobs.start", kind=EVALUATE, spec=checked.model_dump(mode="json", exclude_none=True),
                     name=args.name or table.job_name(checked.model.model_dump(exclude_none=True)))
        display = display_for(sys.stdout, as_json=args.json, quiet=args.quiet)
        display.started(job)
        code = exit_code(follow(c, job, display))
        if args.json:
            return code
        final = c.call("jobs.get", id=job["id"])
        if final.get("result"):
            print_result(final["result"])
        family = final.get("parent_id") or checked.validation_of  # a run, or a base model beside one
        if family:  # the family's table, on the data this job scored
            reply = c.call("evaluations.list", id=family)
            mine = next((e for r in reply["rows"] for e in r["evaluations"] if e["job"] == job["id"]), None)
            print_table(reply, mine["data_key"] if mine else None)
        return code


def add_parser(sub: Any) -> None:
    e = sub.add_parser("evaluate", help="score a run, variant or base model: generation metrics on a dataset, "
                                        "and lm-eval benchmarks")
    e.add_argument("model", help="a job id, a built-in model, a model folder, or a Hub id in the cache")
    e.add_argument("--data", help="a JSONL file or a built-in dataset (short-answers, tiny-instructions, "
                                  "support-tickets); default: the run's validation data")
    e.add_argument("--validation-of", dest="validation_of", metavar="RUN",
                   help="score on this run's validation data (a base model beside its fine-tune)")
    e.add_argument("--limit", type=int, help="rows scored, and lm-eval documents per task")
    e.add_argument("--max-new-tokens", type=int, dest="max_new_tokens")
    e.add_argument("--batch-size", type=int, dest="batch_size")
    e.add_argument("--lm-eval-tasks", dest="lm_eval_tasks", metavar="A,B", help="lm-eval tasks, comma-separated")
    e.add_argument("--include-path", dest="include_path", metavar="DIR", help="a folder of lm-eval task YAML files")
    e.add_argument("--num-fewshot", type=int, dest="num_fewshot")
    e.add_argument("--no-generation", action="store_true", help="run only the lm-eval tasks")
    e.add_argument("--text-column", dest="text_column")
    e.add_argument("--label-column", dest="label_column")
    e.add_argument("--device", choices=["auto", "cpu", "cuda"])
    e.add_argument("--name")
    out = e.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="the job's events as JSON lines, no table")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    e.set_defaults(fn=cmd_evaluate)
