"""This machine's capacity, for the fit estimator and the wizard (``machine.info``).

Quick and torch-free: psutil for CPU and memory, ``nvidia-smi`` for GPUs (the engine
process never initialises CUDA). GPU facts are cached for a minute; free memory
changes, but a wizard asking on every keystroke must not spawn nvidia-smi each time.
"""

from __future__ import annotations

import platform
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

GPU_TTL_S = 60.0
_gpu_cache: tuple[float, list[dict[str, Any]]] | None = None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, Any]]:
    global _gpu_cache
    if _gpu_cache and time.monotonic() - _gpu_cache[0] < GPU_TTL_S:
        return _gpu_cache[1]
    found: list[dict[str, Any]] = []
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            out = subprocess.run([exe, "--query-gpu=index,name,memory.total,memory.free",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout
            for line in out.strip().splitlines():
                index, name, total, free = (part.strip() for part in line.split(","))
                found.append({"index": int(index), "name": name, "memory_total": int(total) * 2**20,
                              "memory_free": int(free) * 2**20})
        except (OSError, subprocess.SubprocessError, ValueError):
            found = []  # a broken driver reads as no GPU; the probe job says why
    _gpu_cache = (time.monotonic(), found)
    return found


def info(data_dir: Path) -> dict[str, Any]:
    mem = psutil.virtual_memory()
    return {
        "hostname": socket.gethostname(),
        "cpu": {"cores": psutil.cpu_count(logical=True) or 1, "name": cpu_model()},
        "ram": {"total": mem.total, "available": mem.available},
        "gpus": gpus(),
        "disk_free": shutil.disk_usage(data_dir).free,
    }


def package_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Installed versions of ``names`` (None: not installed), read from package metadata without importing."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
