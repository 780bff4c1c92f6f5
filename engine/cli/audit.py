"""``ember audit`` (the audit log, printed or exported) and ``ember lineage RUN`` (where a model came from)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.api.audit_rows import COLUMNS, iso, row
from engine.cli.client import BlockingClient, ensure_engine

PAGE = 500


def pages(c: BlockingClient, limit: int | None, **filters: Any) -> Iterator[dict[str, Any]]:
    """Audit records newest first, page by page (each reply stays well under the frame limit)."""
    # Records written while paging are newer than this: pinned, the pages neither shift nor repeat.
    filters.setdefault("until", time.time() + 0.001)
    offset, sent = 0, 0
    while limit is None or sent < limit:
        want = PAGE if limit is None else min(PAGE, limit - sent)
        reply = c.call("audit.list", limit=want, offset=offset, **filters)
        yield from reply["records"]
        sent += len(reply["records"])
        if reply.get("next_offset") is None or not reply["records"]:
            return
        offset = reply["next_offset"]


def cmd_audit(args: argparse.Namespace) -> int:
    filters = {k: v for k, v in (("action", args.action), ("client", args.client), ("text", args.text),
                                 ("user", args.user)) if v}
    if args.failed:
        filters["ok"] = False
    with ensure_engine() as c:
        records = pages(c, args.limit, **filters)
        if args.csv:
            with open(args.csv, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(COLUMNS)
                n = 0
                for rec in records:
                    w.writerow(row(rec))
                    n += 1
            print(f"wrote {n} records to {args.csv}")
        elif args.jsonl:
            with open(args.jsonl, "w", encoding="utf-8") as f:
                n = 0
                for rec in records:
                    f.write(json.dumps(rec, sort_keys=True) + "\n")
                    n += 1
            print(f"wrote {n} records to {args.jsonl}")
        else:
            n = 0
            for rec in records:
                n += 1
                status = "ok" if rec.get("ok") else f"FAILED: {rec.get('error')}"
                print(f"{iso(rec.get('t'))}  {rec.get('user') or '-':<10} {rec.get('client', ''):<16} "
                      f"{rec.get('action', ''):<18} "
                      f"{rec.get('target', ''):<26} {status}")
            if not n:
                print("no audit records match")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from engine.api.lineage_report import to_markdown

    with ensure_engine() as c:
        rec = c.call("jobs.lineage", id=args.run)
    as_json = args.json or str(args.out or "").lower().endswith(".json")
    text = json.dumps(rec, indent=1) if as_json else to_markdown(rec)
    if args.out:
        Path(args.out).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        print(f"wrote the lineage of {args.run} to {args.out}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def add_parser(sub: Any) -> None:
    a = sub.add_parser("audit", help="the engine's audit log: every state-changing request (newest first)")
    a.add_argument("--limit", type=int, default=None, help="at most this many records (default: all, or 50 printed)")
    a.add_argument("--action", help="an action, or a glob such as 'jobs.*'")
    a.add_argument("--client", help="a client name, or a glob")
    a.add_argument("--user", help="who made the request (a user name; local: the engine's own admin)")
    a.add_argument("--text", help="records containing this text anywhere")
    a.add_argument("--failed", action="store_true", help="only refused or failed requests")
    out = a.add_mutually_exclusive_group()
    out.add_argument("--csv", metavar="FILE", help="write CSV (time, client, action, target, ok, error, params)")
    out.add_argument("--jsonl", metavar="FILE", help="write JSON Lines, one record a line")
    a.set_defaults(fn=_audit_defaults)

    lin = sub.add_parser("lineage", help="where a job's model came from: spec, data and model hashes, versions, "
                                         "parent jobs, artifacts")
    lin.add_argument("run", help="a run id")
    lin.add_argument("--json", action="store_true", help="the record as JSON instead of Markdown")
    lin.add_argument("--out", metavar="FILE", help="write the report to FILE (.md or .json)")
    lin.set_defaults(fn=cmd_lineage)


def _audit_defaults(args: argparse.Namespace) -> int:
    if args.limit is None and not (args.csv or args.jsonl):
        args.limit = 50  # a terminal shows the newest; a file gets everything
    return cmd_audit(args)
