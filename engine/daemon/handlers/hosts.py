"""Protocol methods for remote hosts (hosts.*): profiles, host keys, probe, prepare."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from engine.api.host_spec import LOCAL, HostSpec
from engine.api.protocol import INVALID_PARAMS, INVALID_STATE, NOT_FOUND, REMOTE_FAILED, RpcError
from engine.api.specs import fields_of
from engine.daemon import projects
from engine.daemon.handlers.params import NoParams, Params
from engine.launch.ssh import RemoteError

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


class HostAdd(Params):
    host: dict[str, Any]


class HostName(Params):
    name: str = Field(min_length=1, max_length=80)


class HostUpdate(HostName):
    host: dict[str, Any]


class HostTrust(HostName):
    fingerprint: str = Field(min_length=8, max_length=200)


class HostConnect(HostName):
    password: str | None = Field(None, max_length=4096, description="asked each time; kept in memory only")




def _validate(host: dict[str, Any]) -> HostSpec:
    try:
        return HostSpec.model_validate(host)
    except ValidationError as exc:
        raise RpcError(INVALID_PARAMS, "Invalid host", {"fields": fields_of(exc),
                                                        "hint": "Fix the fields listed."}) from None


def remote_error(exc: RemoteError) -> RpcError:
    return RpcError(REMOTE_FAILED, str(exc), {"hint": exc.hint})


class HostHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng
        self.hosts = eng.hosts

    def table(self) -> dict[str, tuple[type[BaseModel], Any]]:
        return {
            "hosts.list": (NoParams, self.list),
            "hosts.add": (HostAdd, self.add),
            "hosts.update": (HostUpdate, self.update),
            "hosts.remove": (HostName, self.remove),
            "hosts.check_key": (HostName, self.check_key),
            "hosts.trust": (HostTrust, self.trust),
            "hosts.forget_key": (HostName, self.forget_key),
            "hosts.probe": (HostConnect, self.probe),
            "hosts.prepare": (HostConnect, self.prepare),
            "hosts.slurm": (HostName, self.slurm),
        }

    def _known(self, name: str) -> None:
        if self.engine.store.get_host(name) is None:
            raise RpcError(NOT_FOUND, f"No host named {name!r}", {"hint": "hosts.list shows the hosts there are."})

    def _name_free(self, name: str) -> None:
        if self.engine.store.get_host(name) is not None:
            raise RpcError(INVALID_PARAMS, f"A host named {name!r} exists already",
                           {"fields": [{"field": "name", "message": "is taken", "hint": "choose another name"}],
                            "hint": "Choose another name, or edit that host."})

    def _in_use(self, name: str) -> list[str]:
        def uses(dist: dict[str, Any]) -> bool:
            return any(n.get("host") == name for n in dist.get("nodes", [])) or \
                (dist.get("slurm") or {}).get("cluster") == name
        return [r["id"] for r in self.engine.store.list_jobs(state=("queued", "running", "stopping"), limit=10_000)
                if uses((r["spec"] or {}).get("distributed") or {})]

    async def list(self, s: Client, _p: Any) -> Any:
        """Everyone's hosts and those given to the user's projects (engine/daemon/projects.py)."""
        return {"hosts": projects.visible_hosts(projects.all_projects(self.engine.store), s.user, self.hosts.list())}

    async def add(self, _s: Client, p: HostAdd) -> Any:
        spec = _validate(p.host)
        self._name_free(spec.name)
        return self.hosts.add(spec)

    async def update(self, _s: Client, p: HostUpdate) -> Any:
        self._known(p.name)
        spec = _validate(p.host)
        if spec.name != p.name:
            self._name_free(spec.name)
        if self._in_use(p.name):
            raise RpcError(INVALID_STATE, f"Host {p.name} is in use by job {self._in_use(p.name)[0]}",
                           {"hint": "Edit it once the job has ended."})
        return self.hosts.update(p.name, spec)

    async def remove(self, _s: Client, p: HostName) -> Any:
        self._known(p.name)
        job_ids = self._in_use(p.name)
        if job_ids:
            raise RpcError(INVALID_STATE, f"Host {p.name} is in use by job {job_ids[0]}",
                           {"hint": "Stop that job first, or wait for it to end."})
        self.hosts.remove(p.name)
        return {"ok": True}

    async def _call(self, name: str, coro_fn: Any, *args: Any) -> Any:
        self._known(name)
        try:
            return await coro_fn(name, *args)
        except RemoteError as exc:
            raise remote_error(exc) from None

    async def check_key(self, _s: Client, p: HostName) -> Any:
        return await self._call(p.name, self.hosts.check_key)

    async def trust(self, _s: Client, p: HostTrust) -> Any:
        return await self._call(p.name, self.hosts.trust, p.fingerprint)

    async def forget_key(self, _s: Client, p: HostName) -> Any:
        self._known(p.name)
        return {"ok": True, "removed": self.hosts.forget_key(p.name)}

    async def probe(self, _s: Client, p: HostConnect) -> Any:
        self.hosts.remember_password(p.name, p.password)
        return await self._call(p.name, self.hosts.probe)

    async def slurm(self, _s: Client, p: HostName) -> Any:
        """The partitions of the Slurm cluster whose login node is this host (or this machine)."""
        from engine.launch.nodes import LocalNode, SshNode

        if p.name == LOCAL:
            node: Any = LocalNode(sys.executable)
        else:
            self._known(p.name)
            node = SshNode(self.hosts, p.name)
        try:
            out = await node.ctl("slurm_info", {})
        except RemoteError as exc:
            raise remote_error(exc) from None
        if out.get("error"):
            raise RpcError(REMOTE_FAILED, f"{p.name}: {out['error']}", {"hint": out.get("hint", "")})
        return {"cluster": p.name, **out}

    async def prepare(self, _s: Client, p: HostConnect) -> Any:
        self.hosts.remember_password(p.name, p.password)
        return await self._call(p.name, self.hosts.prepare)
