"""``ember users``: the engine's users, their roles and projects, and their tokens (docs/security.md).

    ember users add alice --role operator --project vision --project nlp     # prints alice's token once
    ember users list
    ember users update alice --role viewer
    ember users token alice          # a new token; the old one stops working
    ember users revoke alice
    ember users me                   # who this connection is
    ember projects                   # the projects you belong to, their data folders, hosts and members
    ember projects set vision --data-folder /data/vision --host gpu1     # only vision's jobs read or use them
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from engine.api.permissions import ROLE_WORDS, ROLES
from engine.cli.client import ensure_engine


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(t)) if t else "-"


def _show(u: dict[str, Any]) -> None:
    state = "revoked" if u.get("revoked_at") else (f"expires {_when(u['expires_at'])}" if u.get("expires_at")
                                                  else "active")
    out(f"{u['name']:<20} {u['role']:<9} {','.join(u['projects']) or '-':<24} {state}")


def _token(name: str, token: str) -> None:
    out(f"token for {name} (shown once; give it to them over a private channel):\n{token}")


def cmd_users(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        action = args.users_action or "list"
        if action == "list":
            for u in c.call("users.list")["users"]:
                _show(u)
        elif action == "me":
            me = c.call("users.me")
            out(f"{me['name']} ({me['role']}: {ROLE_WORDS[me['role']]}); projects: {', '.join(me['projects'])}")
        elif action == "add":
            params: dict[str, Any] = {"name": args.name, "role": args.role, "projects": args.project or ["default"]}
            if args.expires_days:
                params["expires_days"] = args.expires_days
            reply = c.call("users.add", **params)
            _show(reply["user"])
            _token(args.name, reply["token"])
        elif action in ("update", "token"):
            params = {"name": args.name, "new_token": action == "token"}
            for key in ("role", "expires_days"):
                if getattr(args, key, None):
                    params[key] = getattr(args, key)
            if getattr(args, "project", None):
                params["projects"] = args.project
            reply = c.call("users.update", **params)
            _show(reply["user"])
            if reply.get("token"):
                _token(args.name, reply["token"])
        else:
            _show(c.call("users.revoke", name=args.name)["user"])
    return 0


def add_parser(sub: Any) -> None:
    u = sub.add_parser("users", help="the engine's users, roles and projects (a team engine)")
    us = u.add_subparsers(dest="users_action")
    us.add_parser("list", help="every user, role, projects and token state (the default)")
    us.add_parser("me", help="who this connection is")
    roles = "; ".join(f"{r}: {w}" for r, w in ROLE_WORDS.items())
    for action, text in (("add", "a new user; prints their token once"), ("update", "change a user's role or projects"),
                         ("token", "a new token for a user (the old one stops working)"),
                         ("revoke", "the user's token stops working at once")):
        a = us.add_parser(action, help=text)
        a.add_argument("name")
        if action in ("add", "update"):
            a.add_argument("--role", choices=ROLES, required=action == "add", help=roles)
            a.add_argument("--project", action="append", help="a project they belong to (repeatable; * = all)")
            a.add_argument("--expires-days", type=float, help="the token stops working after this many days")
    u.set_defaults(fn=cmd_users, users_action=None)


def cmd_projects(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        if args.projects_action == "set":
            c.call("projects.set", name=args.name, data_folders=args.data_folder or [], hosts=args.host or [],
                   endpoints=args.endpoint, remove=args.remove)
        for p in c.call("projects.list")["projects"]:
            out(f"{p['name']}: members {', '.join(p['members']) or '-'}")
            out(f"  data folders: {', '.join(p['data_folders']) or 'none (data anywhere)'}")
            out(f"  hosts: {', '.join(p['hosts']) or 'none (everyone’s hosts)'}")
            out(f"  endpoints: {', '.join(p.get('endpoints') or []) or 'only its own serve jobs'}")
    return 0


def add_projects_parser(sub: Any) -> None:
    p = sub.add_parser("projects", help="projects: their members, data folders and hosts (a team engine)")
    ps = p.add_subparsers(dest="projects_action")
    ps.add_parser("list", help="the projects you belong to (the default)")
    s = ps.add_parser("set", help="give a project its data folders and hosts (admin); replaces what it had")
    s.add_argument("name")
    s.add_argument("--data-folder", action="append", help="a folder whose files only this project's jobs read "
                                                          "(repeatable)")
    s.add_argument("--host", action="append", help="a host (Hosts page) only this project's jobs use (repeatable)")
    s.add_argument("--endpoint", action="append", help="an OpenAI-compatible server's URL its members may chat "
                                                       "with (repeatable; without it the allowed ones stay)")
    s.add_argument("--remove", action="store_true", help="forget the project's folders and hosts")
    p.set_defaults(fn=cmd_projects, projects_action=None)


def cmd_secrets(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        if args.secrets_action == "set":
            value = sys.stdin.readline().strip() if not args.remove else None
            if not args.remove and not value:
                out("No secret on standard input: ember secrets set PROJECT NAME < file")
                return 2
            c.call("secrets.set", project=args.project, name=args.name, secret=value, remove=args.remove)
        for project, names in c.call("secrets.list")["secrets"].items():
            out(f"{project}: {', '.join(names) or '-'}")
    return 0


def add_secrets_parser(sub: Any) -> None:
    p = sub.add_parser("secrets", help="secrets an admin keeps for a project (an endpoint's API key): names only")
    ps = p.add_subparsers(dest="secrets_action")
    ps.add_parser("list", help="your projects' secrets, by name (the default)")
    s = ps.add_parser("set", help="keep a secret for a project, read from standard input (admin)")
    s.add_argument("project")
    s.add_argument("name")
    s.add_argument("--remove", action="store_true", help="forget it")
    p.set_defaults(fn=cmd_secrets, secrets_action=None)
