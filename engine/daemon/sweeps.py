"""A sweep's controller, inside the engine: it starts its trials as fine-tunes, follows them, ranks them.

A sweep is a job of its own (``train.sweep``) without a process: this controller is its process. It
writes the sweep's ``events.jsonl`` as a job would (``status``, one ``trial`` event per change), so the
engine's follower stores and publishes them, and keeps its trials in ``sweep.json`` beside it. Each trial
is an ordinary fine-tune submitted to the queue (so hosts, Slurm and the queue's limits apply), at most
``parallel`` at a time. Optuna's study lives in a journal file (``optuna.log``), so that an engine
restart, or a Stop and Resume of the whole sweep, continues the same study: trials already reported stay
reported, and stopped trials are resumed from their checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from engine.api.job_terms import ACTIVE_STATES, FINETUNE, QUEUED, STOPPING, SUCCEEDED
from engine.api.protocol import RpcError
from engine.api.sweep_spec import SweepSpec, settings_text
from engine.daemon.run_files import append_event, write_state

log = logging.getLogger(__name__)

STATE_FILE = "sweep.json"
STUDY_FILE = "optuna.log"
POLL_S = 1.0
# A trial's state in the sweep: running (its fine-tune queued or running), done, pruned (stopped early by
# the pruner), stopped (with the sweep: resumed with it), failed.
RUNNING, DONE, PRUNED, STOPPED, FAILED = "running", "done", "pruned", "stopped", "failed"


class SweepRun:
    def __init__(self, jm: Any, job: dict[str, Any], spec: SweepSpec):
        self.jm = jm
        self.job_id = job["id"]
        self.name = job.get("name") or self.job_id
        self.owner, self.project = job.get("owner") or "", job.get("project") or ""  # its trials' too
        self.run_dir = Path(job["run_dir"])
        self.spec = spec
        self.trials: list[dict[str, Any]] = []
        self.ending: str | None = None  # "stop" or "cancel" once asked
        self.code: int | None = None  # the exit code, once the sweep has ended
        self.task: asyncio.Task | None = None
        self._study: Any = None
        self._load()

    # ---- state on disk
    def _load(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.trials = json.loads((self.run_dir / STATE_FILE).read_text(encoding="utf-8"))["trials"]

    def save(self) -> None:
        write_state(self.run_dir, STATE_FILE, {"trials": self.trials, "best": self.best()})

    def emit(self, kind: str, **data: Any) -> None:
        append_event(self.run_dir, kind, **data)

    def best(self) -> int | None:
        """The number of the best finished trial by the sweep's metric (pruned ones stopped early: not ranked)."""
        best = None
        for t in self.trials:
            if t["state"] == DONE and t.get("value") is not None and (
                    best is None or self.spec.better(t["value"], best["value"])):
                best = t
        return None if best is None else best["number"]

    def _trial_event(self, trial: dict[str, Any]) -> None:
        self.save()
        best = self.best()
        self.emit("trial", **trial, best=best == trial["number"], best_trial=best, total=self.spec.total())

    # ---- Optuna
    def study(self) -> Any:
        if self._study is None:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            storage = optuna.storages.JournalStorage(
                optuna.storages.journal.JournalFileBackend(str(self.run_dir / STUDY_FILE)))
            pruner = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0) if self.spec.prune \
                else optuna.pruners.NopPruner()
            self._study = optuna.create_study(
                study_name=self.job_id, storage=storage, load_if_exists=True, pruner=pruner,
                sampler=optuna.samplers.TPESampler(seed=self.spec.seed),
                direction="minimize" if self.spec.mode == "min" else "maximize")
        return self._study

    def _distributions(self) -> dict[str, Any]:
        import optuna.distributions as d

        out: dict[str, Any] = {}
        for p in self.spec.params:
            if p.values is not None:
                out[p.path] = d.CategoricalDistribution(p.values)
            elif p.integer:
                out[p.path] = d.IntDistribution(int(p.low), int(p.high), log=p.log)
            else:
                out[p.path] = d.FloatDistribution(p.low, p.high, log=p.log)
        return out

    def _optuna_trial(self, number: int) -> Any:
        import optuna

        study = self.study()
        storage = study._storage  # the journal storage the study was made with
        trial_id = storage.get_trial_id_from_study_id_trial_number(
            storage.get_study_id_from_name(self.job_id), number)
        return optuna.trial.Trial(study, trial_id)

    def _next_settings(self, number: int) -> dict[str, Any]:
        if self.spec.method == "grid":
            return self.spec.grid()[number]
        if self.spec.method == "random":
            return self.spec.random_settings(number)
        trial = self.study().ask(self._distributions())
        if trial.number != number:  # the journal and sweep.json must agree on numbering
            raise RuntimeError(f"Optuna's trial {trial.number} is the sweep's trial {number}")
        return dict(trial.params)

    def _tell(self, trial: dict[str, Any]) -> None:
        if self.spec.method != "optuna":
            return
        from optuna.trial import TrialState

        state = {DONE: TrialState.COMPLETE, PRUNED: TrialState.PRUNED}.get(trial["state"], TrialState.FAIL)
        with contextlib.suppress(RuntimeError, ValueError):  # told already (an engine restart in between)
            if state == TrialState.COMPLETE:
                self.study().tell(trial["number"], trial["value"])
            else:
                self.study().tell(trial["number"], state=state)

    # ---- metrics of a trial's fine-tune
    def _evals(self, job_id: str) -> list[tuple[int, float]]:
        rows = self.jm.store.metrics(job_id, kind="eval", names=[self.spec.metric])
        return [(int(r["step"]), float(r["value"])) for r in rows if r.get("value") is not None]

    def _report(self, trial: dict[str, Any]) -> bool:
        """Tell Optuna the trial's new evaluations; True when the pruner says stop it."""
        if self.spec.method != "optuna":
            return False
        fresh = [(s, v) for s, v in self._evals(trial["run_id"]) if s > trial.get("reported_step", -1)]
        if not fresh:
            return False
        handle = self._optuna_trial(trial["number"])
        for step, value in fresh:
            handle.report(value, step)
            trial["reported_step"] = step
        trial["intermediate"] = self._evals(trial["run_id"])
        self.save()
        return self.spec.prune and handle.should_prune()

    # ---- the loop
    async def run(self) -> None:
        """Start or go on (after Resume, or an engine restart): stopped trials resume, running ones are followed."""
        try:
            self.emit("status", state="running", trials=self.spec.total())
            self._resume_stopped()
            while True:
                if self.ending:
                    await self._wind_down()
                    return
                self._follow_trials()
                self._start_trials()
                if len(self.trials) >= self.spec.total() and not self._active():
                    self._finish()
                    return
                await asyncio.sleep(POLL_S)
        except asyncio.CancelledError:
            raise  # the engine is closing: the sweep goes on with the next engine
        except Exception as exc:  # noqa: BLE001 - the sweep must end with a reason, whatever went wrong
            log.exception("sweep %s", self.job_id)
            self.emit("status", state="failed", message=f"The sweep's controller failed: {exc}",
                      hint="See engine.log; Resume continues the sweep from its trials so far.")
            self.code = 1

    def _active(self) -> list[dict[str, Any]]:
        return [t for t in self.trials if t["state"] == RUNNING]

    def _resume_stopped(self) -> None:
        for trial in self.trials:
            if trial["state"] == STOPPED:
                try:
                    self.jm.resume(trial["run_id"])
                except RpcError as exc:  # its run was deleted, or cannot resume: the sweep goes on without it
                    trial["state"] = FAILED
                    trial["error"] = f"could not resume its run: {exc}"
                    self._tell(trial)
                else:
                    trial["state"] = RUNNING
                self._trial_event(trial)

    def _start_trials(self) -> None:
        while len(self._active()) < self.spec.parallel and len(self.trials) < self.spec.total():
            number = len(self.trials)
            settings = self._next_settings(number)
            spec = self.spec.trial_spec(settings)
            job = self.jm.submit(FINETUNE, spec, name=f"{self.name} #{number}: {settings_text(settings)}",
                                 owner=self.owner, project=self.project)
            trial = {"number": number, "settings": settings, "run_id": job["id"], "state": RUNNING, "value": None}
            self.trials.append(trial)
            self._trial_event(trial)

    def _follow_trials(self) -> None:
        for trial in self._active():
            job = self.jm.store.get_job(trial["run_id"])
            if job is None:  # deleted by the user
                trial["state"] = FAILED
                trial["error"] = "its fine-tune was deleted"
                self._tell(trial)
                self._trial_event(trial)
                continue
            if job["state"] in ACTIVE_STATES:
                if self._report(trial) and not trial.get("pruning"):
                    trial["pruning"] = True
                    self.jm.stop(trial["run_id"])  # a checkpoint is kept: it could still be resumed by hand
                    self.save()
                continue
            self._report(trial)
            self._settle(trial, job)

    def _settle(self, trial: dict[str, Any], job: dict[str, Any]) -> None:
        evals = [v for _s, v in self._evals(trial["run_id"])]
        if trial.get("pruning"):
            trial["state"] = PRUNED
            trial["value"] = evals[-1] if evals else None
        elif job["state"] == SUCCEEDED and evals:
            trial["state"] = DONE
            trial["value"] = min(evals) if self.spec.mode == "min" else max(evals)
        elif job["state"] == SUCCEEDED:
            trial["state"] = FAILED
            trial["error"] = (f"it reported no evaluation named {self.spec.metric!r}: set eval_every below "
                              "max_steps, or sweep on another metric")
        else:
            trial["state"] = FAILED
            trial["error"] = ((job.get("error") or {}).get("message") or f"its fine-tune ended {job['state']}")
        trial.pop("pruning", None)
        self._tell(trial)
        self._trial_event(trial)

    def _finish(self) -> None:
        best = self.best()
        counts = {s: sum(t["state"] == s for t in self.trials) for s in (DONE, PRUNED, FAILED)}
        result = {"best": next((t for t in self.trials if t["number"] == best), None), "trials": self.trials,
                  "metric": self.spec.metric, "mode": self.spec.mode, **counts}
        (self.run_dir / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        if best is None:
            self.emit("status", state="failed", message=f"No trial of the sweep finished with a {self.spec.metric}",
                      hint="See the trials' own errors in Runs.")
            self.code = 1
            return
        self.emit("status", state="succeeded", best_trial=best, **counts)
        self.code = 0

    # ---- stop, cancel
    def signal(self, how: str) -> None:
        self.ending = how

    async def _wind_down(self) -> None:
        """Stop (or cancel) the running trials, wait for them to end, then end the sweep itself."""
        for trial in self._active():
            job = self.jm.store.get_job(trial["run_id"])
            if job is None:
                continue
            with contextlib.suppress(Exception):  # it may have ended in between
                if job["state"] == QUEUED or self.ending == "cancel":
                    self.jm.cancel(trial["run_id"])
                elif job["state"] in ACTIVE_STATES and job["state"] != STOPPING:
                    self.jm.stop(trial["run_id"])
        while any((self.jm.store.get_job(t["run_id"]) or {}).get("state") in ACTIVE_STATES for t in self._active()):
            await asyncio.sleep(POLL_S)
        for trial in self._active():
            job = self.jm.store.get_job(trial["run_id"]) or {}
            if job.get("state") == SUCCEEDED or trial.get("pruning"):
                self._settle(trial, job)
            else:
                trial["state"] = STOPPED
                self._trial_event(trial)
        self.emit("status", state="stopped" if self.ending == "stop" else "cancelled")
        self.code = 0

    def exit_code(self) -> int | None:
        return self.code
