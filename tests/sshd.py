"""A real OpenSSH server on 127.0.0.1 for the remote-host tests (no mocks of SSH).

Each server gets a generated host key, an authorized client key and a private
config (key login only, internal sftp), and runs in the foreground (``-D``) so
the test owns its process. Debian's ``openssh-server`` provides ``sshd``; CI
installs it (``.ci/run``).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import site
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


def find_sshd() -> str | None:
    for path in SSHD_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("sshd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str = "ember-test") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], check=True,
                         capture_output=True, text=True).stdout
    return out.split()[1]  # "256 SHA256:... comment (ED25519)"


@dataclass
class Sshd:
    root: Path
    port: int
    host_key: Path
    client_key: Path
    user: str = field(default_factory=getpass.getuser)
    proc: subprocess.Popen | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.host_key.with_suffix(".pub"))

    def host(self, name: str, **extra) -> dict:
        """A host profile (HostSpec fields) that reaches this server."""
        return {"name": name, "address": "127.0.0.1", "port": self.port, "user": self.user,
                "auth": "key", "key_path": str(self.client_key), **extra}

    def start(self, timeout: float = 15.0) -> Sshd:
        sshd = find_sshd()
        if sshd is None:
            raise RuntimeError("sshd not found: install Debian's openssh-server (apt-get install openssh-server)")
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation dir
        config = self.root / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}", f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "StrictModes no", "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "Subsystem sftp internal-sftp",
            "MaxSessions 64", "MaxStartups 64:30:128", "LogLevel VERBOSE", "",
        ]))
        log = open(self.root / "sshd.log", "ab")  # noqa: SIM115 - kept open for the process
        self.proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return self
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def drop_connections(self) -> int:
        """Kill every per-connection sshd process, as a network failure would end the sessions."""
        assert self.proc is not None
        children = psutil.Process(self.proc.pid).children()
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        return len(children)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.drop_connections()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def make_sshd(root: Path, port: int | None = None, host_key: Path | None = None) -> Sshd:
    root.mkdir(parents=True, exist_ok=True)
    client_key = root / "client_ed25519"
    if not client_key.exists():
        keygen(client_key, "ember-test-client")
    (root / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    if host_key is None:
        host_key = keygen(root / f"host_ed25519_{len(list(root.glob('host_ed25519_*.pub')))}", "ember-test-host")
    return Sshd(root, port or free_port(), host_key, client_key)


def host_venv(root: Path, old_version: str) -> Path:
    """A venv with pip whose packages come from this one (torch...), but with an older Ember's metadata."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "from-test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    info = purelib / f"ember_studio-{old_version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ember-studio\nVersion: {old_version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n")
    return python
