"""The engine's side of the Playground: one inference worker process per loaded model.

A worker (``python -m engine.inference.worker``) starts on the first request for its model, after a
memory check, and answers over stdin/stdout (JSON lines). Each chat answer streams as events on the
topic ``playground/<request id>``: ``{"status": "loading"}`` while the model loads, ``{"text": ...}``
chunks, then ``{"done": true, ...stats}`` or ``{"error": ..., "hint": ...}``. A worker idle for
``idle_s`` is stopped; one that dies is reported on its open requests and started again next time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.api.playground import ModelRef
from engine.api.protocol import INVALID_PARAMS, RpcError
from engine.daemon.endpoints import Endpoints
from engine.daemon.eventbus import EventBus
from engine.launch import forkserver
from engine.launch.local import job_env

log = logging.getLogger(__name__)

RUNTIME_BYTES = 600 * 2**20  # torch, transformers and the worker itself, measured with SmolLM2 loaded
IDLE_S = float(os.environ.get("EMBER_PLAYGROUND_IDLE_S", "600"))
MAX_WORKERS = 4
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".onnx")


def topic(rid: str) -> str:
    return f"playground/{rid}"


def model_folder(ref: dict[str, Any]) -> Path | None:
    if ref.get("run_dir"):
        return Path(ref["run_dir"]) / "model"
    if ref.get("path"):
        return Path(ref["path"]).expanduser()
    return None


def memory_needed(folder: Path | None) -> int:
    """Bytes a worker needs for a model folder: its weights as float32 (16-bit files double) and the runtime."""
    if folder is None or not folder.is_dir():
        return RUNTIME_BYTES + 600 * 2**20  # a built-in or cached Hub model: about SmolLM2's size
    weights = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    try:
        dtype = json.loads((folder / "config.json").read_text()).get("torch_dtype") or ""
    except (OSError, ValueError):
        dtype = ""
    return int(weights * (2 if dtype in ("bfloat16", "float16") else 1)) + RUNTIME_BYTES


def memory_problem(needed: int, available: int, name: str) -> str | None:
    if needed <= available:
        return None
    gib = 2**30
    return (f"Not enough memory to load {name}: it needs about {needed / gib:.1f} GiB and "
            f"{available / gib:.1f} GiB are free")


@dataclass
class Worker:
    key: str
    label: str
    proc: Any  # asyncio.subprocess.Process, or forkserver.PipedProcess (the same calls)
    ready: asyncio.Future
    started: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    kind: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    open: dict[str, asyncio.Future] = field(default_factory=dict)  # rid -> done (value: the result or stats)
    reader: asyncio.Task | None = None

    def alive(self) -> bool:
        return self.proc.returncode is None

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())

    def describe(self) -> dict[str, Any]:
        rss = 0
        with contextlib.suppress(Exception):
            import psutil

            rss = psutil.Process(self.proc.pid).memory_info().rss
        state = "ready" if self.ready.done() and not self.ready.exception() else "loading"
        return {"model": json.loads(self.key), "label": self.label, "pid": self.proc.pid, "state": state,
                "kind": self.kind, "info": self.info, "rss": rss, "busy": len(self.open),
                "idle_s": round(time.monotonic() - self.last_used, 1)}


class WorkerPool:
    def __init__(self, bus: EventBus, runs_dir: Path, idle_s: float = IDLE_S,
                 threads: Callable[[], int] | None = None,
                 served: Callable[[dict, int, Callable[[str], bool]], str | None] | None = None):
        """``threads``: how many CPU threads a new worker may use (the cores no running job asked for);
        ``served``: the URL of a running serve job of a model (max_new_tokens, which jobs the caller may use),
        or None."""
        self.bus, self.runs_dir, self.idle_s, self.threads, self.served = bus, runs_dir, idle_s, threads, served
        self.workers: dict[str, Worker] = {}
        self._owner: dict[str, Worker] = {}  # rid -> its worker
        self._reaper: asyncio.Task | None = None
        self.endpoints = Endpoints(bus, topic)  # served models: streamed by the engine, no worker

    # ---- references
    def worker_ref(self, ref: ModelRef) -> dict[str, Any]:
        """What the worker loads: a run id becomes its folder (the worker never reads the store)."""
        if ref.run:
            run_dir = self.runs_dir / ref.run
            if not (run_dir / "model").is_dir():
                raise RpcError(INVALID_PARAMS, f"Job {ref.run} has no finished model to try",
                               {"hint": "Pick a finished fine-tune or variant (Runs page)."})
            return {"run_dir": str(run_dir)}
        return ref.model_dump(exclude_none=True, exclude={"api_key", "api_key_secret"})

    # ---- workers
    async def _start(self, ref: ModelRef) -> Worker:
        wref = self.worker_ref(ref)
        import psutil

        if problem := memory_problem(memory_needed(model_folder(wref)), psutil.virtual_memory().available,
                                     ref.label()):
            raise RpcError(INVALID_PARAMS, problem, {"hint": "Unload another model (Playground: Unload), stop a "
                                                             "job, or pick a smaller model."})
        if len([w for w in self.workers.values() if w.alive()]) >= MAX_WORKERS:
            await self._stop(min(self.workers.values(), key=lambda w: w.last_used))
        cmd = [sys.executable, "-m", "engine.inference.worker", "--ref", json.dumps(wref)]
        env = job_env()
        if self.threads is not None and "OMP_NUM_THREADS" not in env:  # the user's own setting wins
            env["OMP_NUM_THREADS"] = str(self.threads())
        # Forked from the warm server (PyTorch already imported) where one answers, else a fresh Python.
        proc = await forkserver.start_piped(cmd[2], cmd[3:], env, pipe_stderr=False, limit=16 * 2**20) or \
            await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
                env=env, start_new_session=True,
                limit=16 * 2**20)
        worker = Worker(ref.key(), ref.label(), proc, asyncio.get_running_loop().create_future())
        worker.reader = asyncio.get_running_loop().create_task(self._read(worker))
        self.workers[worker.key] = worker
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())
        log.info("playground worker %d started for %s", proc.pid, worker.label)
        return worker

    async def worker(self, ref: ModelRef) -> Worker:
        worker = self.workers.get(ref.key())
        if worker is None or not worker.alive():
            worker = await self._start(ref)
        worker.last_used = time.monotonic()
        return worker

    async def _read(self, worker: Worker) -> None:
        assert worker.proc.stdout is not None
        async for line in worker.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            self._on_message(worker, msg)
        code = await worker.proc.wait()
        self._on_exit(worker, code)

    def _on_message(self, worker: Worker, msg: dict[str, Any]) -> None:
        event, rid = msg.get("event"), msg.get("rid")
        if event == "ready":
            worker.kind, worker.info = msg.get("kind", ""), msg.get("info") or {}
            if not worker.ready.done():
                worker.ready.set_result(worker.kind)
            return
        if event == "error" and rid is None:  # loading failed: every request waiting for it gets the reason
            err = RpcError(INVALID_PARAMS, msg.get("message", "cannot load the model"), {"hint": msg.get("hint", "")})
            if not worker.ready.done():
                worker.ready.set_exception(err)
            self._fail_open(worker, err)
            return
        if rid is None:
            return
        rid = str(rid)
        if event == "text":
            self.bus.publish(topic(rid), {"text": msg.get("text", "")})
            return
        done = worker.open.pop(rid, None)
        self._owner.pop(rid, None)
        worker.last_used = time.monotonic()
        if event == "done":
            data = {"done": True, **(msg.get("stats") or {})}
            if "result" in msg:
                data["result"] = msg["result"]
            self.bus.publish(topic(rid), data)
            if done is not None and not done.done():
                done.set_result(msg.get("result") or msg.get("stats") or {})
        elif event == "error":
            self.bus.publish(topic(rid), {"error": msg.get("message", ""), "hint": msg.get("hint", "")})
            if done is not None and not done.done():
                done.set_exception(RpcError(INVALID_PARAMS, msg.get("message", ""), {"hint": msg.get("hint", "")}))

    def _on_exit(self, worker: Worker, code: int) -> None:
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        log.info("playground worker %d for %s ended (%s)", worker.proc.pid, worker.label, how)
        crash = RpcError(INVALID_PARAMS, f"The model worker for {worker.label} stopped unexpectedly ({how})",
                         {"hint": "The next request starts it again; the engine log has the details."})
        if not worker.ready.done():
            worker.ready.set_exception(crash)
        self._fail_open(worker, crash)
        if self.workers.get(worker.key) is worker:
            del self.workers[worker.key]

    def _fail_open(self, worker: Worker, err: RpcError) -> None:
        for rid, done in list(worker.open.items()):
            self.bus.publish(topic(rid), {"error": err.message, "hint": err.data.get("hint", "")})
            if not done.done():
                done.set_exception(err)
            self._owner.pop(rid, None)
        worker.open.clear()

    async def _wait_ready(self, worker: Worker) -> None:
        try:
            await worker.ready
        except RpcError:
            if self.workers.get(worker.key) is worker:
                del self.workers[worker.key]
            await self._stop(worker)
            raise

    # ---- requests
    def _open(self, worker: Worker) -> tuple[str, asyncio.Future]:
        rid = uuid.uuid4().hex[:16]
        done = asyncio.get_running_loop().create_future()
        done.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)  # never "never retrieved"
        worker.open[rid] = done
        self._owner[rid] = worker
        return rid, done

    async def chat(self, ref: ModelRef, messages: list[dict[str, Any]], settings: dict[str, Any],
                   visible: Callable[[str], bool] = lambda _job_id: False) -> dict[str, Any]:
        """Start an answer; it streams on playground/<request>. Subscribing with ``since`` misses nothing.
        ``visible``: which serve jobs (by id) the caller may chat through (their projects' own)."""
        if ref.url:
            return await self.endpoints.chat(ref, messages, settings)
        # A model a serve job here serves already: chat with that server rather than load it a second time (the
        # same runtime and settings; its own chat template, so only with the template "model").
        if self.served is not None and ref.key() not in self.workers and settings.get("template", "model") == "model":
            url = self.served(ref.shown(), int(settings.get("max_new_tokens") or 0), visible)
            if url:
                return await self.endpoints.chat(ModelRef(url=url), messages, settings, label=ref.label())
        worker = await self.worker(ref)
        since = self.bus.next_seq() - 1
        rid, _done = self._open(worker)
        loop = asyncio.get_running_loop()
        if not worker.ready.done():
            self.bus.publish(topic(rid), {"status": "loading", "model": worker.label})
        loop.create_task(self._send_when_ready(worker, rid, {"op": "chat", "rid": rid, "messages": messages,
                                                             "settings": settings}))
        return {"request": rid, "topic": topic(rid), "since": since, "model": worker.label}

    async def _send_when_ready(self, worker: Worker, rid: str, msg: dict[str, Any]) -> None:
        try:
            await self._wait_ready(worker)
        except RpcError as err:
            self._owner.pop(rid, None)
            if worker.open.pop(rid, None) is not None:  # not reported yet
                self.bus.publish(topic(rid), {"error": err.message, "hint": (err.data or {}).get("hint", "")})
            return
        if worker.kind == "classify" and msg["op"] == "chat":
            self._on_message(worker, {"event": "error", "rid": rid, "message": f"{worker.label} is a classifier; "
                                      "it does not chat", "hint": "Type text to classify instead."})
            return
        if worker.alive():
            worker.send(msg)

    async def predict(self, ref: ModelRef, text: str | None, image: str | None = None) -> dict[str, Any]:
        if ref.url:
            raise RpcError(INVALID_PARAMS, f"{ref.label()} is a served language model; it chats, it does not "
                                           "classify", {"hint": "Send it a chat message."})
        worker = await self.worker(ref)
        await self._wait_ready(worker)
        rid, done = self._open(worker)
        worker.send({"op": "predict", "rid": rid, "text": text, "image": image})
        result = await done
        return {**result, "model": worker.label, "kind": worker.kind}

    def stop(self, rid: str) -> bool:
        if self.endpoints.stop(rid):
            return True
        worker = self._owner.get(rid)
        if worker is None or not worker.alive():
            return False
        worker.send({"op": "stop", "rid": rid})
        return True

    def list(self) -> list[dict[str, Any]]:
        return [w.describe() for w in self.workers.values() if w.alive()] + self.endpoints.list()

    async def unload(self, ref: ModelRef) -> bool:
        if ref.url:
            return self.endpoints.forget(ref)
        worker = self.workers.pop(ref.key(), None)
        if worker is None:
            return False
        await self._stop(worker)
        return True

    async def _stop(self, worker: Worker) -> None:
        if self.workers.get(worker.key) is worker:
            del self.workers[worker.key]
        if worker.alive():
            with contextlib.suppress(ProcessLookupError, OSError):
                assert worker.proc.stdin is not None
                worker.proc.stdin.close()  # the worker ends at end of input
            try:
                await asyncio.wait_for(worker.proc.wait(), 5)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.proc.pid, signal.SIGKILL)
                await worker.proc.wait()
        if worker.reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(worker.reader, 5)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, max(1.0, self.idle_s / 4)))
            now = time.monotonic()
            for worker in list(self.workers.values()):
                if not worker.open and now - worker.last_used > self.idle_s:
                    log.info("playground worker for %s idle %.0f s: stopping it", worker.label, now - worker.last_used)
                    await self._stop(worker)

    async def close(self) -> None:
        self.endpoints.close()
        if self._reaper is not None:
            self._reaper.cancel()
        for worker in list(self.workers.values()):
            await self._stop(worker)
