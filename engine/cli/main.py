"""Headless command line: ``ember engine|jobs|run|logs|stop|cancel|hosts ...``.

Everything the GUI does goes through the same engine protocol, so each GUI
action has a command here.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import datetime
from typing import Any

import engine
from engine.api import paths as paths_mod
from engine.api.protocol import RpcError
from engine.api.remote_engine import CertificateMismatch, UnknownCertificate
from engine.cli.client import (
    BlockingClient,
    EngineNotRunning,
    certificate_advice,
    ensure_engine,
    forget_certificate,
)
from engine.cli.follow import exit_code, follow
from engine.cli.progress import display_for


def _when(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _print_job(job: dict[str, Any]) -> None:
    dur = (job["ended_at"] or time.time()) - job["started_at"] if job.get("started_at") else None
    dur_s = f"{dur:7.1f}s" if dur is not None else "      -"
    print(f"{job['id']:<26} {job['kind']:<16} {job['state']:<10} {_when(job['created_at'])} {dur_s}  {job['name']}")
    if job.get("error"):
        print(f"{'':<26} error: {job['error'].get('message')}  hint: {job['error'].get('hint')}")


# ---- engine
def cmd_engine(args: argparse.Namespace) -> int:
    if args.action == "forget":  # a team engine's certificate changed for a known reason (docs/cli.md)
        address = args.address or os.environ.get("EMBER_ENGINE")
        if not address:
            print("error: which engine? ember engine forget HOST:PORT (as EMBER_ENGINE names it)", file=sys.stderr)
            return 2
        code, text = forget_certificate(address)
        print(text, file=sys.stderr if code else sys.stdout)
        return code
    p = paths_mod.resolve()
    if args.action == "serve":
        from engine.daemon.server import serve

        return serve(max_concurrent=args.max_jobs, listen=args.listen, cert=args.cert, key=args.key)
    if args.action == "start":
        with ensure_engine(p) as c:
            st = c.call("engine.status")
        print(f"engine {st['version']} running, pid {st['pid']}, socket {st['socket']}")
        return 0
    try:
        c = BlockingClient.connect(p)
    except EngineNotRunning as exc:
        print(f"stopped: {exc}")
        return 1 if args.action == "status" else 0
    with c:
        st = c.call("engine.status")
        if args.action == "status":
            if args.json:
                print(json.dumps(st, indent=1))
            else:
                jobs = ", ".join(f"{k} {v}" for k, v in sorted(st["jobs"].items())) or "none"
                print(f"running: engine {st['version']}, pid {st['pid']}, up {st['uptime_s']:.0f} s\n"
                      f"  data dir: {st['home']}\n  socket:   {st['socket']}\n  jobs:     {jobs}\n"
                      f"  clients:  {st['clients']}")
            return 0
        c.call("engine.shutdown")
    return _wait_gone(st["pid"], args.timeout)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # a zombie has already exited
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            print(f"engine (pid {pid}) stopped; running jobs go on and are re-attached at the next start")
            return 0
        time.sleep(0.05)
    print(f"engine (pid {pid}) did not stop within {timeout:.0f} s; sending SIGTERM")
    os.kill(pid, signal.SIGTERM)
    return 1


# ---- jobs
def cmd_jobs(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        if args.action == "kinds":
            for name, k in c.call("jobs.kinds").items():
                print(f"{name:<16} {k['title']}: {k['description']}")
            return 0
        jobs = c.call("jobs.list", limit=args.limit, **({"state": args.state} if args.state else {}))["jobs"]
        for job in jobs:
            _print_job(job)
        if not jobs:
            print("no jobs yet: try `ember jobs start system.probe`")
    return 0


def _parse_sets(pairs: list[str]) -> dict[str, Any]:
    import yaml

    spec: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value, got {pair!r}")
        spec[key] = yaml.safe_load(value)
    return spec


def cmd_start(args: argparse.Namespace) -> int:
    from engine.api.specs import SpecError, load_job_file, validate_spec

    try:
        if args.action == "run":
            kind, spec, name = load_job_file(args.file)
        else:
            kind, name = args.kind, args.name or ""
            spec = validate_spec(kind, _parse_sets(args.set or []))
    except SpecError as exc:
        print(f"error: {exc}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    with ensure_engine() as c:
        from engine.api.custom_code import start_confirmed  # model.code: ask y/N (or --trust-code)

        talk: dict[str, Any] = {}
        if args.json:  # stdout carries JSON only: the model-code question goes to stderr
            talk = {"out": lambda text: print(text, file=sys.stderr),
                    "ask": lambda prompt: (print(prompt, end="", file=sys.stderr, flush=True), input())[1]}
        job = start_confirmed(c, kind, spec.model_dump(mode="json"), name, getattr(args, "trust_code", None), **talk)
        if job is None:
            return 1
        display = display_for(sys.stdout, as_json=args.json, quiet=args.quiet)
        display.started(job)
        if args.detach:
            return 0
        return exit_code(follow(c, job, display))


def cmd_control(args: argparse.Namespace) -> int:
    with ensure_engine() as c:
        if args.action == "logs":
            for line in c.call("jobs.logs", id=args.id, tail=args.tail)["lines"]:
                print(line)
            return 0
        _print_job(c.call(f"jobs.{args.action}", id=args.id))
    return 0


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--detach", action="store_true", help="return once the job is started")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true",
                     help="one JSON object a line: the job record as {\"job\": ...} when it starts and ends, "
                          "each event between as {topic, seq, t, data}")
    out.add_argument("--quiet", action="store_true", help="no progress: only warnings, errors and the summary")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ember", description="Ember Studio (headless commands).")
    ap.add_argument("--version", action="version", version=f"ember-studio {engine.__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    e = sub.add_parser("engine", help="start, stop or inspect the background engine")
    e.add_argument("action", choices=["serve", "start", "status", "stop", "forget"])
    e.add_argument("address", nargs="?", help="forget: the team engine (HOST:PORT) whose accepted certificate to "
                   "drop; default: EMBER_ENGINE")
    e.add_argument("--json", action="store_true", help="status as JSON")
    e.add_argument("--max-jobs", type=int, default=int(os.environ.get("EMBER_MAX_JOBS", "2")),
                   help="jobs that may run at once (serve)")
    e.add_argument("--timeout", type=float, default=15.0)
    e.add_argument("--listen", metavar="HOST:PORT",
                   help="serve: also listen on TCP with TLS for GUIs and CLIs on other machines, e.g. 0.0.0.0:7443 "
                        "(docs/security.md)")
    e.add_argument("--cert", help="serve --listen: the team's certificate (PEM); default: a self-signed one")
    e.add_argument("--key", help="serve --listen: the certificate's private key (PEM)")
    e.set_defaults(fn=cmd_engine)

    j = sub.add_parser("jobs", help="list jobs or job kinds, or start a job")
    jsub = j.add_subparsers(dest="action")
    jl = jsub.add_parser("list")
    jl.add_argument("--state")
    jl.add_argument("--limit", type=int, default=50)
    jsub.add_parser("kinds")
    js = jsub.add_parser("start", help="start a job of KIND with --set key=value")
    js.add_argument("kind")
    js.add_argument("--set", action="append", metavar="KEY=VALUE")
    js.add_argument("--name")
    _output_options(js)
    js.set_defaults(fn=cmd_start)
    from engine.cli import manifest as cli_manifest

    cli_manifest.add_parser(jsub)
    j.set_defaults(fn=cmd_jobs, action="list", state=None, limit=50)

    r = sub.add_parser("run", help="run a job file (YAML: kind, spec, name) and follow it")
    r.add_argument("file")
    _output_options(r)
    r.add_argument("--trust-code", metavar="SHA256", help="confirm model.code without asking: its expected sha256")
    r.set_defaults(fn=cmd_start, action="run")

    from engine.cli import export as cli_export
    from engine.cli import hosts as cli_hosts

    cli_hosts.add_parser(sub)
    cli_export.add_parser(sub)
    from engine.cli import audit as cli_audit
    from engine.cli import queue as cli_queue

    cli_audit.add_parser(sub)
    cli_queue.add_parser(sub)
    from engine.cli import models as cli_models

    cli_models.add_parser(sub)
    from engine.cli import chat as cli_chat

    cli_chat.add_parser(sub)
    from engine.cli import chats as cli_chats

    cli_chats.add_parser(sub)
    from engine.cli import serve as cli_serve

    cli_serve.add_parser(sub)
    from engine.cli import evaluate as cli_evaluate

    cli_evaluate.add_parser(sub)
    from engine.cli import pii as cli_pii
    from engine.cli import users as cli_users

    cli_pii.add_parser(sub)
    cli_users.add_parser(sub)
    cli_users.add_projects_parser(sub)
    cli_users.add_secrets_parser(sub)

    for action, help_text in (("stop", "stop a job gracefully"), ("cancel", "stop a job at once"),
                              ("resume", "continue a stopped or failed training job from its checkpoint"),
                              ("logs", "print a job's log")):
        c = sub.add_parser(action, help=help_text)
        c.add_argument("id")
        c.add_argument("--tail", type=int, default=200)
        c.set_defaults(fn=cmd_control, action=action)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (UnknownCertificate, CertificateMismatch) as exc:  # a team engine's certificate: new, or changed
        print(certificate_advice(exc, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return 1
    except RpcError as exc:
        print(f"error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        for f in exc.data.get("fields", []):
            print(f"  - {f.get('field')}: {f.get('message')}", file=sys.stderr)
        return 2
    except EngineNotRunning as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except paths_mod.UnsafeRuntimeDir as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
