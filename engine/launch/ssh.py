"""SSH to a host profile: strict host-key checking, clear failures, quoted commands.

Ember keeps the host keys the user trusted in its own ``known_hosts`` (in the
Ember home, 0600), and also honours the user's ``~/.ssh/known_hosts``. A host
whose key is in neither is not logged in to: the GUI shows the fingerprint and
the user decides (``key_status`` then ``trust``). A host that presents a
different key than the one trusted is refused (``changed``); the old key has to
be forgotten explicitly first, as with OpenSSH.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
from pathlib import Path
from typing import Any

from engine.api.host_spec import HostSpec

CONNECT_TIMEOUT_S = 15
KEEPALIVE_S = 15  # a dead link is noticed within about KEEPALIVE_S * 3


class RemoteError(Exception):
    """A failure talking to a host; ``hint`` says what to do about it."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


class HostKeyChanged(RemoteError):
    """The host presents another key than the one trusted; ``status`` is key_status()'s answer."""

    def __init__(self, message: str, hint: str, status: dict[str, Any]):
        super().__init__(message, hint)
        self.status = status


def where(host: HostSpec) -> str:
    return f"{host.name} ({host.user + '@' if host.user else ''}{host.address}:{host.port})"


def _pattern(host: HostSpec) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


def _addr(host: HostSpec) -> str:
    try:
        return socket.getaddrinfo(host.address, host.port, proto=socket.IPPROTO_TCP)[0][4][0]
    except OSError:
        return host.address


def known_keys(known_hosts: Path, host: HostSpec) -> list[Any]:
    """Keys trusted for this host: Ember's own known_hosts, then the user's ~/.ssh/known_hosts.

    EMBER_SSH_KNOWN_HOSTS names another user file ("" for none; tests use that).
    """
    import asyncssh

    keys: dict[str, Any] = {}
    user_file = os.environ.get("EMBER_SSH_KNOWN_HOSTS", str(Path.home() / ".ssh" / "known_hosts"))
    for path in (known_hosts, *([Path(user_file)] if user_file else [])):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        try:
            matched = asyncssh.match_known_hosts(data, host.address, _addr(host), host.port)
        except (ValueError, asyncssh.KeyImportError):
            continue  # an unreadable line in the user's file is theirs to fix; Ember's own is written whole
        for key in matched[0]:
            keys.setdefault(fingerprint(key), key)  # a line can match by name and by address
    return list(keys.values())


def fingerprint(key: Any) -> str:
    return key.get_fingerprint("sha256")


async def server_key(host: HostSpec, algs: list[str] | None = None) -> Any:
    """The host key the server presents now (no login)."""
    import asyncssh

    try:
        return await asyncio.wait_for(
            asyncssh.get_server_host_key(host.address, host.port, server_host_key_algs=algs or ()),
            CONNECT_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError, asyncssh.Error) as exc:
        raise unreachable(host, exc) from None


async def key_status(known_hosts: Path, host: HostSpec) -> dict[str, Any]:
    """trusted | unknown | changed, with the fingerprint the host presents now."""
    return (await _presented(known_hosts, host))[1]


async def _presented(known_hosts: Path, host: HostSpec) -> tuple[Any, dict[str, Any]]:
    """The key the host presents now, and key_status()'s answer for it."""
    known = known_keys(known_hosts, host)
    algs = sorted({k.get_algorithm() for k in known})
    key = None
    if algs:
        try:
            key = await server_key(host, algs)  # ask for the kind of key we hold, so a second key type is no "change"
        except RemoteError:
            key = None
    key = key or await server_key(host)
    fp = fingerprint(key)
    known_fps = [fingerprint(k) for k in known]
    status = "trusted" if fp in known_fps else "changed" if known_fps else "unknown"
    return key, {"status": status, "fingerprint": fp, "key_type": key.get_algorithm(), "known_fingerprints": known_fps}


async def trust(known_hosts: Path, host: HostSpec, expected_fingerprint: str) -> dict[str, Any]:
    """Store the host's key, only if it is still the one the user saw and no other key is trusted for it."""
    key, status = await _presented(known_hosts, host)
    if status["fingerprint"] != expected_fingerprint:
        raise RemoteError(f"{where(host)} now presents a different key ({status['fingerprint']}) than the one "
                          f"shown ({expected_fingerprint}); nothing was trusted",
                          "Check the host key again and compare it with the host's own fingerprint.")
    if status["status"] == "changed":
        raise RemoteError(changed_message(host, status), changed_hint())
    if status["status"] == "unknown":
        key_type, blob = key.export_public_key("openssh").decode().split()[:2]
        line = f"{_pattern(host)} {key_type} {blob}\n"
        known_hosts.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(known_hosts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(line)
    return {"status": "trusted", "fingerprint": status["fingerprint"]}


def forget(known_hosts: Path, host: HostSpec) -> int:
    """Remove this host's entries from Ember's known_hosts; returns how many lines went."""
    try:
        lines = known_hosts.read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return 0
    pattern = _pattern(host)
    kept = [ln for ln in lines if ln.split(" ", 1)[0] != pattern]
    tmp = known_hosts.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(tmp, known_hosts)
    return len(lines) - len(kept)


def changed_message(host: HostSpec, status: dict[str, Any]) -> str:
    return (f"The host key of {where(host)} has CHANGED: it presents {status['fingerprint']}, but "
            f"{', '.join(status['known_fingerprints'])} was trusted. Ember will not connect.")


def changed_hint() -> str:
    return ("Someone may be intercepting the connection. If the host was reinstalled or its keys were "
            "regenerated, check the new fingerprint with its administrator (ssh-keygen -lf "
            "/etc/ssh/ssh_host_ed25519_key.pub on the host), then Forget key and trust it again.")


def unreachable(host: HostSpec, exc: BaseException) -> RemoteError:
    if isinstance(exc, socket.gaierror):
        return RemoteError(f"Cannot resolve {host.address!r} for host {host.name}: {exc.strerror or exc}",
                           "Check the address (a DNS name or an IP address).")
    if isinstance(exc, ConnectionRefusedError):
        return RemoteError(f"{where(host)} refused the connection: nothing listens on port {host.port}",
                           "Check the port, and that the SSH server runs on the host (systemctl status ssh).")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return RemoteError(f"{where(host)} did not answer within {CONNECT_TIMEOUT_S} s",
                           "Check that the host is on, on the network, and that no firewall blocks the port.")
    return RemoteError(f"Could not reach {where(host)}: {exc}",
                       "Check the address and port, and that the SSH server runs on the host.")


async def connect(known_hosts: Path, host: HostSpec, password: str | None = None) -> Any:
    """Log in with strict host-key checking; every failure becomes a RemoteError with a hint."""
    import asyncssh

    known = known_keys(known_hosts, host)
    if not known:
        raise RemoteError(f"The host key of {where(host)} is not trusted yet",
                          "Check its fingerprint and trust it on the Hosts page (or `ember hosts trust`).")
    options: dict[str, Any] = {"username": host.user or None, "known_hosts": (known, [], []),
                               "connect_timeout": CONNECT_TIMEOUT_S, "keepalive_interval": KEEPALIVE_S,
                               "keepalive_count_max": 3}
    if host.auth == "password":
        if not password:
            raise RemoteError(f"{where(host)} logs in with a password, and none was given",
                              "Enter the password when asked; Ember does not store it.")
        options.update(password=password, client_keys=None, agent_path=None, preferred_auth="password,keyboard-interactive")
    elif host.auth == "agent":
        if not os.environ.get("SSH_AUTH_SOCK"):
            raise RemoteError(f"{where(host)} uses the SSH agent, but no agent is running for the engine",
                              "Start ssh-agent and add your key (ssh-add), then restart the engine; or use a key file.")
        options.update(client_keys=(), preferred_auth="publickey")
    else:
        if host.key_path:
            key_path = Path(host.key_path).expanduser()
            if not key_path.is_file():
                raise RemoteError(f"Key file {key_path} for host {host.name} does not exist",
                                  "Choose the private key file you log in with (for example ~/.ssh/id_ed25519).")
            options.update(client_keys=[str(key_path)], agent_path=None)
        if password:
            options["passphrase"] = password
        options["preferred_auth"] = "publickey"
    try:
        return await asyncssh.connect(host.address, host.port, **options)
    except asyncssh.HostKeyNotVerifiable:
        status = await key_status(known_hosts, host)
        raise HostKeyChanged(changed_message(host, status), changed_hint(), status) from None
    except asyncssh.PermissionDenied:
        who = host.user or "this user's name"
        how = {"key": f"the key {host.key_path or '~/.ssh/id_*'}", "agent": "the agent's keys",
               "password": "the password"}[host.auth]
        raise RemoteError(f"{where(host)} refused the login as {who} with {how}",
                          f"Check the user name, and that the public key is in ~{host.user}/.ssh/authorized_keys "
                          "on the host (ssh-copy-id does that).") from None
    except asyncssh.KeyImportError as exc:
        raise RemoteError(f"Cannot read the key file for host {host.name}: {exc}",
                          "If the key has a passphrase, use the SSH agent (ssh-add), or choose another key.") from None
    except (OSError, asyncio.TimeoutError, asyncssh.Error) as exc:
        raise unreachable(host, exc) from None


def remote_path(path: str) -> str:
    """Quote a path for the remote shell, keeping a leading ~/ meaning the login's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


async def run(conn: Any, host: HostSpec, argv: list[str], stdin: str | None = None,
              timeout: float = 120) -> tuple[int, str, str]:
    """Run argv on the host; argv[0] is the host's Python (so a ~/venv path works). Returns (rc, out, err)."""
    import asyncssh

    command = " ".join([remote_path(argv[0]), *(shlex.quote(a) for a in argv[1:])])
    try:
        result = await asyncio.wait_for(conn.run(command, input=stdin, check=False), timeout)
    except (OSError, asyncssh.Error) as exc:
        raise RemoteError(f"The connection to {where(host)} failed: {exc}",
                          "Check the network; Ember reconnects on the next action.") from None
    except asyncio.TimeoutError:
        raise RemoteError(f"{where(host)} did not finish {argv[1:3]} within {timeout:.0f} s",
                          "The host may be overloaded; try again.") from None
    rc = result.exit_status if result.exit_status is not None else -1
    return rc, str(result.stdout or ""), str(result.stderr or "")


async def run_python(conn: Any, host: HostSpec, source: str, op: str, args: dict[str, Any],
                     timeout: float = 180) -> tuple[int, str, str]:
    """Run the stdlib script ``source`` on the host's Python (the script on stdin, ``op`` and ``args`` as JSON on
    its command line): (rc, out, err), RemoteError when the link fails. ``python_reply`` reads what it said."""
    return await run(conn, host, [host.python, "-", op, json.dumps(args)], stdin=source, timeout=timeout)


def python_reply(host: HostSpec, op: str, rc: int, out: str, err: str) -> dict[str, Any]:
    """The one JSON line a ``run_python`` script ends with, or RemoteError saying what went wrong there."""
    if rc == 127 or (rc != 0 and "No such file" in err):
        raise RemoteError(f"{host.python} was not found on {where(host)}",
                          "Set the host's Python to a Python 3.8+ that exists there (a venv's bin/python).")
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (err.strip().splitlines() or ["no output"])[-1]
        raise RemoteError(f"{op} on {where(host)} failed (exit {rc}): {tail}",
                          "Check that the host's Python is 3.8 or newer.") from None
