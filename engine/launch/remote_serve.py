"""A serve.model job on an SSH host: the server runs there, the engine forwards a local port to it (docs/serve.md).

It is a one-node run of engine/launch/multinode.py's kind: the host is checked, the model (a folder or a file:
a merged checkpoint, a GGUF file, an ONNX-GenAI folder) is copied into the job's folder there, and
``python -m engine.recipes.serve`` starts detached in its own session (node_ctl ``start``), listening on the
host's loopback on any free port. The engine mirrors its events and log back as for any remote run, so the
job has its state, logs and Stop, and outlives a closed GUI or a restarted engine (which re-attaches).

Nothing listens on the host's network: the engine opens an SSH local port forward (127.0.0.1 here, to
127.0.0.1:<port> there) once the server reports its address, and the ``serving`` events the job shows carry
the forwarded URL (``url``, on this machine) beside the host's own (``remote_url``). A dropped link or an
engine restart opens a new forward; the next figures (every 2 s) carry its URL.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from pathlib import Path
from typing import Any

from engine.api.job_terms import SERVE
from engine.api.specs import ServeSpec, dump_job_yaml
from engine.launch.multinode import EventBus, LaunchError, MultiNodeRun, NodeState
from engine.launch.nodes import Hosts
from engine.launch.ssh import RemoteError


class RemoteServe(MultiNodeRun):
    def __init__(self, job_id: str, run_dir: Path, spec: ServeSpec, hosts: Hosts, bus: EventBus):
        super().__init__(job_id, run_dir, spec, hosts, bus, nodes=[NodeState(0, str(spec.host), 1)])
        self.local_url: str | None = None
        self.remote_url: str | None = None
        self._listener: Any = None

    # ---- launch
    async def _preflight(self) -> None:
        state = self.nodes[0]
        node = self.node(state)
        _facts, problems = await self._check_host(state)
        if problems:
            raise LaunchError(f"Host {state.host} cannot serve: {problems[0]['message']}",
                              problems[0]["hint"] + " Nothing was started.")
        path = self.spec.model.path
        if path and not Path(path).expanduser().exists():
            raise LaunchError(f"{path} does not exist on this machine", "Give the folder or file to copy to the host.")
        state.dir = f"{node.spec.workdir.rstrip('/')}/runs/{self.job_id}/node0"
        state.dir = (await self._ctl(state, "mkdir", {"dir": state.dir}))["dir"]
        self.save()

    async def _node_specs(self) -> dict[int, str]:
        """The host's spec: the model's copy there, any free port on its loopback, served there."""
        state = self.nodes[0]
        doc = self.spec.model_dump(mode="json")
        if self.spec.model.path:
            local = Path(self.spec.model.path).expanduser().resolve()
            target = f"{state.dir}/inputs/{local.name}"
            if local.suffix == ".gguf":  # its tokenizer lies beside it (the gguf export writes it there)
                target = f"{state.dir}/inputs/gguf/{local.name}"
                for sibling in local.parent.iterdir():
                    if sibling.is_file() and sibling.suffix != ".gguf" and sibling.name != "build.log":
                        await self._upload(state, sibling, f"{state.dir}/inputs/gguf/{sibling.name}")
            await self._upload(state, local, target)
            doc["model"]["path"] = target
        doc.update(host=None, port=0, bind="127.0.0.1")
        return {0: dump_job_yaml(SERVE, ServeSpec.model_validate(doc))}

    def _argv(self, state: NodeState, python: str) -> list[str]:
        return [python, "-m", "engine.recipes.serve", "--run-dir", state.dir]

    # ---- the forward and the URL the job shows
    def _copy_primary(self, state: NodeState) -> None:
        """As the base does, with each serving event's URL made the forwarded one; the events from the first
        one that names an address on wait until the forward is open."""
        mirror = self.mirror_dir(state) / "events.jsonl"
        start = max(state.events_copied, state.events_base)
        with open(mirror, "rb") as src:
            src.seek(start)
            data = src.read()
        out, consumed = [], 0
        for raw in data.splitlines(keepends=True):
            if not raw.endswith(b"\n"):
                break  # half a line: the rest comes with the next mirror
            line = raw
            event = None
            if b'"serving"' in raw:
                with contextlib.suppress(ValueError):
                    event = json.loads(raw)
            if event and event.get("kind") == "serving" and event.get("url"):
                self.remote_url = str(event["url"])
                if self.local_url is None:
                    break
                event.update(url=self.local_url, remote_url=self.remote_url, host=state.host)
                line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
            out.append(line)
            consumed += len(raw)
        if out:
            with open(self.run_dir / "events.jsonl", "ab") as dst:
                dst.write(b"".join(out))
        state.events_copied = start + consumed
        self.save()

    async def follow_once(self) -> None:
        await super().follow_once()
        state = self.nodes[0]
        if self._listener is not None and self.hosts.lost(state.host):
            self._close_forward()
        if self.local_url is None and self.remote_url and state.ended_at is None:
            await self._forward(state)
            if self.primary is not None:
                self._copy_primary(state)

    async def _forward(self, state: NodeState) -> None:
        port = urllib.parse.urlsplit(str(self.remote_url)).port
        try:
            conn = await self.hosts.connection(state.host)
            self._listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", int(port or 0))
        except (OSError, RemoteError) as exc:
            self.warn(f"Could not forward a port to the server on {state.host}: {exc}; retrying")
            return
        self.local_url = f"http://127.0.0.1:{self._listener.get_port()}/v1"
        self.progress(f"Serving on {state.host}; reachable here at {self.local_url}")

    def _close_forward(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
        self._listener, self.local_url = None, None

    async def run(self, launched: bool = False) -> None:
        try:
            await super().run(launched)
        finally:
            self._close_forward()

    async def _fetch_back(self) -> None:
        """The server leaves nothing to fetch but its log and events, which are mirrored already."""
