"""serve.model: an OpenAI-compatible endpoint for a run, a variant or a base model, until stopped (docs/serve.md).

Loads the model the way the Playground opens it (engine/inference/models.py), listens on the spec's
address (loopback only), reports the URL in a ``serving`` event, then every STATS_S seconds a ``serving``
event with the figures (requests, requests/s, tokens/s, time to first token, queue, errors). Stop (SIGTERM)
closes the listener, lets the answer in progress end, and the job ends ``stopped``. Run by hand:

    python -m engine.recipes.serve --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

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


def main(ctx: JobContext, spec: ServeSpec) -> str | None:
    from engine.inference.models import open_model, pick_device
    from engine.serve.openai_api import Service, server

    runs = Path(ctx.run_dir).resolve().parent
    device = pick_device(spec.device)
    ctx.log(f"loading {spec.model.label()} on {device}")
    t0 = time.perf_counter()
    kind, loaded, info = open_model(open_ref(spec, runs), device)
    runtime = info.get("runtime") or ("transformers" if kind == "chat" else "torch")
    service = Service(kind, loaded, served_name(spec), spec.max_new_tokens)
    try:
        httpd = server(service, spec.bind, spec.port)
    except OSError as exc:
        raise JobFailed(f"Cannot listen on {spec.bind}:{spec.port}: {exc.strerror or exc}",
                        "Another program (or another serve job) holds that port: pick another port, or 0 for "
                        "any free one.") from exc
    host, port = httpd.server_address[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    ctx.emit("serving", url=url, model=service.name, model_kind=kind, device=device, runtime=runtime,
             load_s=round(time.perf_counter() - t0, 2))
    ctx.log(f"serving {service.name} ({runtime}) at {url} (OpenAI-compatible; stop the job to end it)")
    last, last_t = service.stats.snapshot(), time.monotonic()
    try:
        while not ctx.wait(STATS_S):
            now, now_t = service.stats.snapshot(), time.monotonic()
            dt = max(now_t - last_t, 1e-6)
            ctx.emit("serving", url=url, model=service.name, **now,
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
