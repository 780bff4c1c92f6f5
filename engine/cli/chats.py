"""``ember chats``: the Playground's saved chats from a terminal (list, show, export as JSONL, delete).

``ember chat ... --save`` keeps a terminal conversation the same way, so it opens in the Playground too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine.api.playground import conversation_line
from engine.cli.client import ensure_engine


def export_lines(conversation: dict[str, Any]) -> list[str]:
    """One JSONL line per side, as the Playground's Export writes them."""
    settings = conversation.get("settings") or {}
    return [conversation_line(side.get("messages") or [], side["model"], settings, side.get("title") or "")
            for side in conversation.get("sides") or [] if side.get("messages")]


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def cmd_chats(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.id:
        print(f"error: ember chats {args.action} needs a chat's id (ember chats lists them)", file=sys.stderr)
        return 2
    with ensure_engine() as client:
        if args.action == "list":
            reply = client.call("chats.list", limit=args.limit)
            if args.json:
                print(json.dumps(reply))
                return 0
            for row in reply["chats"]:
                print(f"{row['id']}  {_when(row['updated_at'])}  {row['questions']:>3} questions  "
                      f"{' | '.join(row['models'])}  {row['title']}")
            if not reply["chats"]:
                print("No saved chats yet: chat in the Playground, or use ember chat --save.", file=sys.stderr)
            return 0
        if args.action == "delete":
            client.call("chats.delete", id=args.id)
            print(f"deleted {args.id}", file=sys.stderr)
            return 0
        reply = client.call("chats.get", id=args.id)
    conversation = reply["conversation"]
    if args.action == "export":
        text = "".join(line + "\n" for line in export_lines(conversation))
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
            print(f"wrote {args.out}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if args.json:
        print(json.dumps(reply))
        return 0
    print(f"{reply['title']}  ({_when(reply['updated_at'])})")
    system = (conversation.get("settings") or {}).get("system")
    for side in conversation["sides"]:
        print(f"\n== {side.get('title') or json.dumps(side['model'])}")
        if system:
            print(f"[system] {system}")
        for message in side.get("messages") or []:
            print(f"[{message['role']}] {message['content']}")
    return 0


def add_parser(sub: Any) -> None:
    c = sub.add_parser("chats", help="the Playground's saved chats: list, show, export as JSONL, delete")
    c.add_argument("action", nargs="?", default="list", choices=("list", "show", "export", "delete"))
    c.add_argument("id", nargs="?", help="a saved chat's id (ember chats lists them)")
    c.add_argument("--limit", type=int, default=100, help="list: at most this many, newest first")
    c.add_argument("--out", help="export: write to this file instead of stdout")
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_chats)

