"""The export job's one-click step to a Jetson host, for both bundles (a TensorRT engine, a language model's GGUF).

The engine writes the host's profile (``deploy_host.json``) into the job's folder when the job is submitted; the
job copies its bundle there, runs the build and benchmark scripts (engine/export/deploy.py), streams their
output into its log and ``device`` events, and returns what deploy() returned.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from engine.compress.variant import progress
from engine.training.context import JobContext, JobFailed

HOST_FILE = "deploy_host.json"  # the Jetson host's profile, written by the engine when the job is submitted


def deploy_host(ctx: JobContext, name: str | None) -> tuple[Any, Path] | None:
    """(HostSpec, known_hosts file) of the spec's host, or None when the export names none."""
    if not name:
        return None
    from engine.api.host_spec import HostSpec

    path = Path(ctx.run_dir) / HOST_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobFailed(f"The job has no profile for host {name!r} ({path}: {exc})",
                        "Submit the export through the engine (the GUI or `ember run`), which records it.") from exc
    spec = HostSpec.model_validate(doc["host"])
    if spec.auth == "password":
        raise JobFailed(f"Host {spec.name} logs in with a password, which only the engine holds in memory",
                        "Use key or agent authentication for one-click deploy (Hosts page > Edit).")
    if spec.role != "jetson":
        ctx.log(f"note: host {spec.name} is marked as a {spec.role} host, not a Jetson")
    return spec, Path(doc["known_hosts"])


def run_deploy(ctx: JobContext, host: tuple[Any, Path], bundle: Path, facts: dict[str, Any] | None,
               runtime: str = "tensorrt") -> dict[str, Any]:
    """Copy ``bundle`` to the host, build and benchmark it there; deploy()'s result (``stopped`` on a stop)."""
    from engine.export import deploy

    spec, known_hosts = host
    remote_dir = f"{spec.workdir.rstrip('/')}/deploy/{Path(ctx.run_dir).name}"
    last = {"t": 0.0}

    def on_event(stage: str, *args: Any) -> None:
        if stage == "upload":
            fraction, message = args
            now = time.monotonic()
            if now - last["t"] > 0.5 or fraction >= 1:
                last["t"] = now
                progress(ctx, "upload", 0.65 + 0.1 * float(fraction), message)
            return
        line = str(args[0])
        ctx.emit("device", stage=stage, line=line)
        ctx.log(f"[{spec.name} {stage}] {line}")

    progress(ctx, "deploy", 0.65, f"copying the bundle to {spec.name}:{remote_dir}")
    out = deploy.deploy(spec, known_hosts, bundle, remote_dir, on_event=on_event, facts=facts,
                        should_stop=lambda: ctx.stop_requested, runtime=runtime)
    out.setdefault("remote_dir", remote_dir)
    if out.get("stopped"):
        ctx.log(f"stopped during the {out['stopped']} on {spec.name}; the files there are kept")
    return out
