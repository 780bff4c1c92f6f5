"""Job lifecycle: queue, launch detached, follow, stop, cancel, re-discover.

Every job is its own process group (``start_new_session``), started detached,
so neither a GUI nor an engine crash stops it. On start the engine re-attaches
to jobs whose process is still alive (pid and start time both match) and
settles the rest from what their events.jsonl says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from engine.api import events_file
from engine.api.job_terms import CHAIN, FINETUNE, IN_ENGINE, LIVE_STATES, QUEUED, RUNNING, SERVE
from engine.api.paths import Paths
from engine.api.protocol import INVALID_STATE, NOT_FOUND, RpcError
from engine.api.specs import JOB_KINDS, ServeSpec, dump_job_yaml
from engine.daemon import job_queue, store_rebuild
from engine.daemon.eventbus import EventBus
from engine.daemon.follower import Follower
from engine.daemon.job_records import measured_peak, record
from engine.daemon.scheduler import LOCAL, threads_per_process
from engine.daemon.store import Store
from engine.launch import forkserver, local

log = logging.getLogger(__name__)

# stopped: ended gracefully on request (checkpoint written, resumable); cancelled: killed, or never started.
POLL_S = 0.1

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _local_cores(plan: Any, facts: dict[str, Any]) -> tuple[int, int]:
    """(the cores the engine may use on this machine, those the running jobs asked for) of a queue plan."""
    return int(facts["cpu_limit"][LOCAL] or 1), int((plan.used.get(LOCAL) or {}).get("cores") or 0)


def new_job_id() -> str:
    return time.strftime("r%Y%m%d-%H%M%S-", time.localtime()) + secrets.token_hex(3)


def _nodes(spec: Any) -> list[Any]:
    return list(getattr(getattr(spec, "distributed", None), "nodes", None) or [])


def _remote(spec: Any) -> bool:
    """A job whose processes run elsewhere: a multi-node fine-tune, one on a Slurm cluster, or a server on
    an SSH host."""
    return bool(_nodes(spec)) or _slurm(spec) or (isinstance(spec, ServeSpec) and spec.host is not None)


def _slurm(spec: Any) -> bool:
    return getattr(getattr(spec, "distributed", None), "slurm", None) is not None


def _process_matches(pid: int | None, started: float | None) -> bool:
    """True while ``pid`` is still the process we launched (guards against pid reuse)."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) < 1.0
    except psutil.Error:
        return False


class JobManager:
    def __init__(self, paths: Paths, store: Store, bus: EventBus, max_concurrent: int = 2,
                 stop_timeout_s: float = 30.0, hosts: Any = None):
        self.paths = paths
        self.hosts = hosts  # engine.daemon.hosts.Hosts: runs with distributed.nodes go through it
        self.store = store
        self.bus = bus
        # A value set with queue.configure (kept in the store) wins over --max-jobs / EMBER_MAX_JOBS.
        self.max_concurrent = int(store.get_setting("queue.max_concurrent", max_concurrent))
        self.stop_timeout_s = stop_timeout_s
        self._procs: dict[str, Any] = {}  # jobs this engine started itself: Popen or forkserver.ForkedProcess
        self._multi: dict[str, Any] = {}  # run id -> engine.launch.multinode.MultiNodeRun
        # run id -> the controller of a job with no process: engine.daemon.sweeps.SweepRun, chains.ChainRun
        self._controllers: dict[str, Any] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._closing = False
        self._queue_json: str | None = None  # the last `queue` event, so an unchanged queue is not re-sent

    # ---- queries
    def get(self, job_id: str) -> dict[str, Any]:
        job = self.store.get_job(job_id)
        if job is None:
            raise RpcError(NOT_FOUND, f"No job with id {job_id!r}",
                           {"hint": "List jobs with jobs.list (or `ember jobs`)."})
        return job

    # ---- state changes
    def _set_state(self, job_id: str, state: str, **fields: Any) -> dict[str, Any]:
        self.store.update_job(job_id, state=state, **fields)
        job = self.get(job_id)
        # The whole record, so a client's view has times, exit code and error with the state.
        self.bus.publish("jobs", record(self.store, job))
        return job

    def submit(self, kind: str, spec: Any, name: str = "", owner: str = "", project: str = "") -> dict[str, Any]:
        parent = getattr(spec, "source_run", None)  # a job that works on another run's output
        field = "source_run"
        if getattr(spec, "distill", None) is not None:  # a student's parent is its teacher
            parent, field = spec.distill.teacher_run, "distill.teacher_run"
        if parent is not None and self.store.get_job(parent) is None:
            raise RpcError(NOT_FOUND, f"No job with id {parent!r} ({field})",
                           {"hint": "Pick a job from jobs.list (or `ember jobs`)."})
        host = self._deploy_host(spec)
        job_id = new_job_id()
        run_dir = self.paths.run_dir(job_id)
        run_dir.mkdir(parents=True)
        (run_dir / "spec.yaml").write_text(dump_job_yaml(kind, spec, name), encoding="utf-8")
        created = time.time()
        # What spec.yaml does not say, kept in the folder so a store restored from a backup can rebuild the job.
        store_rebuild.record_in_folder(run_dir, owner=owner, project=project, parent_id=parent, created_at=created)
        if host is not None:
            (run_dir / "deploy_host.json").write_text(json.dumps(host, indent=1), encoding="utf-8")
        self.store.insert_job({
            "id": job_id, "kind": kind, "name": name or kind, "state": "queued",
            "created_at": created, "run_dir": str(run_dir), "spec": spec.model_dump(mode="json"),
            "parent_id": parent, "queue_pos": self.store.next_queue_pos(), "owner": owner, "project": project,
        })
        self.bus.publish("jobs", record(self.store, self.get(job_id)))
        self.schedule()
        return self.get(job_id)

    def _deploy_host(self, spec: Any) -> dict[str, Any] | None:
        """An export's Jetson host, resolved now: the job process reads it (no password) from its run dir."""
        name = getattr(spec, "host", None)
        if not name or not isinstance(name, str):
            return None
        if self.hosts is None or self.store.get_host(name) is None:
            raise RpcError(NOT_FOUND, f"No host named {name!r} (host)",
                           {"hint": "Add the Jetson on the Hosts page (or `ember hosts add`), or leave host empty "
                                    "to save the bundle only."})
        return {"host": self.hosts.spec(name).model_dump(mode="json"), "known_hosts": str(self.hosts.known_hosts)}

    def schedule(self) -> None:
        """Start the queued jobs whose resources are free (engine/daemon/scheduler.py), then publish `queue`."""
        if self._closing:
            return
        for kind in IN_ENGINE:
            for job in self.store.list_jobs(state=QUEUED, kind=kind, limit=10_000):
                self._launch(job)  # a sweep or chain holds nothing: its jobs wait in the queue themselves
        plan, _running, _queued, facts = job_queue.plan_now(self)
        limit, used = _local_cores(plan, facts)  # used: after this round's starts
        for job_id, gpus in plan.start:
            job = self.store.get_job(job_id)
            if job is not None and job["state"] == "queued":
                self.store.update_job(job_id, gpus=gpus)
                cores = int(facts["needs"].get(job_id, ({}, {}))[0].get(LOCAL) or 0)
                self._launch(self.get(job_id), (limit, cores, used))
        self._publish_queue()

    def serving(self, model: dict[str, Any], max_new_tokens: int, visible: Callable[[str], bool]) -> str | None:
        """The URL of a running serve job of ``model`` (a ModelRef's dict) on this machine that answers without
        a key, allows ``max_new_tokens`` and is ``visible`` to the caller (its job id: one of their projects), or
        None: the Playground then chats with that job rather than load the model a second time."""
        for job in self.store.list_jobs(state=RUNNING, kind=SERVE, limit=50):
            if not visible(job["id"]):
                continue
            spec = job.get("spec") or {}
            shown = {k: v for k, v in (spec.get("model") or {}).items() if v is not None}
            if (shown != model or spec.get("host") or spec.get("api_key_file") or spec.get("bind", "127.0.0.1")
                    not in LOOPBACK or int(spec.get("max_new_tokens") or 512) < max_new_tokens):
                continue
            for _seq, _topic, _t, data in self.store.query_events([f"run/{job['id']}/serving"], 0, limit=1):
                url = json.loads(data).get("url")
                if url:
                    return str(url)
        return None

    def free_cores(self) -> int:
        """Cores of this machine no running job asked for (at least one): a Playground worker's threads."""
        plan, _running, _queued, facts = job_queue.plan_now(self)
        limit, used = _local_cores(plan, facts)
        return max(1, limit - used)

    def _publish_queue(self, publish: bool = True) -> None:
        snap = job_queue.snapshot(self)
        text = json.dumps(snap, sort_keys=True)
        if text != self._queue_json:
            self._queue_json = text
            if publish:
                self.bus.publish("queue", snap)

    def _launch(self, job: dict[str, Any], share: tuple[int, int, int] | None = None) -> None:
        """Start ``job``'s process; ``share``: (cores the engine may use here, the job's cores, every running
        job's cores with it), from which its thread pools are sized (scheduler.threads_per_process)."""
        run_dir = Path(job["run_dir"])
        kind = JOB_KINDS[job["kind"]]
        spec = kind.spec_model.model_validate(job["spec"])
        if job["kind"] in IN_ENGINE:
            self._launch_controller(job, spec)
            return
        if _remote(spec):
            self._launch_multi(job, spec)
            return
        argv = local.command(kind.module, spec, run_dir)
        env = local.job_env(EMBER_RUN_ID=job["id"])
        local_gpus = (job.get("gpus") or {}).get("local")
        if local_gpus:
            # The GPUs the scheduler gave this job, numbered as nvidia-smi numbers them.
            env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=",".join(map(str, local_gpus)))
        if job["kind"].startswith("compress."):
            # Timing jobs: OpenMP threads that spin between calls distort interleaved latencies.
            for key, value in local.EVAL_ENV.items():
                env.setdefault(key, value)
        nproc = getattr(getattr(spec, "distributed", None), "nproc", 1) or 1
        if "OMP_NUM_THREADS" not in env and (share is not None and share[1] or nproc > 1):
            # The one cap PyTorch, ONNX Runtime and llama.cpp read (engine/threads.py), unless the user set it:
            # the job's share of the cores (torchrun would give each of its workers one thread).
            limit, cores, used = share or (os.cpu_count() or 1, nproc, nproc)
            env["OMP_NUM_THREADS"] = str(threads_per_process(limit, cores, used, nproc))
        try:
            proc = self._start_process(argv, run_dir, env)
        except OSError as exc:
            self._set_state(job["id"], "failed", ended_at=time.time(),
                            error={"message": f"Could not start the job process: {exc}",
                                   "hint": "Check free disk space and that Python can run here."})
            return
        try:
            started = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            started = None
        self._procs[job["id"]] = proc
        now = time.time()
        # A rebuilt record must know the process too, or a rebuild would take a live job for a dead one.
        store_rebuild.record_in_folder(run_dir, started_at=now, pid=proc.pid, pid_started=started)
        self._set_state(job["id"], "running", started_at=now, pid=proc.pid, pid_started=started)
        self._follow(job["id"])

    @staticmethod
    def _start_process(argv: list[str], run_dir: Path, env: dict[str, str]) -> Any:
        """A job's process (or torchrun, which forks its workers the same way) forked from this user's warm
        server (engine/launch/forkserver.py: PyTorch already imported), else a fresh Python process; either way
        its own session, output file and folder."""
        if argv[1] == "-m":  # `python -m` the job's module, or torchrun's
            forked = forkserver.start(argv[2], argv[3:], run_dir, env, run_dir / "stdout.log")
            if forked is not None:
                return forked
        with open(run_dir / "stdout.log", "ab") as out:
            return subprocess.Popen(argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)

    def _launch_multi(self, job: dict[str, Any], spec: Any, launched: bool = False) -> None:
        """A run across machines: the launcher starts and follows torchrun on every node (engine/launch)."""
        from engine.launch.multinode import MultiNodeRun
        from engine.launch.remote_serve import RemoteServe
        from engine.launch.slurm import SlurmRun

        run_dir = Path(job["run_dir"])
        kind = RemoteServe if isinstance(spec, ServeSpec) else SlurmRun if _slurm(spec) else MultiNodeRun
        multi = kind.load(job["id"], run_dir, spec, self.hosts, self.bus) if launched else None
        if multi is None:
            multi = kind(job["id"], run_dir, spec, self.hosts, self.bus)
            launched = False
        if isinstance(multi, SlurmRun):
            multi.report = lambda view, job_id=job["id"]: self._cluster_changed(job_id, view)
        self._multi[job["id"]] = multi
        if job["state"] != "running":
            self._set_state(job["id"], "running", started_at=time.time(), pid=None, pid_started=None)
        multi.task = asyncio.get_running_loop().create_task(multi.run(launched=launched))
        self._follow(job["id"])

    def _launch_controller(self, job: dict[str, Any], spec: Any) -> None:
        """A sweep or a chain runs here, in the engine: its controller starts and follows its jobs
        (engine/daemon/sweeps.py, engine/daemon/chains.py)."""
        from engine.daemon.chains import ChainRun
        from engine.daemon.sweeps import SweepRun

        controller = (ChainRun if job["kind"] == CHAIN else SweepRun)(self, job, spec)
        if job["state"] == "stopping":  # asked to stop before the last engine ended: it goes on stopping
            controller.signal("cancel" if job.get("stop_requested") == "cancel" else "stop")
        self._controllers[job["id"]] = controller
        if job["state"] != "running":
            self._set_state(job["id"], "running", started_at=time.time(), pid=None, pid_started=None)
        controller.task = asyncio.get_running_loop().create_task(controller.run())
        self._follow(job["id"])

    def _cluster_changed(self, job_id: str, view: dict[str, Any]) -> None:
        """A Slurm job's state, pending reason or queue place changed: keep it and tell the clients."""
        self.store.update_job(job_id, cluster=view)
        self.bus.publish("jobs", record(self.store, self.get(job_id)))

    def _follow(self, job_id: str) -> None:
        job = self.get(job_id)
        follower = Follower(self.bus, job_id, Path(job["run_dir"]), job["events_offset"])
        follower.reported_state = job.get("reported_state")
        self._tasks[job_id] = asyncio.get_running_loop().create_task(self._watch(job_id, follower))

    async def _watch(self, job_id: str, follower: Follower) -> None:
        try:
            while not self._closing:
                follower.poll()
                exit_code = self._exit_code(job_id)
                if exit_code is not None:
                    while follower.poll():  # drain what the job wrote before it ended
                        pass
                    await self._finish_when_stored(job_id, follower, exit_code)
                    return
                await asyncio.sleep(POLL_S)
        finally:
            self._tasks.pop(job_id, None)

    async def _finish_when_stored(self, job_id: str, follower: Follower, exit_code: int | str) -> None:
        """Settle the job, retrying while the store cannot be written (a full disk): a watcher that
        died here would leave the run `running` until the next engine start."""
        while not self._closing:
            try:
                self._finish(job_id, follower, exit_code)
                return
            except sqlite3.Error as exc:
                log.warning("could not record the end of job %s (%s); retrying", job_id, exc)
                await asyncio.sleep(1.0)

    def _exit_code(self, job_id: str) -> int | str | None:
        """None while running; the exit code (negative: signal) or 'unknown' once ended."""
        proc = self._procs.get(job_id)
        if proc is not None:
            return proc.poll()
        if job_id in self._multi:
            return self._multi[job_id].exit_code()
        if job_id in self._controllers:
            return self._controllers[job_id].exit_code()
        job = self.get(job_id)
        return None if _process_matches(job["pid"], job["pid_started"]) else "unknown"

    def _finish(self, job_id: str, follower: Follower, exit_code: int | str) -> None:
        self._procs.pop(job_id, None)
        self._controllers.pop(job_id, None)
        multi = self._multi.pop(job_id, None)
        job = self.get(job_id)
        code = exit_code if isinstance(exit_code, int) else None
        reported = follower.reported_state
        # The follower's own error is the fresh one: its batched store update may not be flushed yet.
        error = follower.last_error or job.get("error")
        if multi is not None and not error and reported != "succeeded":
            error = multi.failure()  # a node other than rank 0's, or the launch itself, said why
            if error and not reported and not job.get("stop_requested"):
                reported = "failed"
        if reported == "stopped" and job.get("stop_requested") == "cancel":
            state = "cancelled"  # a cancel that reached the run as TERM first (Slurm's scancel): it saved, then ended
        elif reported:
            state = reported
        elif job.get("stop_requested"):
            state = "stopped" if job["stop_requested"] == "stop" else "cancelled"
        else:
            state = "failed"
            how = (f"was killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                   else f"exited with code {code}" if code is not None
                   else "ended while the engine was not watching")
            error = {"message": f"The job process {how} without reporting a result.",
                     "hint": "See stdout.log in the run directory; if it was killed for memory, "
                             "try a smaller batch."}
        self.bus.flush()  # the job's own events go out before its final state
        # A job ended when it said so (its final status event's time), not when an engine noticed: an engine
        # that starts after the job ended would otherwise date the end at its own start, and a store rebuilt
        # from the run folder (engine/daemon/store_rebuild.py) could not give back the same time. A job this
        # engine did not start and that said nothing ended at its events file's last write.
        ended_at = follower.end_time() if follower.reported_state or exit_code == "unknown" else time.time()
        events_file.release_tail(follower.path)  # every process of the job has ended: no rank appends now
        peak = measured_peak(self.store, job_id) if job["kind"] == FINETUNE else None
        self._set_state(job_id, state, ended_at=ended_at, exit_code=code, error=error,
                        measured_peak=peak)
        self.schedule()

    # ---- control
    def stop(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        if job["state"] == "queued":
            job = self._set_state(job_id, "cancelled", ended_at=time.time(), stop_requested="stop")
            self.schedule()  # what it held back for itself may let others start
            return job
        if job["state"] != "running":
            raise RpcError(INVALID_STATE, f"Job {job_id} is {job['state']}; only a queued or running job can be stopped",
                           {"hint": "Use jobs.cancel to end a job that is already stopping."})
        self._signal(job, signal.SIGTERM)
        if job_id not in self._controllers:  # a sweep or chain ends once its jobs have saved, however long that takes
            asyncio.get_running_loop().call_later(self.stop_timeout_s, self._escalate, job_id)
        return self._set_state(job_id, "stopping", stop_requested="stop")

    def resume(self, job_id: str) -> dict[str, Any]:
        """Queue a stopped or failed job again in its own run dir; it continues from its checkpoint."""
        job = self.get(job_id)
        if not JOB_KINDS[job["kind"]].resumable:
            raise RpcError(INVALID_STATE, f"{job['kind']} jobs cannot be resumed",
                           {"hint": "Start a new job instead."})
        if job["state"] not in ("stopped", "cancelled", "failed"):
            raise RpcError(INVALID_STATE, f"Job {job_id} is {job['state']}; only a stopped or failed job can be resumed",
                           {"hint": "Wait for it to end, or stop it first."})
        # One UPDATE (one transaction): a crash in between must not leave a failed run without its error.
        job = self._set_state(job_id, "queued", ended_at=None, exit_code=None, error=None, reported_state=None,
                              stop_requested=None, pid=None, pid_started=None, gpus=None, cluster=None,
                              queue_pos=self.store.next_queue_pos())
        self.schedule()
        return self.get(job_id)

    def cancel(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        if job["state"] == "queued":
            job = self._set_state(job_id, "cancelled", ended_at=time.time(), stop_requested="cancel")
            self.schedule()
            return job
        if job["state"] not in LIVE_STATES:
            raise RpcError(INVALID_STATE, f"Job {job_id} already ended ({job['state']})",
                           {"hint": "Nothing to cancel."})
        self._signal(job, signal.SIGKILL)
        return self._set_state(job_id, "stopping", stop_requested="cancel")

    def _escalate(self, job_id: str) -> None:
        job = self.store.get_job(job_id)
        if job and job["state"] == "stopping":
            log.warning("job %s did not stop within %.0f s; killing it", job_id, self.stop_timeout_s)
            self._signal(job, signal.SIGKILL)

    def _signal(self, job: dict[str, Any], sig: signal.Signals) -> None:
        controller = self._controllers.get(job["id"])
        if controller is not None:
            controller.signal("cancel" if sig == signal.SIGKILL else "stop")
            return
        multi = self._multi.get(job["id"])
        if multi is not None:
            asyncio.get_running_loop().create_task(multi.signal("KILL" if sig == signal.SIGKILL else "TERM"))
            return
        if not _process_matches(job["pid"], job["pid_started"]):
            return
        # torchrun starts each worker in a session of its own: on SIGTERM it passes the signal on
        # (and gives workers time to checkpoint), but a SIGKILL must reach every descendant directly.
        descendants = []
        if sig == signal.SIGKILL:
            with contextlib.suppress(psutil.Error):
                descendants = psutil.Process(job["pid"]).children(recursive=True)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job["pid"], sig)  # the job leads its own process group
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()

    # ---- engine start / stop
    def rediscover(self) -> dict[str, int]:
        """Re-attach to live jobs after an engine restart; settle the ones that ended meanwhile."""
        self._publish_queue(publish=False)  # the queue as stored is not news; clients ask queue.get
        counts = {"reattached": 0, "settled": 0, "queued": 0}
        for job in self.store.list_jobs(state=LIVE_STATES, limit=100_000):
            spec = JOB_KINDS[job["kind"]].spec_model.model_validate(job["spec"])
            if job["kind"] in IN_ENGINE:
                self._launch_controller(job, spec)  # its jobs ran on without the engine; follow them again
                counts["reattached"] += 1
                continue
            if _remote(spec):
                # Its nodes run on regardless of this engine: reconnect and follow on from the mirrors.
                self._launch_multi(job, spec, launched=True)
                counts["reattached"] += 1
                continue
            if _process_matches(job["pid"], job["pid_started"]):
                counts["reattached"] += 1
            else:
                counts["settled"] += 1
            self._follow(job["id"])  # the watcher settles an ended job on its first poll
        counts["queued"] = len(self.store.list_jobs(state="queued", limit=100_000))
        self.schedule()
        return counts

    async def close(self) -> None:
        """Stop following (jobs keep running; the next engine re-attaches)."""
        self._closing = True
        for multi in self._multi.values():
            multi.task.cancel()  # nodes keep running; the next engine re-attaches
        for controller in self._controllers.values():
            controller.task.cancel()  # its jobs keep running; the next engine's controller follows them
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task
