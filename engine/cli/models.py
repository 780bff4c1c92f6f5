"""``ember models`` and ``ember hub``: models from the Hugging Face Hub, as the Models page shows them.

``ember models list|download ID|delete ID|search TEXT``; ``ember hub status|login|logout``. The token
is read from the terminal without echo (or from stdin), never from the command line, where it would
stay in the shell's history and the process list.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from typing import Any

from engine.api.job_terms import MODEL_DOWNLOAD
from engine.cli.client import ensure_engine
from engine.cli.follow import exit_code, follow
from engine.cli.progress import display_for


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def show_cached(reply: dict[str, Any]) -> None:
    models = reply.get("models") or []
    if not models:
        out(f"no models in the Hugging Face cache ({reply.get('cache_dir')}); "
            "`ember models download OWNER/NAME` adds one")
        return
    out(f"{'model':<44} {'size':>9}  {'last used':<16}  revisions")
    for m in models:
        revs = ", ".join(f"{r['commit'][:10]}" + (f" ({', '.join(r['refs'])})" if r["refs"] else "")
                         for r in m["revisions"]) or "none complete"
        partial = f"  + {size(m['partial_bytes'])} partial" if m.get("partial_bytes") else ""
        out(f"{m['repo_id']:<44} {size(m['size_bytes']):>9}  {when(m['last_used']):<16}  {revs}{partial}")
        out(f"{'':<44} {m['path']}")
    out(f"cache: {reply.get('cache_dir')}")


def show_found(reply: dict[str, Any]) -> None:
    models = reply.get("models") or []
    if not models:
        out(f"no model on {reply.get('endpoint')} matches")
        return
    out(f"{'model':<44} {'downloads':>10} {'size':>9}  {'licence':<14} gated")
    for m in models:
        gated = "yes" if m.get("gated") else "no"
        cached = "  (cached)" if m.get("cached") else ""
        out(f"{m['repo_id']:<44} {m.get('downloads') or 0:>10,} {size(m.get('size_bytes')):>9}  "
            f"{m.get('license') or '-':<14} {gated}{cached}")


def show_status(st: dict[str, Any]) -> None:
    tok = st["token"]
    where = {"file": f"saved in {tok['path']}", "environment": "from the HF_TOKEN environment variable"}
    out(f"hub:   {st['endpoint']}" + ("  (offline: HF_HUB_OFFLINE is set)" if st.get("offline") else ""))
    out(f"cache: {st['cache_dir']}")
    out(f"token: {where.get(tok.get('source') or '', 'none')}")


def read_token() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("Hugging Face access token (input hidden): ")
    return sys.stdin.readline()


def cmd_models(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        action = args.models_action or "list"
        if action == "list":
            show_cached(c.call("models.list"))
        elif action == "search":
            show_found(c.call("models.search", text=" ".join(args.text), limit=args.limit))
        elif action == "delete":
            params = {"repo_id": args.repo_id, **({"revision": args.revision} if args.revision else {})}
            freed = c.call("models.delete", **params)["freed_bytes"]
            out(f"deleted {args.repo_id}" + (f" at {args.revision}" if args.revision else "") + f": {size(freed)} freed")
        else:
            spec = {"repo_id": args.repo_id, **({"revision": args.revision} if args.revision else {}),
                    **({"repo_type": "dataset"} if args.dataset else {})}
            job = c.call("jobs.start", kind=MODEL_DOWNLOAD, spec=spec, name=f"download {args.repo_id}")
            display = display_for(sys.stdout, as_json=args.json, quiet=args.quiet)
            display.started(job)
            if args.detach:
                return 0
            return exit_code(follow(c, job, display))
    return 0


def cmd_hub(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        if args.hub_action == "login":
            token = read_token()
            st = c.call("hub.login", token=token)
            out("token saved")
        elif args.hub_action == "logout":
            st = c.call("hub.logout")
            out("token removed" if st["token"]["source"] != "environment"
                else "token file removed; HF_TOKEN is still set in the environment and stays in use")
        else:
            st = c.call("hub.status")
        show_status(st)
    return 0


def add_parser(sub: Any) -> None:
    m = sub.add_parser("models", help="models from the Hugging Face Hub: the cache, downloads, search")
    ms = m.add_subparsers(dest="models_action")
    ms.add_parser("list", help="models in the Hugging Face cache, with size and last use (the default)")
    d = ms.add_parser("download", help="download a model into the cache, with progress (resumable)")
    d.add_argument("repo_id", help="OWNER/NAME, as on the model's page")
    d.add_argument("--revision", help="a branch, tag or commit (default: main)")
    d.add_argument("--dataset", action="store_true", help="REPO_ID is a dataset (a fine-tune's data.hub)")
    d.add_argument("--detach", action="store_true", help="return once the download job is started")
    view = d.add_mutually_exclusive_group()
    view.add_argument("--json", action="store_true", help="one JSON object a line, as `ember run --json`")
    view.add_argument("--quiet", action="store_true", help="no progress bar")
    rm = ms.add_parser("delete", help="delete a cached model (or one revision)")
    rm.add_argument("repo_id")
    rm.add_argument("--revision", help="only this commit or ref")
    s = ms.add_parser("search", help="search the Hugging Face Hub")
    s.add_argument("text", nargs="+")
    s.add_argument("--limit", type=int, default=20)
    m.set_defaults(fn=cmd_models, models_action=None)

    h = sub.add_parser("hub", help="the Hugging Face access token and where models come from")
    hs = h.add_subparsers(dest="hub_action")
    hs.add_parser("status", help="the Hub's address, the cache folder, whether a token is saved (the default)")
    hs.add_parser("login", help="save an access token (typed hidden, or read from stdin)")
    hs.add_parser("logout", help="delete the saved token")
    h.set_defaults(fn=cmd_hub, hub_action=None)
