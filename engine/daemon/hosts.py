"""Remote hosts: profiles in the store, trusted keys, one SSH connection each, probe and prepare.

A password (for a host that logs in with one, or a key's passphrase) is kept
in this engine's memory only, so a run can reconnect; it is never written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import engine
from engine.api.host_spec import HostSpec
from engine.api.paths import Paths
from engine.daemon.eventbus import EventBus
from engine.daemon.store import Store
from engine.launch import ssh
from engine.launch.nodes import SshNode
from engine.launch.readiness import assess
from engine.launch.ssh import RemoteError
from engine.launch.wheel import build_wheel


class Hosts:
    def __init__(self, paths: Paths, store: Store, bus: EventBus):
        self.paths = paths
        self.store = store
        self.bus = bus
        self.known_hosts = paths.home / "known_hosts"
        self._conns: dict[str, Any] = {}
        self._sftp: dict[str, Any] = {}
        self._passwords: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # ---- profiles
    def spec(self, name: str) -> HostSpec:
        row = self.store.get_host(name)
        if row is None:
            raise RemoteError(f"No host named {name!r}", "Add it on the Hosts page (or `ember hosts add`).")
        profile = {k: row[k] for k in ("name", "address", "port", "user", "key_path")}
        profile.update({k: row["meta"][k] for k in ("auth", "python", "workdir", "role") if k in row["meta"]})
        return HostSpec.model_validate(profile)

    def record(self, name: str) -> dict[str, Any]:
        row = self.store.get_host(name)
        if row is None:
            raise RemoteError(f"No host named {name!r}", "Add it on the Hosts page (or `ember hosts add`).")
        meta = row["meta"]
        return {**self.spec(name).model_dump(), "created_at": row["created_at"],
                "key": meta.get("key") or {"status": None, "fingerprint": None},
                "facts": meta.get("facts"), "probed_at": meta.get("probed_at")}

    def list(self) -> list[dict[str, Any]]:
        return [self.record(row["name"]) for row in self.store.list_hosts()]

    def _save(self, spec: HostSpec, meta: dict[str, Any], old_name: str | None = None) -> dict[str, Any]:
        profile = spec.model_dump()
        meta = {**meta, **{k: profile[k] for k in ("auth", "python", "workdir", "role")}}
        self.store.upsert_host(spec.name, profile, meta, old_name)
        rec = self.record(spec.name)
        self.bus.publish("hosts", rec)
        return rec

    def add(self, spec: HostSpec) -> dict[str, Any]:
        return self._save(spec, {})

    def update(self, name: str, spec: HostSpec) -> dict[str, Any]:
        old = self.store.get_host(name)
        assert old is not None
        meta = dict(old["meta"])
        before = self.spec(name)
        if (before.address, before.port) != (spec.address, spec.port):
            meta.pop("key", None)  # another machine: its key is checked afresh
        if before.model_dump() != spec.model_dump():
            meta.pop("facts", None)
            meta.pop("probed_at", None)
        self.drop(name)
        return self._save(spec, meta, old_name=name)

    def remove(self, name: str) -> None:
        self.drop(name)
        self.store.delete_host(name)
        self.bus.publish("hosts", {"name": name, "removed": True})

    def _update_meta(self, name: str, **fields: Any) -> dict[str, Any]:
        row = self.store.get_host(name)
        assert row is not None
        self.store.upsert_host(name, row, {**row["meta"], **fields})
        rec = self.record(name)
        self.bus.publish("hosts", rec)
        return rec

    # ---- keys
    async def check_key(self, name: str) -> dict[str, Any]:
        status = await ssh.key_status(self.known_hosts, self.spec(name))
        self._update_meta(name, key={"status": status["status"], "fingerprint": status["fingerprint"]})
        return status

    async def trust(self, name: str, fingerprint: str) -> dict[str, Any]:
        result = await ssh.trust(self.known_hosts, self.spec(name), fingerprint)
        self._update_meta(name, key={"status": "trusted", "fingerprint": result["fingerprint"]})
        return result

    def forget_key(self, name: str) -> int:
        removed = ssh.forget(self.known_hosts, self.spec(name))
        self.drop(name)
        self._update_meta(name, key={"status": None, "fingerprint": None})
        return removed

    # ---- connections
    def remember_password(self, name: str, password: str | None) -> None:
        if password:
            self._passwords[name] = password

    async def connection(self, name: str) -> Any:
        async with self._locks.setdefault(name, asyncio.Lock()):
            conn = self._conns.get(name)
            if conn is not None and not conn.is_closed():
                return conn
            self._sftp.pop(name, None)
            try:
                conn = await ssh.connect(self.known_hosts, self.spec(name), self._passwords.get(name))
            except ssh.HostKeyChanged as exc:
                # Shown on the Hosts page at once, not only on the next key check.
                self._update_meta(name, key={"status": "changed", "fingerprint": exc.status["fingerprint"]})
                raise
            self._conns[name] = conn
            with contextlib.suppress(Exception):  # only a label: the login itself succeeded
                key = conn.get_server_host_key()
                seen = {"status": "trusted", "fingerprint": ssh.fingerprint(key)}
                if (self.store.get_host(name) or {}).get("meta", {}).get("key") != seen:
                    self._update_meta(name, key=seen)  # trusted by address (another profile, or ~/.ssh)
            return conn

    async def sftp(self, name: str) -> Any:
        import asyncssh

        conn = await self.connection(name)
        client = self._sftp.get(name)
        if client is None:
            try:
                client = await conn.start_sftp_client()
            except (OSError, asyncssh.Error) as exc:
                self.drop(name)
                raise RemoteError(f"SFTP to {ssh.where(self.spec(name))} failed: {exc}",
                                  "Enable the sftp subsystem in the host's sshd_config.") from None
            self._sftp[name] = client
        return client

    def lost(self, name: str) -> bool:
        """True when this engine had a connection to the host and it has closed (the link dropped)."""
        conn = self._conns.get(name)
        return conn is not None and conn.is_closed()

    def drop(self, name: str) -> None:
        """Forget a connection (after a failure, or a profile change); the next call reconnects."""
        self._sftp.pop(name, None)
        conn = self._conns.pop(name, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        for name in list(self._conns):
            self.drop(name)

    # ---- probe and prepare
    async def probe(self, name: str) -> dict[str, Any]:
        spec = self.spec(name)
        facts = await SshNode(self, name).ctl("probe", {"workdir": spec.workdir})
        facts["local_ember_version"] = engine.__version__
        facts["ember_version"] = (facts.get("packages") or {}).get("ember-studio")
        facts["problems"], facts["ready"] = assess(facts, spec.python)
        return self._update_meta(name, facts=facts, probed_at=time.time())

    def _progress(self, name: str, message: str, fraction: float) -> None:
        self.bus.publish(f"hosts/{name}", {"kind": "progress", "message": message, "fraction": round(fraction, 3)})

    async def prepare(self, name: str) -> dict[str, Any]:
        """Copy Ember's wheel to the host and install it into the host's Python (no internet needed there)."""
        spec = self.spec(name)
        self._progress(name, "Building Ember's package", 0.0)
        wheel = await asyncio.to_thread(build_wheel, self.paths.home / "wheels")
        node = SshNode(self, name)
        folder = (await node.ctl("mkdir", {"dir": f"{spec.workdir.rstrip('/')}/wheels"}))["dir"]  # absolute there
        remote = f"{folder}/{wheel.name}"
        self._progress(name, f"Copying {wheel.name}", 0.1)
        await node.put(wheel, remote, lambda done, total: self._progress(
            name, f"Copying {wheel.name}: {done // 1024} of {total // 1024} KiB", 0.1 + 0.5 * done / max(total, 1)))
        self._progress(name, f"Installing into {spec.python}", 0.65)
        rc, out, err = await ssh.run(await self.connection(name), spec,
                                     [spec.python, "-m", "pip", "install", "--no-deps", "--no-index",
                                      "--force-reinstall", "--disable-pip-version-check", "--quiet", remote],
                                     timeout=600)
        if rc != 0:
            text = (err or out).strip()
            if "externally-managed-environment" in text:
                raise RemoteError(f"{spec.python} on {ssh.where(spec)} is the system's Python, which pip may not "
                                  "change", "Create a venv on the host (python3 -m venv --system-site-packages "
                                  "~/ember-venv) and set the host's Python to ~/ember-venv/bin/python.")
            if "No module named pip" in text:
                raise RemoteError(f"{spec.python} on {ssh.where(spec)} has no pip",
                                  "Install pip for it (python3 -m ensurepip, or apt-get install python3-pip).")
            raise RemoteError(f"Installing Ember on {ssh.where(spec)} failed: {text.splitlines()[-1] if text else rc}",
                              "See the message; check the host's Python and its free disk space.")
        self._progress(name, "Checking the host", 0.85)
        rec = await self.probe(name)
        self._progress(name, "Done" if rec["facts"]["ready"] else "Installed; the host still needs attention", 1.0)
        return rec

