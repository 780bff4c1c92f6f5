"""``ember pii``: scan a dataset for personal data, scrub it into a copy, and set the data policy.

    ember pii scan data/tickets.csv
    ember pii scrub data/tickets.csv --mode tag --mode PERSON=fake --mode EMAIL_ADDRESS=hash
    ember pii policy --folder data/customers --max-findings 0     # training needs a clean scan or a scrub
    ember pii policy --project vision                             # every fine-tune of vision: a scan first
    ember pii policy                                              # list the rules
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.api.job_terms import PII_SCAN, PII_SCRUB, SUCCEEDED
from engine.api.pii_spec import MODE_WORDS, SCRUB_MODES
from engine.cli.client import ensure_engine
from engine.cli.follow import exit_code, follow
from engine.cli.progress import display_for


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _modes(values: list[str]) -> tuple[str | None, dict[str, str]]:
    default, modes = None, {}
    for v in values:
        entity, _, mode = v.rpartition("=")
        if mode not in SCRUB_MODES:
            raise SystemExit(f"error: --mode {v}: the mode must be one of {', '.join(SCRUB_MODES)}")
        if entity:
            modes[entity] = mode
        else:
            default = mode
    return default, modes


def show_findings(result: dict[str, Any], key: str = "findings") -> None:
    found = result.get(key) or {}
    ner = result.get("ner") or {}
    out(f"{result.get('path')}: {result.get('rows')} rows, {found.get('total', 0)} findings "
        f"({result.get('rows_per_s') or '-'} rows/s)")
    out(f"recognizers: {', '.join(result.get('recognizers') or [])}")
    out("people, places, organisations: " + (f"looked for with {ner.get('model')}" if ner.get("ran")
                                             else f"not looked for ({ner.get('why')})"))
    for col in found.get("columns") or []:
        out(f"  {col['column']}: {col['cells']} cells")
        for entity, n in col["entities"].items():
            examples = ", ".join((col.get("examples") or {}).get(entity) or [])
            out(f"    {entity:<20} {n:>7}   {examples}")
    if result.get("skipped_rows"):
        out(f"  {result['skipped_rows']} unreadable lines not scanned, e.g. line "
            f"{result['skipped'][0]['line']}: {result['skipped'][0]['reason']}")
    if result.get("output"):
        out(f"scrubbed copy: {result['output']['path']} (sha256 {result['output']['sha256'][:16]}…)")


def cmd_pii(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        if args.pii_action == "policy":
            if args.folder or args.project:
                where = {"folder": args.folder} if args.folder else {"project": args.project}
                rules = c.call("pii.set_policy", **where, max_findings=args.max_findings, clear=args.clear)["rules"]
            else:
                rules = c.call("pii.policy")["rules"]
            for r in rules:
                limit = "a scan" if r["max_findings"] is None else f"a scan with at most {r['max_findings']} findings"
                where = r["folder"] if "folder" in r else f"project {r['project']}"
                out(f"{where}: training needs {limit}, or a scrubbed copy")
            if not rules:
                out("no rules: data is trained on as it is")
            return 0
        spec: dict[str, Any] = {"path": str(Path(args.path).expanduser().resolve()), "threshold": args.threshold}
        if args.entities:
            spec["entities"] = args.entities.split(",")
        if args.ner_model:
            spec["ner_model"] = args.ner_model
        kind = PII_SCAN
        if args.pii_action == "scrub":
            kind = PII_SCRUB
            default, modes = _modes(args.mode or [])
            spec.update(modes=modes, **({"default_mode": default} if default else {}))
            if args.output:
                spec["output"] = str(Path(args.output).expanduser().resolve())
        job = c.call("jobs.start", kind=kind, spec=spec, name=f"{args.pii_action} {Path(args.path).name}")
        display = display_for(sys.stderr, as_json=False, quiet=args.json)
        display.started(job)
        final = follow(c, job, display)
        if final and final.get("state") == SUCCEEDED:
            result = c.call("jobs.get", id=job["id"]).get("result") or {}
            if args.json:
                out(json.dumps(result, indent=1))
            else:
                show_findings(result, "replaced" if kind == PII_SCRUB else "findings")
        return exit_code(final)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("pii", help="personal data in datasets: scan, scrub into a copy, the data policy")
    ps = p.add_subparsers(dest="pii_action", required=True)
    for action, text in (("scan", "count personal data per column and type (Presidio), with masked examples"),
                         ("scrub", "write a copy with personal data replaced (the original is never changed)")):
        a = ps.add_parser(action, help=text)
        a.add_argument("path", help="a CSV, TSV or JSONL file, or a folder of images (EXIF)")
        a.add_argument("--entities", help="comma-separated types to look for (default: every type)")
        a.add_argument("--threshold", type=float, default=0.4, help="lowest Presidio score counted (default 0.4)")
        a.add_argument("--ner-model", help="a transformers NER model (folder or Hub id), or a spaCy pipeline "
                                           "folder, for people, places, organisations (default: a spaCy model "
                                           "when installed)")
        a.add_argument("--json", action="store_true", help="print the job's result as JSON")
        if action == "scrub":
            a.add_argument("--mode", action="append", metavar="[TYPE=]MODE",
                           help="how to replace (repeatable): " + "; ".join(MODE_WORDS.values())
                           + ". TYPE=MODE sets one type, MODE the rest (default tag)")
            a.add_argument("--output", help="where to write the copy (default: in the job's folder)")
    pol = ps.add_parser("policy", help="list the data policy's rules, or set one with --folder or --project")
    pol.add_argument("--folder", help="a folder (or / for every file) whose files need a scan before training")
    pol.add_argument("--project", help="or a project: every data file its fine-tunes read")
    pol.add_argument("--max-findings", type=int, help="findings allowed before a scrub is required")
    pol.add_argument("--clear", action="store_true", help="remove the rule of --folder or --project")
    p.set_defaults(fn=cmd_pii)
