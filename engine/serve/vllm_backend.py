"""vLLM behind a serve.model job: on a machine (or SSH host) with CUDA GPUs, the endpoint is vLLM's own
OpenAI-compatible server, tensor parallel across the GPUs (docs/serve.md#backends).

The job starts ``VLLM_PYTHON -m vllm.entrypoints.openai.api_server`` as its child (its own process group),
with the model folder, the served name, the job's address and port, ``--tensor-parallel-size`` and the API
key; waits until ``/v1/models`` answers (or the child ends: its log's last lines are the message); then
reports the same ``serving`` figures as Ember's own server, read from vLLM's Prometheus ``/metrics``
(requests, tokens, time to first token, running and waiting requests). Stop sends SIGTERM to the child's
group, then SIGKILL after a grace period. vLLM often lives in a venv of its own: ``vllm_python`` names it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine.api.load_test import http_get
from engine.training.context import JobFailed

READY_TIMEOUT_S = 1800.0  # a large model loads for minutes, and vLLM compiles its CUDA graphs
STOP_GRACE_S = 20.0
MODULE = "vllm.entrypoints.openai.api_server"


def has_vllm(python: str) -> bool:
    """Whether ``python`` can import vLLM (found, not imported: importing it takes seconds)."""
    try:
        out = subprocess.run([python, "-c", "import importlib.util, sys; "
                                            "sys.exit(0 if importlib.util.find_spec('vllm') else 1)"],
                             capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def command(python: str, folder: Path, name: str, host: str, port: int, tensor_parallel: int,
            api_key: str | None) -> list[str]:
    cmd = [python, "-m", MODULE, "--model", str(folder), "--served-model-name", name, "--host", host,
           "--port", str(port), "--tensor-parallel-size", str(tensor_parallel)]
    if api_key:
        cmd += ["--api-key", api_key]  # vLLM checks it on every /v1 route, as Ember's server does
    return cmd


class VllmServer:
    """The vLLM child process of one serve job."""

    def __init__(self, cmd: list[str], url: str, api_key: str | None, log: Path):
        self.cmd, self.url, self.api_key, self.log = cmd, url, api_key, log  # url: the server's .../v1
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.log.parent, preexec_fn=_die_with_parent)

    def tail(self, n: int = 8) -> str:
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def wait_ready(self, should_stop: Any, timeout: float = READY_TIMEOUT_S) -> bool:
        """True once /v1/models answers; False when a stop came first; JobFailed when vLLM ended or hung."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise JobFailed(f"vLLM ended (exit {self.proc.returncode}) before it served:\n{self.tail()}",
                                f"Read {self.log.name} in the job's folder: a model vLLM does not support, too "
                                "little GPU memory (a smaller tensor_parallel or model), or a CUDA mismatch. "
                                "backend: ember serves it without vLLM.")
            if should_stop():
                return False
            try:
                if http_get(self.url + "/models", self.api_key, timeout=2)[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(1.0)
        raise JobFailed(f"vLLM did not answer within {timeout:.0f} s", f"Read {self.log.name} in the job's folder.")

    def metrics(self) -> dict[str, Any]:
        """The serving figures from vLLM's /metrics (cumulative counts; the job makes rates of them)."""
        try:
            status, raw = http_get(self.url.removesuffix("/v1") + "/metrics", self.api_key, timeout=5)
        except OSError:
            return {}
        return parse_metrics(raw.decode(errors="replace")) if status == 200 else {}

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def _die_with_parent() -> None:
    """In the child, before vLLM starts: SIGTERM when the job process ends, however it ends (a SIGKILL
    included), so a killed job never leaves vLLM holding the GPUs (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)$")


def parse_metrics(text: str) -> dict[str, Any]:
    """vLLM's Prometheus text as Ember's figures: requests, errors, tokens, active, queue, ttft_p50_s."""
    sums: dict[str, float] = {}
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        sums[name] = sums.get(name, 0.0) + value
        if name == "vllm:time_to_first_token_seconds_bucket":
            le = re.search(r'le="([^"]+)"', labels)
            if le:
                buckets.append((float(le.group(1)), value))
    out: dict[str, Any] = {
        "requests": int(sums.get("vllm:request_success_total", 0) + sums.get("vllm:num_requests_running", 0)),
        "errors": int(sums.get("vllm:request_failure_total", 0)),
        "tokens": int(sums.get("vllm:generation_tokens_total", 0)),
        "active": int(sums.get("vllm:num_requests_running", 0)),
        "queue": int(sums.get("vllm:num_requests_waiting", 0)),
        "ttft_p50_s": None,
        # Finished requests' generated tokens and end-to-end seconds: tokens/s as Ember defines it everywhere.
        "done_tokens": int(sums.get("vllm:request_generation_tokens_sum", 0)),
        "done_s": float(sums.get("vllm:e2e_request_latency_seconds_sum", 0.0)),
    }
    total = sums.get("vllm:time_to_first_token_seconds_count", 0)
    if total:
        for le, count in sorted(buckets):  # the bucket holding the median: an upper bound, as Prometheus gives it
            if count >= total / 2:
                out["ttft_p50_s"] = le
                break
    return out
