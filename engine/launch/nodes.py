"""A machine a run's node runs on: this one (LocalNode) or a host over SSH (SshNode).

Both answer the same calls, so the multi-node launcher treats every node alike:
``ctl`` runs one of engine/launch/node_ctl.py's operations there, ``read`` reads
a file from an offset (to follow events and logs), ``put`` copies files there
with progress, ``get_tree`` copies a folder back.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from engine.api.host_spec import HostSpec
from engine.launch import node_ctl, slurm_ctl
from engine.launch.ssh import RemoteError, python_reply, run_python, where

NODE_CTL_SOURCE = Path(node_ctl.__file__).read_text(encoding="utf-8")
SLURM_CTL_SOURCE = Path(slurm_ctl.__file__).read_text(encoding="utf-8")
OPS = {**node_ctl.OPS, **slurm_ctl.OPS}  # every operation a node answers, by name
Progress = Callable[[int, int], None]  # (bytes done, bytes total)


class Hosts(Protocol):
    """The engine's host profiles and their shared SSH links (engine/daemon/hosts.py, a layer above this one)."""

    def spec(self, name: str) -> HostSpec: ...

    async def connection(self, name: str) -> Any: ...

    async def sftp(self, name: str) -> Any: ...

    def lost(self, name: str) -> bool: ...

    def drop(self, name: str) -> None: ...


class LocalNode:
    name = "local"
    is_remote = False

    def __init__(self, python: str):
        self.python = python

    async def ctl(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(OPS[op], args)

    async def read(self, path: str, offset: int, limit: int) -> bytes:
        def _read() -> bytes:
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    return f.read(limit)
            except FileNotFoundError:
                return b""
        return await asyncio.to_thread(_read)

    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None:
        def _copy() -> None:
            Path(remote).parent.mkdir(parents=True, exist_ok=True)
            if local.is_dir():
                shutil.copytree(local, remote, dirs_exist_ok=True)
            else:
                shutil.copy2(local, remote)
        await asyncio.to_thread(_copy)

    async def get_tree(self, remote: str, local: Path, skip: tuple[str, ...]) -> None:
        await asyncio.to_thread(_copy_tree, Path(remote), local, skip)


def _copy_tree(src: Path, dst: Path, skip: tuple[str, ...]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.name in skip:
            continue
        if item.is_dir():
            shutil.copytree(item, dst / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, dst / item.name)


class SshNode:
    """A host profile's machine, through the engine's shared connection to it (reconnected on demand)."""

    is_remote = True

    def __init__(self, hosts: Hosts, name: str):
        self.hosts = hosts
        self.name = name
        self.spec = hosts.spec(name)
        self.python = self.spec.python

    async def ctl(self, op: str, args: dict[str, Any], timeout: float = 180) -> dict[str, Any]:
        conn = await self.hosts.connection(self.name)
        source = SLURM_CTL_SOURCE if op in slurm_ctl.OPS else NODE_CTL_SOURCE
        rc, out, err = await run_python(conn, self.spec, source, op, args, timeout)
        return python_reply(self.spec, op, rc, out, err)

    async def sftp(self) -> Any:
        return await self.hosts.sftp(self.name)

    async def read(self, path: str, offset: int, limit: int) -> bytes:
        import asyncssh

        sftp = await self.sftp()
        try:
            async with sftp.open(path, "rb") as f:
                await f.seek(offset)
                return await f.read(limit)
        except asyncssh.SFTPNoSuchFile:
            return b""
        except (OSError, asyncssh.Error) as exc:
            self.hosts.drop(self.name)
            raise RemoteError(f"Reading {path} on {where(self.spec)} failed: {exc}",
                              "The connection dropped; Ember reconnects and goes on from where it was.") from None

    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None:
        import asyncssh

        sftp = await self.sftp()
        total = sum(p.stat().st_size for p in local.rglob("*") if p.is_file()) if local.is_dir() \
            else local.stat().st_size
        done = {"bytes": 0}

        def handler(_src: bytes, _dst: bytes, copied: int, _size: int) -> None:
            if progress is not None:
                progress(done["bytes"] + copied, total)
            if copied == _size:
                done["bytes"] += _size

        try:
            await sftp.makedirs(str(Path(remote).parent), exist_ok=True)
            await sftp.put(str(local), remote, recurse=local.is_dir(), preserve=True, progress_handler=handler)
        except (OSError, asyncssh.Error) as exc:
            raise RemoteError(f"Copying {local.name} to {where(self.spec)}:{remote} failed: {exc}",
                              "Check the free disk space and permissions of the host's work folder.") from None

    async def get_tree(self, remote: str, local: Path, skip: tuple[str, ...]) -> None:
        import asyncssh

        sftp = await self.sftp()
        local.mkdir(parents=True, exist_ok=True)
        try:
            for name in await sftp.listdir(remote):
                if name in (".", "..") or name in skip:
                    continue
                await sftp.get(f"{remote}/{name}", str(local / name), recurse=True, preserve=True)
        except (OSError, asyncssh.Error) as exc:
            raise RemoteError(f"Copying the results back from {where(self.spec)}:{remote} failed: {exc}",
                              "They are still on the host; check the connection and free disk space here.") from None
