"""A compression chain's controller, inside the engine: it runs the chain's stages one after the other.

A chain is a job of its own (``compress.chain``) without a process, like a sweep (engine/daemon/sweeps.py):
this controller writes its ``events.jsonl`` (``status``, one ``stage`` event per change) and keeps its
stages in ``chain.json``. Each stage is an ordinary job in the queue whose parent is the previous stage
(engine/api/chain_spec.py says what each stage's spec is). Stop stops the running stage; Resume resumes
it (a distil stage continues from its checkpoint, a compression stage runs again) and goes on. When the
last stage succeeds its ``evaluation.json`` (scored beside the chain's start) becomes the chain's own,
with the stages listed, so Compare shows the chain as one row.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from engine.api.chain_spec import ChainSpec
from engine.api.job_terms import ACTIVE_STATES, FINETUNE, QUEUED, STOPPING, SUCCEEDED
from engine.api.protocol import RpcError
from engine.api.specs import JOB_KINDS
from engine.daemon.run_files import append_event, write_state

log = logging.getLogger(__name__)

STATE_FILE = "chain.json"
POLL_S = 1.0
# A stage's state in the chain: waiting (not started), running (its job queued or running), done,
# stopped (with the chain: resumed with it), failed.
WAITING, RUNNING, DONE, STOPPED, FAILED = "waiting", "running", "done", "stopped", "failed"


def stage_ids(run_dir: Path) -> list[str]:
    """The job ids of a chain's stages so far (for listing the chain as one row)."""
    with contextlib.suppress(OSError, ValueError):
        return [s["run_id"] for s in json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))["stages"]
                if s.get("run_id")]
    return []


class ChainRun:
    def __init__(self, jm: Any, job: dict[str, Any], spec: ChainSpec):
        self.jm = jm
        self.job_id = job["id"]
        self.name = job.get("name") or self.job_id
        self.owner, self.project = job.get("owner") or "", job.get("project") or ""
        self.run_dir = Path(job["run_dir"])
        self.spec = spec
        self.stages: list[dict[str, Any]] = [
            {"number": i, "technique": s.technique, "label": s.label(), "run_id": None, "state": WAITING}
            for i, s in enumerate(spec.stages)]
        self.ending: str | None = None
        self.code: int | None = None
        self.task: asyncio.Task | None = None
        with contextlib.suppress(OSError, ValueError):
            self.stages = json.loads((self.run_dir / STATE_FILE).read_text(encoding="utf-8"))["stages"]

    def save(self) -> None:
        write_state(self.run_dir, STATE_FILE, {"stages": self.stages, "label": self.spec.label()})

    def emit(self, kind: str, **data: Any) -> None:
        append_event(self.run_dir, kind, **data)

    def _stage_event(self, stage: dict[str, Any]) -> None:
        self.save()
        self.emit("stage", **stage, total=len(self.stages))
        done = sum(s["state"] == DONE for s in self.stages)
        self.emit("progress", phase=stage["technique"], fraction=done / len(self.stages),
                  message=f"stage {stage['number'] + 1} of {len(self.stages)}: {stage['label']} ({stage['state']})")

    # ---- the loop
    async def run(self) -> None:
        try:
            self.emit("status", state="running", stages=len(self.stages))
            self._resume_stopped()
            while True:
                if self.ending:
                    await self._wind_down()
                    return
                current = next((s for s in self.stages if s["state"] != DONE), None)
                if current is None:
                    self._finish()
                    return
                if current["state"] == FAILED:
                    self._fail(current)
                    return
                if current["state"] == WAITING:
                    self._start(current)
                else:
                    self._follow(current)
                await asyncio.sleep(POLL_S)
        except asyncio.CancelledError:
            raise  # the engine is closing: the next engine's controller follows the stages on
        except Exception as exc:  # noqa: BLE001 - the chain must end with a reason, whatever went wrong
            log.exception("chain %s", self.job_id)
            self.emit("status", state="failed", message=f"The chain's controller failed: {exc}",
                      hint="See engine.log; Resume continues the chain from its last finished stage.")
            self.code = 1

    def _previous(self, stage: dict[str, Any]) -> str:
        return self.spec.source_run if stage["number"] == 0 else self.stages[stage["number"] - 1]["run_id"]

    def _start(self, stage: dict[str, Any]) -> None:
        start = self.jm.store.get_job(self.spec.source_run)
        start_spec = start["spec"] if start is not None and start["kind"] == FINETUNE else None
        try:
            kind, doc = self.spec.stage_job(stage["number"], self._previous(stage), start_spec)
            spec = JOB_KINDS[kind].spec_model.model_validate(doc)
            job = self.jm.submit(kind, spec, name=f"{self.name} {stage['number'] + 1}/{len(self.stages)}: "
                                                  f"{stage['label']}", owner=self.owner, project=self.project)
        except (ValueError, RpcError) as exc:
            stage["state"], stage["error"] = FAILED, str(exc)
            self._stage_event(stage)
            return
        stage.update(run_id=job["id"], state=RUNNING)
        self._stage_event(stage)

    def _follow(self, stage: dict[str, Any]) -> None:
        job = self.jm.store.get_job(stage["run_id"])
        if job is None:
            stage["state"], stage["error"] = FAILED, "its job was deleted"
        elif job["state"] in ACTIVE_STATES:
            return
        elif job["state"] == SUCCEEDED:
            stage["state"] = DONE
        elif job["state"] == "stopped":
            stage["state"] = STOPPED  # stopped by hand: the chain stops with it
            self.ending = "stop"
        else:
            stage["state"] = FAILED
            stage["error"] = (job.get("error") or {}).get("message") or f"its job ended {job['state']}"
        self._stage_event(stage)

    def _resume_stopped(self) -> None:
        for stage in self.stages:
            if stage["state"] not in (STOPPED, FAILED) or not stage.get("run_id"):
                continue
            job = self.jm.store.get_job(stage["run_id"])
            resumable = job is not None and JOB_KINDS[job["kind"]].resumable
            if resumable:
                with contextlib.suppress(RpcError):
                    self.jm.resume(stage["run_id"])
                    stage.update(state=RUNNING, error=None)
            if stage["state"] != RUNNING:  # a compression job starts again from its parent
                stage.update(state=WAITING, run_id=None, error=None)
            self._stage_event(stage)

    def _fail(self, stage: dict[str, Any]) -> None:
        self.emit("status", state="failed",
                  message=f"Stage {stage['number'] + 1} ({stage['label']}) failed: {stage.get('error')}",
                  hint="Open the stage's job in Runs for its log; Resume runs that stage again and goes on.")
        self.code = 1

    def _finish(self) -> None:
        last = self.stages[-1]
        job = self.jm.store.get_job(last["run_id"]) or {}
        evaluation = None
        with contextlib.suppress(OSError, ValueError):
            evaluation = json.loads((Path(job["run_dir"]) / "evaluation.json").read_text(encoding="utf-8"))
        if evaluation is not None:
            evaluation["chain"] = {"stages": self.stages, "label": self.spec.label()}
            (self.run_dir / "evaluation.json").write_text(json.dumps(evaluation, indent=1), encoding="utf-8")
        result = {"stages": self.stages, "label": self.spec.label(), "final_run": last["run_id"],
                  "source_run": self.spec.source_run}
        (self.run_dir / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        self.emit("result", **result)
        self.emit("status", state="succeeded", final_run=last["run_id"])
        self.code = 0

    # ---- stop, cancel
    def signal(self, how: str) -> None:
        self.ending = how

    async def _wind_down(self) -> None:
        running = [s for s in self.stages if s["state"] == RUNNING]
        for stage in running:
            job = self.jm.store.get_job(stage["run_id"])
            with contextlib.suppress(Exception):  # it may have ended in between
                if job is not None and (job["state"] == QUEUED or self.ending == "cancel"):
                    self.jm.cancel(stage["run_id"])
                elif job is not None and job["state"] in ACTIVE_STATES and job["state"] != STOPPING:
                    self.jm.stop(stage["run_id"])
        while any((self.jm.store.get_job(s["run_id"]) or {}).get("state") in ACTIVE_STATES for s in running):
            await asyncio.sleep(POLL_S)
        for stage in running:
            job = self.jm.store.get_job(stage["run_id"]) or {}
            stage["state"] = DONE if job.get("state") == SUCCEEDED else STOPPED
            self._stage_event(stage)
        self.emit("status", state="stopped" if self.ending == "stop" else "cancelled")
        self.code = 0

    def exit_code(self) -> int | None:
        return self.code
