"""A real Slurm on this machine for the tests: munged, slurmctld and slurmd on 127.0.0.1.

Debian's slurm-wlm and munge (`.ci/run` installs them). One node (this machine,
named ``ember-node``) with two CPUs in one partition ``debug``; the daemons run
as the current user with their state, spool, logs and munge socket in a folder
of their own, on ports picked free, so nothing of the machine's is touched.
Commands reach it through ``SLURM_CONF``, which :meth:`Slurm.start` sets in
this process's environment (engines started after that inherit it).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.sshd import free_port

NODE = "ember-node"
PARTITION = "debug"
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol")


def missing() -> list[str]:
    found = {name: shutil.which(name) or next((p for p in (f"/usr/sbin/{name}",) if os.path.exists(p)), None)
             for name in BINARIES}
    return [name for name, path in found.items() if path is None]


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class Slurm:
    def __init__(self, root: Path, cpus: int = 2):
        self.root = root
        self.cpus = cpus
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.env: dict[str, str] = {}

    def _write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        r = self.root
        for sub in ("state", "spool", "log", "munge"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        (r / "munge").chmod(0o700)
        user = getpass.getuser()
        self.conf.write_text("\n".join([
            "ClusterName=ember-test", f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}", f"SlurmUser={user}", f"SlurmdUser={user}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={r / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            # No cgroups here: processes tracked by parent pid, no binding, no accounting daemon.
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "MpiDefault=none", "ReturnToService=2", "MinJobAge=600", "KillWait=30",
            "SchedulerParameters=sched_interval=2",
            f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=60 State=UP", "",
        ]))

    def start(self, timeout: float = 60.0) -> Slurm:
        absent = missing()
        if absent:
            raise RuntimeError(f"Slurm is not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge")
        self._write_config()
        m = self.root / "munge"
        key = m / "munge.key"
        if not key.exists():
            subprocess.run([_bin("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
            key.chmod(0o400)
        subprocess.run([_bin("munged"), "--force", "-S", str(m / "munge.socket"), f"--key-file={key}",
                        f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                        f"--seed-file={m / 'seed'}"], check=True, capture_output=True)
        self.env = {"SLURM_CONF": str(self.conf)}
        os.environ.update(self.env)
        log = open(self.root / "log" / "daemons.out", "ab")  # noqa: SIM115 - kept open for the daemons
        for argv in ([_bin("slurmctld"), "-D", "-i", "-f", str(self.conf)],
                     [_bin("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)]):
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               env=dict(os.environ), start_new_session=True))
            time.sleep(0.5)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited: {self.logs()}")
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip() == "idle":
                return self
            time.sleep(0.3)
        raise RuntimeError(f"Slurm did not come up: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((self.root / "log").glob("*"))
                         if p.is_file())

    def run(self, *argv: str) -> str:
        return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout

    def queue(self) -> list[str]:
        """Job ids Slurm still holds (pending or running)."""
        return self.run("squeue", "-h", "-o", "%i").split()

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            subprocess.run(["scancel", "--full", "--user", getpass.getuser()], capture_output=True, timeout=20)
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        pid_file = self.root / "munge" / "munged.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        for key in self.env:
            os.environ.pop(key, None)
