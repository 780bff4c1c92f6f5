"""serve.model: an OpenAI-compatible endpoint for a run, a variant or a base model, until stopped (docs/serve.md).

Loads the model the way the Playground opens it (engine/inference/models.py), listens on the spec's
address (loopback by default; any other address only with an API key, written to the job's folder when
the spec names no key file), reports the URL in a ``serving`` event, then every STATS_S seconds a ``serving``
event with the figures (requests, requests/s, tokens/s, time to first token, queue, errors). Stop (SIGTERM)
closes the listener, lets the answer in progress end, and the job ends ``stopped``. Run by hand:

    python -m engine.recipes.serve --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from pathlib import Path

from engine.api.specs import ServeSpec
from engine.recipes.evaluate import open_ref
from engine.training.context import JobContext, JobFailed, run_job

STATS_S = 2.0


def served_name(spec: ServeSpec) -> str:
    """The model's name in /v1/models: the spec's, else the run's id, the built-in's name, the Hub id or the
    folder's name."""
    if spec.served_name:
        return spec.served_name
    return Path(spec.model.path).name if spec.model.path else spec.model.label()


WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # bound to every interface: this machine's clients use loopback


def api_key(spec: ServeSpec, run_dir: Path) -> tuple[str | None, str | None]:
    """The key clients must send and the file that holds it: the spec's file, a new one in the job's folder when
    bound beyond loopback, or none."""
    if spec.api_key_file:
        path = Path(spec.api_key_file).expanduser()
        try:
            key = path.read_text().strip()
        except OSError as exc:
            raise JobFailed(f"Cannot read the API key file {path}: {exc.strerror or exc}",
                            "Name a readable file holding the key, or leave api_key_file empty: off loopback the "
                            "job then writes a new key to its folder.") from exc
        if len(key) < 16 or any(ch.isspace() for ch in key):
            raise JobFailed(f"The API key in {path} is {len(key)} characters or holds spaces",
                            "Use one line of at least 16 characters without spaces, e.g. from: "
                            "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
        return key, str(path)
    if not spec.needs_key:
        return None, None
    path = run_dir / "api_key"
    key = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others, not even briefly
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key, str(path)


def main(ctx: JobContext, spec: ServeSpec) -> str | None:
    from engine.inference.models import open_model, pick_device
    from engine.serve.openai_api import Service, server

    runs = Path(ctx.run_dir).resolve().parent
    device = pick_device(spec.device)
    ctx.log(f"loading {spec.model.label()} on {device}")
    t0 = time.perf_counter()
    kind, loaded, info = open_model(open_ref(spec, runs), device)
    runtime = info.get("runtime") or ("transformers" if kind == "chat" else "torch")
    key, key_file = api_key(spec, Path(ctx.run_dir))
    service = Service(kind, loaded, served_name(spec), spec.max_new_tokens, key)
    try:
        httpd = server(service, spec.bind, spec.port)
    except OSError as exc:
        raise JobFailed(f"Cannot listen on {spec.bind}:{spec.port}: {exc.strerror or exc}",
                        "Another program (or another serve job) holds that port: pick another port, or 0 for "
                        "any free one.") from exc
    host, port = httpd.server_address[:2]
    host = WILDCARD.get(host, host)
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/v1"
    auth = {"bind": spec.bind, "api_key_file": key_file} if key_file else {"bind": spec.bind}
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    ctx.emit("serving", url=url, model=service.name, model_kind=kind, device=device, runtime=runtime,
             load_s=round(time.perf_counter() - t0, 2), **auth)
    ctx.log(f"serving {service.name} ({runtime}) at {url}, listening on {spec.bind}:{port} (OpenAI-compatible; "
            "stop the job to end it)" + (f"; clients send the API key in {key_file}" if key_file else ""))
    last, last_t = service.stats.snapshot(), time.monotonic()
    try:
        while not ctx.wait(STATS_S):
            now, now_t = service.stats.snapshot(), time.monotonic()
            dt = max(now_t - last_t, 1e-6)
            ctx.emit("serving", url=url, model=service.name, **auth, **now,
                     requests_per_s=round((now["requests"] - last["requests"]) / dt, 3),
                     tokens_per_s=round((now["tokens"] - last["tokens"]) / dt, 2))
            last, last_t = now, now_t
    finally:
        httpd.shutdown()  # no new requests; an answer in progress finishes on its own thread
        httpd.server_close()
        with service.lock:  # wait for it
            pass
    ctx.log(f"stopped serving; {service.stats.snapshot()['requests']} requests in all")
    return "stopped"


if __name__ == "__main__":
    sys.exit(run_job(main))
