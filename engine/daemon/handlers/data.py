"""Looking at a job's inputs before it runs: data.preview, data.inspect, models.inspect, estimate.fit, machine.info.

Each look runs engine.preflight.check in a subprocess: it imports torch, the engine does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from engine.api.job_terms import FINETUNE
from engine.api.protocol import INTERNAL_ERROR, INVALID_PARAMS, INVALID_STATE, RpcError
from engine.api.specs import SpecError, validate_spec
from engine.daemon import model_prep, projects
from engine.daemon.handlers.params import NoParams, Params
from engine.estimate import machine
from engine.launch import forkserver
from engine.launch.local import job_env

if TYPE_CHECKING:
    from engine.daemon.access import User
    from engine.daemon.interfaces import Client, EngineView

CHECK_TIMEOUT_S = 120
CHECK_TIMEOUT_ENV = "EMBER_CHECK_TIMEOUT_S"  # a slower machine (or a test) sets another limit
RETRY_AFTER_S = 10  # what a timed-out check's answer tells a client to wait before asking again
FACTS_CACHE = 32  # model facts kept per engine: a wizard revisits the same few models


def check_timeout_s() -> float:
    try:
        return max(1.0, float(os.environ.get(CHECK_TIMEOUT_ENV) or CHECK_TIMEOUT_S))
    except ValueError:
        return float(CHECK_TIMEOUT_S)


def _timed_out(limit: float) -> RpcError:
    """A check over its limit, with its likely cause: a machine busier than its cores, or the inputs' size."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    cause = (f"this machine is busy (load {load:.1f} on {cores} cores)" if load > cores else
             "the data or the model took that long to read")
    return RpcError(INTERNAL_ERROR, f"Looking at the inputs took over {limit:.0f} s: {cause}",
                    {"hint": "It is checked again by itself in a few seconds, and the job checks its inputs again "
                             "when it starts.", "retry_after_s": RETRY_AFTER_S, "timeout": True})


class DataPreview(Params):
    spec: dict[str, Any]
    n: int = Field(8, ge=1, le=64)


class SpecOnly(Params):
    spec: dict[str, Any]


class PlanParams(Params):
    spec: dict[str, Any]
    gpus: int | None = Field(None, ge=1, le=4096, description="GPUs to plan for; default: this machine's")
    gpu_memory_gb: float | None = Field(None, gt=0, le=4096, description="memory of each, in GB (GiB)")
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs per machine (tensor parallelism stays within one)")


class DataInspect(Params):
    spec: dict[str, Any]
    n: int = Field(12, ge=1, le=200)


async def inspect_in_subprocess(request: dict[str, Any]) -> Any:
    """Run engine.preflight.check in a subprocess: it imports torch, the engine does not."""
    env = job_env()
    # Forked from the warm server (PyTorch already imported) where one answers, else a fresh Python.
    proc = await forkserver.start_piped("engine.preflight.check", [], env, pipe_stderr=True) or \
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "engine.preflight.check", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        limit = check_timeout_s()
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), timeout=limit)
    except asyncio.CancelledError:  # the client went away: the look is no longer wanted
        proc.kill()
        raise
    except asyncio.TimeoutError:
        proc.kill()
        raise _timed_out(limit) from None
    if proc.returncode != 0:
        raise RpcError(INTERNAL_ERROR, "The input check failed",
                       {"hint": "See details; please report it.", "details": err.decode(errors="replace")[-2000:]})
    return json.loads(out)


class DataHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng
        self._facts: dict[str, Any] = {}  # model facts by what determines them (see _facts_key)
        self._facts_locks: dict[str, asyncio.Lock] = {}

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {
            "data.preview": (DataPreview, self.data_preview),
            "data.inspect": (DataInspect, self.data_inspect),
            "models.inspect": (SpecOnly, self.models_inspect),
            "estimate.fit": (SpecOnly, self.estimate_fit),
            "estimate.plan": (PlanParams, self.estimate_plan),
            "machine.info": (NoParams, self.machine_info),
        }

    async def data_preview(self, s: Client, p: DataPreview) -> Any:
        projects.check_look(projects.all_projects(self.engine.store), s.user, projects.spec_data_paths(p.spec))
        return await inspect_in_subprocess({"op": "preview", "spec": p.spec, "n": p.n})

    async def data_inspect(self, s: Client, p: DataInspect) -> Any:
        projects.check_look(projects.all_projects(self.engine.store), s.user, projects.spec_data_paths(p.spec))
        return await inspect_in_subprocess({"op": "inspect_data", "spec": p.spec, "n": p.n})

    @staticmethod
    def _facts_key(spec: dict[str, Any]) -> str:
        """What model facts depend on: the model, the adapter's shape, the example size, the files' times.

        Changing the batch, strategy, precision, learning rate or data file reuses them; the
        model, the method (what is frozen changes what activations are kept), the LoRA rank and
        targets and the example size send the wizard back to a subprocess for seconds.
        """
        data = spec.get("data") or {}
        method = spec.get("method") or {}
        key = {"task": spec.get("task"), "model": spec.get("model"),
               "method": [method.get("kind"), method.get("lora_r"), method.get("target_modules"),
                          method.get("num_virtual_tokens")],
               "max_length": data.get("max_length"), "image_size": data.get("image_size"),
               "builtin_data": data.get("builtin") if not data.get("path") else None}
        path = (spec.get("model") or {}).get("path")
        if path:
            with contextlib.suppress(OSError):
                key["mtime"] = Path(path).expanduser().stat().st_mtime
        return json.dumps(key, sort_keys=True, default=str)

    async def _model_facts(self, spec: dict[str, Any], user: User | None = None) -> dict[str, Any]:
        """The model's facts (cached); ``preparing`` while a built-in model is written first (a job that
        ``user``'s look starts; None starts nothing)."""
        waiting = model_prep.check_or_prepare(self.engine, user, spec)
        if waiting is not None:
            return waiting
        key = self._facts_key(spec)
        lock = self._facts_locks.setdefault(key, asyncio.Lock())
        async with lock:  # a wizard asking twice while the first look runs waits for it
            if key not in self._facts:
                answer = await inspect_in_subprocess({"op": "facts", "spec": spec})
                if answer.get("facts") is None and not answer.get("issues"):
                    return answer
                self._facts[key] = answer
                while len(self._facts) > FACTS_CACHE:
                    self._facts.pop(next(iter(self._facts)))
            return self._facts[key]

    async def models_inspect(self, s: Client, p: SpecOnly) -> Any:
        return await self._model_facts(p.spec, s.user)

    @staticmethod
    def _validated(raw: dict[str, Any]) -> Any:
        try:
            return validate_spec(FINETUNE, raw)
        except SpecError as exc:
            raise RpcError(INVALID_PARAMS, str(exc.args[0]), {"fields": exc.fields, "hint": exc.hint}) from None

    async def fit_estimate(self, spec: Any, raw: dict[str, Any], user: User | None = None) -> dict[str, Any]:
        """The fit estimate of a spec validated already (``raw``: as sent, for the model's inspection)."""
        from engine.estimate.memory import estimate

        return estimate(spec, await self._estimate_facts(raw, user), machine.info(self.engine.paths.home))

    async def _estimate_facts(self, raw: dict[str, Any], user: User | None) -> dict[str, Any]:
        """The model's facts for the estimate, or RpcError: preparing (ask again later) or why it cannot be read."""
        looked = await self._model_facts(raw, user)
        if looked.get("preparing"):
            preparing = looked["preparing"]
            raise RpcError(INVALID_STATE, f"Cannot estimate yet: the built-in model {preparing['model']} is being "
                                          "prepared (once)",
                           {"hint": "The estimate comes once it is ready.", "preparing": preparing,
                            "retry_after_s": model_prep.POLL_S})
        if not looked.get("facts"):
            issues = looked.get("issues") or []
            first = issues[0] if issues else {"message": "the model could not be inspected", "hint": ""}
            raise RpcError(INVALID_PARAMS, f"Cannot estimate: {first['message']}",
                           {"hint": first.get("hint", ""), "issues": issues})
        return looked["facts"]

    async def estimate_fit(self, s: Client, p: SpecOnly) -> Any:
        return await self.fit_estimate(self._validated(p.spec), p.spec, s.user)

    async def estimate_plan(self, s: Client, p: PlanParams) -> Any:
        spec = self._validated(p.spec)
        facts = await self._estimate_facts(p.spec, s.user)
        from engine.estimate.planner import plan

        gpus, memory, name = p.gpus, p.gpu_memory_gb, ""
        if gpus is None or memory is None:
            here = machine.info(self.engine.paths.home).get("gpus") or []
            if not here:
                raise RpcError(INVALID_PARAMS, "This machine has no GPU to plan for",
                               {"hint": "Give gpus and gpu_memory_gb: the GPUs the run will train on (a host, "
                                        "several hosts, a cluster's partition)."})
            gpus = gpus or len(here)
            if memory is None:
                name = str(here[0].get("name") or "")
                memory = min(int(g.get("memory_total") or 0) for g in here) / (1 << 30)
        return plan(spec, facts, gpus, int(memory * (1 << 30)), p.gpus_per_node, name)

    async def machine_info(self, _s: Client, _p: NoParams) -> Any:
        return machine.info(self.engine.paths.home)
