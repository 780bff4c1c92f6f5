"""``ember hosts ...``: the Hosts page as commands (add, trust, probe, prepare, list, remove, slurm)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from engine.cli.client import ensure_engine

LONG_S = 900.0  # probe imports torch on the host, prepare copies and installs a wheel


def _size(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "-"


def print_host(h: dict[str, Any]) -> None:
    key = (h.get("key") or {}).get("status") or "not checked"
    print(f"{h['name']:<16} {h['user'] + '@' if h['user'] else ''}{h['address']}:{h['port']}  role {h['role']}  "
          f"key {key}  python {h['python']}")
    f = h.get("facts")
    if not f:
        print(f"{'':<16} not probed yet (ember hosts probe {h['name']})")
        return
    gpus = ", ".join(f"{g['name']} {_size(g.get('memory_bytes'))}" for g in f.get("gpus") or []) or "no GPU"
    print(f"{'':<16} {f.get('os')} {f.get('arch')}, {f.get('cpu_count')} CPUs, RAM {_size(f.get('ram_bytes'))}, "
          f"free disk {_size(f.get('disk_free_bytes'))}; {gpus}; CUDA {f.get('cuda') or '-'}")
    pk = f.get("packages") or {}
    print(f"{'':<16} Python {f['python']['version']}, torch {pk.get('torch') or 'missing'}, "
          f"Ember {f.get('ember_version') or 'missing'} (here {f.get('local_ember_version')})")
    if f.get("jetson"):
        j = f["jetson"]
        print(f"{'':<16} Jetson L4T {j.get('l4t')}, JetPack {j.get('jetpack') or '-'}, TensorRT {j.get('tensorrt') or '-'}")
    for p in f.get("problems") or []:
        print(f"{'':<16} problem: {p['message']}\n{'':<16}   hint: {p['hint']}")
    print(f"{'':<16} {'ready' if f.get('ready') else 'NOT READY'}")


def _password(c: Any, name: str) -> dict[str, str]:
    host = next((h for h in c.call("hosts.list")["hosts"] if h["name"] == name), None)
    if host and host["auth"] == "password":
        return {"password": getpass.getpass(f"Password for {host['user'] or getpass.getuser()}@{host['address']}: ")}
    return {}


def cmd_hosts(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        c.timeout = LONG_S
        if args.action == "list":
            hosts = c.call("hosts.list")["hosts"]
            if args.json:
                print(json.dumps(hosts, indent=1))
            for h in [] if args.json else hosts:
                print_host(h)
            if not hosts and not args.json:
                print("No hosts yet. Add one: ember hosts add NAME ADDRESS --user USER --key ~/.ssh/id_ed25519")
            return 0
        if args.action == "add":
            profile = {k: v for k, v in {"name": args.name, "address": args.address, "port": args.port,
                                         "user": args.user, "auth": args.auth, "key_path": args.key,
                                         "python": args.python, "workdir": args.workdir, "role": args.role}.items()
                       if v is not None}
            print_host(c.call("hosts.add", host=profile))
            print(f"Next: ember hosts trust {args.name}")
            return 0
        if args.action == "remove":
            c.call("hosts.remove", name=args.name)
            return 0
        if args.action == "forget-key":
            print(f"removed {c.call('hosts.forget_key', name=args.name)['removed']} key(s)")
            return 0
        if args.action == "trust":
            return _trust(c, args)
        if args.action == "probe":
            rec = c.call("hosts.probe", name=args.name, **_password(c, args.name))
            print(json.dumps(rec["facts"], indent=1)) if args.json else print_host(rec)
            return 0 if rec["facts"]["ready"] else 3
        if args.action == "slurm":
            info = c.call("hosts.slurm", name=args.name)
            if args.json:
                print(json.dumps(info, indent=1))
                return 0
            print(f"{info['version']} on {args.name} (as {info['user']})")
            for p in info["partitions"]:
                limit = f"{p['max_minutes']} min" if p["max_minutes"] else "no limit"
                print(f"  {p['name'] + ('*' if p['default'] else ''):<16} {'up' if p['up'] else 'DOWN':<5} "
                      f"{p['nodes']} node(s), {p['idle_nodes']} idle, {p['cpus_per_node']} CPUs, "
                      f"{p['gpus_per_node']} GPUs, {p['memory_mb_per_node']} MB each, {limit}")
            return 0
        if args.action == "prepare":
            rec = c.call("hosts.prepare", name=args.name, **_password(c, args.name))
            print_host(rec)
            return 0 if rec["facts"]["ready"] else 3
    return 2


def _trust(c: Any, args: argparse.Namespace) -> int:
    status = c.call("hosts.check_key", name=args.name)
    print(f"{args.name} presents a {status['key_type']} key with fingerprint {status['fingerprint']}")
    if status["status"] == "trusted":
        print("It is trusted already.")
        return 0
    if status["status"] == "changed":
        print(f"WARNING: this differs from the trusted key ({', '.join(status['known_fingerprints'])}). Someone may "
              "be intercepting the connection. If the host was reinstalled, check the new fingerprint with its "
              f"administrator, then run: ember hosts forget-key {args.name}", file=sys.stderr)
        return 4
    expected = args.fingerprint
    if expected is None:
        print("Compare it with the host's own: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub (on the host).")
        if input("Trust this key? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Not trusted.")
            return 1
        expected = status["fingerprint"]
    c.call("hosts.trust", name=args.name, fingerprint=expected)
    print(f"Trusted. Next: ember hosts probe {args.name}")
    return 0


def add_parser(sub: Any) -> None:
    h = sub.add_parser("hosts", help="remote hosts: add, trust, probe, prepare, list, remove")
    hs = h.add_subparsers(dest="action")
    hl = hs.add_parser("list")
    hl.add_argument("--json", action="store_true")
    a = hs.add_parser("add", help="add a host profile")
    a.add_argument("name")
    a.add_argument("address")
    a.add_argument("--port", type=int)
    a.add_argument("--user")
    a.add_argument("--auth", choices=["key", "agent", "password"])
    a.add_argument("--key", help="private key file")
    a.add_argument("--python", help="the host's Python (a venv's bin/python)")
    a.add_argument("--workdir")
    a.add_argument("--role", choices=["training", "jetson"])
    t = hs.add_parser("trust", help="show the host's key fingerprint and trust it")
    t.add_argument("name")
    t.add_argument("--fingerprint", help="trust only if the host presents this SHA256 fingerprint (no prompt)")
    for action in ("remove", "forget-key", "probe", "prepare", "slurm"):
        p = hs.add_parser(action, help="the Slurm partitions of a login node (NAME, or local)" if action == "slurm"
                          else None)
        p.add_argument("name")
        p.add_argument("--json", action="store_true")
    h.set_defaults(fn=cmd_hosts, action="list", json=False)
