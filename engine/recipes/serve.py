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
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.api.playground import tokens_per_s
from engine.api.specs import ServeSpec
from engine.recipes.evaluate import open_ref
from engine.training.context import JobContext, JobFailed, exit_process, run_job

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


def _auth(spec: ServeSpec, key_file: str | None) -> dict[str, Any]:
    """What every ``serving`` event says of access: the address bound, and the key's file when there is one."""
    return {"bind": spec.bind, "api_key_file": key_file} if key_file else {"bind": spec.bind}


def _url(host: str, port: int) -> str:
    host = WILDCARD.get(host, host)
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/v1"


def report(ctx: JobContext, url: str, name: str, auth: dict[str, Any], snapshot: Callable[[], dict[str, Any]],
           alive: Callable[[], None] = lambda: None) -> None:
    """Every STATS_S seconds until Stop, a ``serving`` event with the figures and their rates."""
    last, last_t = snapshot(), time.monotonic()
    while not ctx.wait(STATS_S):
        alive()
        now, now_t = snapshot(), time.monotonic()
        if not now:
            continue
        dt = max(now_t - last_t, 1e-6)
        # tokens/s of the answers that ended since the last report (their tokens over their seconds, as the chat
        # line under each answer counts it); None when none ended, so an idle server shows no made-up 0.
        speed = tokens_per_s(now.get("done_tokens", 0) - last.get("done_tokens", 0),
                             now.get("done_s", 0.0) - last.get("done_s", 0.0))
        ctx.emit("serving", url=url, model=name, **auth, **now,
                 requests_per_s=round((now["requests"] - last.get("requests", 0)) / dt, 3),
                 tokens_per_s=None if speed is None else round(speed, 2))
        last, last_t = now, now_t


def _cannot_listen(spec: ServeSpec, exc: OSError) -> JobFailed:
    return JobFailed(f"Cannot listen on {spec.bind}:{spec.port}: {exc.strerror or exc}",
                     "Another program (or another serve job) holds that port: pick another port, or 0 for "
                     "any free one.")


def _port_is_free(spec: ServeSpec) -> None:
    """A port the spec names, bound and let go as the server binds it (address reuse on), or JobFailed. The
    server's own bind, after the model loaded, still reports a port taken in between."""
    if not spec.port:
        return
    with socket.socket(socket.AF_INET6 if ":" in spec.bind else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((spec.bind, spec.port))
        except OSError as exc:
            raise _cannot_listen(spec, exc) from exc


def main(ctx: JobContext, spec: ServeSpec) -> str | None:
    from engine.inference.models import open_model, pick_device
    from engine.serve.openai_api import Service, server

    runs = Path(ctx.run_dir).resolve().parent
    _port_is_free(spec)  # before the model loads for minutes: a taken port fails at once
    ref = open_ref(spec, runs)
    vllm = vllm_plan(ctx, spec, ref)
    if vllm is not None:
        return serve_vllm(ctx, spec, *vllm)
    device = pick_device(spec.device)
    ctx.log(f"loading {spec.model.label()} on {device}")
    t0 = time.perf_counter()
    kind, loaded, info = open_model(ref, device)
    runtime = info.get("runtime") or ("transformers" if kind == "chat" else "torch")
    key, key_file = api_key(spec, Path(ctx.run_dir))
    service = Service(kind, loaded, served_name(spec), spec.max_new_tokens, key)
    try:
        httpd = server(service, spec.bind, spec.port)
    except OSError as exc:
        raise _cannot_listen(spec, exc) from exc
    port = httpd.server_address[1]
    url = _url(httpd.server_address[0], port)
    auth = _auth(spec, key_file)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    ctx.emit("serving", url=url, model=service.name, model_kind=kind, device=device, runtime=runtime,
             load_s=round(time.perf_counter() - t0, 2), **auth)
    ctx.log(f"serving {service.name} ({runtime}) at {url}, listening on {spec.bind}:{port} (OpenAI-compatible; "
            "stop the job to end it)" + (f"; clients send the API key in {key_file}" if key_file else ""))
    try:
        report(ctx, url, service.name, auth, service.stats.snapshot)
    finally:
        httpd.shutdown()  # no new requests; an answer in progress finishes on its own thread
        httpd.server_close()
        service.close()  # waits for it
    ctx.log(f"stopped serving; {service.stats.snapshot()['requests']} requests in all")
    return "stopped"


# ---------------------------------------------------------------- vLLM (engine/serve/vllm_backend.py)


def _hf_folder(ref: dict[str, Any]) -> Path | None:
    """The Hugging Face folder vLLM can load for a reference, or None (a GGUF file, an ONNX folder, a LoRA
    run whose adapter is not merged, a classifier)."""
    from engine.inference.models import model_folder

    if ref.get("run_dir"):
        folder = Path(ref["run_dir"]) / "model"
    elif ref.get("url"):
        return None
    else:
        folder = model_folder(ref)
    if not (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file():
        return None
    return folder if any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")) else None


def vllm_plan(ctx: JobContext, spec: ServeSpec, ref: dict[str, Any]) -> tuple[Path, str, int] | None:
    """(folder, vLLM's Python, tensor-parallel size) when vLLM serves this job, else None (Ember's server)."""
    if spec.backend == "ember":
        return None
    from engine.serve.vllm_backend import has_vllm

    python = spec.vllm_python or sys.executable
    gpus = 0
    if spec.device != "cpu":
        import torch

        gpus = torch.cuda.device_count()
    folder = _hf_folder(ref)
    if spec.backend == "auto":
        if not gpus:
            return None
        why = ("the model is not a Hugging Face folder vLLM loads (export it as hf: merged)" if folder is None else
               "" if has_vllm(python) else f"{python} has no vLLM (pip install vllm; or set vllm_python)")
        if why:
            ctx.log(f"{gpus} CUDA GPU(s) here, but not serving with vLLM: {why}; Ember's server instead")
            return None
        return folder, python, spec.tensor_parallel or gpus
    if folder is None:
        raise JobFailed(f"vLLM serves a Hugging Face model folder, and {spec.model.label()} is not one (a GGUF "
                        "file, an ONNX-GenAI folder, a classifier or a LoRA run with its adapter apart)",
                        "Export the run as hf (merged checkpoint) and serve that folder, or use backend: auto.")
    if not has_vllm(python):
        raise JobFailed(f"vLLM is not installed for {python}",
                        "On a CUDA machine: python -m venv ~/vllm && ~/vllm/bin/pip install vllm, then set "
                        "vllm_python: ~/vllm/bin/python; or use backend: auto (Ember's server without it).")
    return folder, python, spec.tensor_parallel or max(1, gpus)


PORT_TRIES = 3


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def serve_vllm(ctx: JobContext, spec: ServeSpec, folder: Path, python: str, tensor_parallel: int) -> str:
    from engine.serve.vllm_backend import VllmServer, command

    name = served_name(spec)
    key, key_file = api_key(spec, Path(ctx.run_dir))
    t0 = time.perf_counter()
    for attempt in range(1, PORT_TRIES + 1):
        port = spec.port or _free_port(spec.bind)
        cmd = command(python, folder, name, spec.bind, port, tensor_parallel, key)
        shown = " ".join("***" if key and part == key else part for part in cmd)  # the key never reaches a log
        ctx.log(f"starting vLLM (tensor parallel {tensor_parallel}): {shown}")
        url = _url(spec.bind, port)
        server = VllmServer(cmd, url, key, Path(ctx.run_dir) / "vllm.log")
        server.start()
        try:
            ready = server.wait_ready(lambda: ctx.stop_requested)
            break
        except JobFailed as exc:
            server.stop()
            # A port picked for vLLM is free when picked but vLLM binds it seconds later, after its imports;
            # another program may take it meanwhile. Only a picked port is picked again; a named one is the user's.
            if spec.port or attempt == PORT_TRIES or "address already in use" not in str(exc).lower():
                raise
            ctx.log(f"port {port} was taken before vLLM bound it; picking another")
    try:
        if not ready:
            return "stopped"
        auth = _auth(spec, key_file)
        ctx.emit("serving", url=url, model=name, model_kind="chat", device="cuda", runtime="vllm",
                 tensor_parallel=tensor_parallel, load_s=round(time.perf_counter() - t0, 2), **auth)
        ctx.log(f"serving {name} (vLLM, tensor parallel {tensor_parallel}) at {url} (OpenAI-compatible; stop the "
                "job to end it)" + (f"; clients send the API key in {key_file}" if key_file else ""))

        def alive() -> None:
            if server.proc is not None and server.proc.poll() is not None:
                raise JobFailed(f"vLLM ended (exit {server.proc.returncode}) while serving:\n{server.tail()}",
                                "Read vllm.log in the job's folder.")

        report(ctx, url, name, auth, server.metrics, alive)
    finally:
        server.stop()
    ctx.log("stopped serving (vLLM)")
    return "stopped"


if __name__ == "__main__":
    exit_process(run_job(main))
