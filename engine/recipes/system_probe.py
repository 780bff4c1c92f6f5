"""system.probe: report the facts of the machine this job runs on.

CPU, memory, disk, Python, the ML packages installed (read from package
metadata, not imported), and GPUs (through torch when installed, else
nvidia-smi). With ``samples > 0`` it then samples CPU and memory use every
``interval_s`` seconds until done or stopped. Run by hand:

    python -m engine.recipes.system_probe --run-dir DIR   # DIR/spec.yaml holds {kind, spec}
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from engine.api.specs import ProbeSpec
from engine.estimate import machine
from engine.estimate.machine import cpu_model
from engine.training.context import JobContext, exit_process, run_job

PACKAGES = ("torch", "torchvision", "transformers", "peft", "deepspeed", "onnxruntime",
            "onnx", "tensorrt", "torchao", "torch-pruning")


def package_versions() -> dict[str, str | None]:
    return machine.package_versions(PACKAGES)


def torch_gpus() -> dict[str, Any]:
    import torch  # optional: only in the job process

    info: dict[str, Any] = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
                            "cuda_version": torch.version.cuda, "devices": []}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["devices"].append({"index": i, "name": p.name, "memory_bytes": p.total_memory,
                                    "capability": f"{p.major}.{p.minor}",
                                    "multiprocessors": p.multi_processor_count})
    return info


def smi_gpus() -> list[dict[str, Any]]:
    if not shutil.which("nvidia-smi"):
        return []
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=20, check=False,
    )
    gpus = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            gpus.append({"index": int(parts[0]), "name": parts[1],
                         "memory_bytes": int(float(parts[2])) * 1024 * 1024, "driver": parts[3]})
    return gpus


def gather_facts(run_dir: Path) -> dict[str, Any]:
    vm = psutil.virtual_memory()
    disk = shutil.disk_usage(run_dir)
    packages = package_versions()
    facts: dict[str, Any] = {
        "host": socket.gethostname(),
        "os": {"system": platform.system(), "release": platform.release(), "platform": platform.platform()},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(),
                "physical_cores": psutil.cpu_count(logical=False), "arch": platform.machine()},
        "memory": {"total_bytes": vm.total, "available_bytes": vm.available},
        "disk": {"path": str(run_dir.parent), "total_bytes": disk.total, "free_bytes": disk.free},
        "packages": packages,
    }
    if packages["torch"]:
        facts["gpu"] = torch_gpus()
    else:
        gpus = smi_gpus()
        facts["gpu"] = {"torch": None, "cuda_available": False, "cuda_version": None, "devices": gpus,
                        "note": "torch is not installed; GPUs listed by nvidia-smi" if gpus
                        else "torch is not installed and nvidia-smi found no GPU"}
    return facts


def main(ctx: JobContext, spec: ProbeSpec) -> str | None:
    ctx.log(f"probing {socket.gethostname()}")
    facts = gather_facts(ctx.run_dir)
    ctx.write_result(facts)
    ctx.emit("result", facts=facts)
    gpu = facts["gpu"]
    ctx.log(f"{facts['cpu']['logical_cores']} CPU cores ({facts['cpu']['model']}), "
            f"{facts['memory']['total_bytes'] / 2**30:.1f} GiB memory, "
            f"{len(gpu['devices'])} GPU(s), torch {gpu['torch'] or 'not installed'}")
    if spec.samples:
        ctx.log(f"sampling CPU and memory {spec.samples} times every {spec.interval_s:g} s")
    psutil.cpu_percent()  # the first call only primes the counter
    for i in range(spec.samples):
        if ctx.wait(spec.interval_s):
            break
        vm = psutil.virtual_memory()
        ctx.emit("sample", step=i, cpu_percent=psutil.cpu_percent(), memory_used_bytes=vm.used,
                 memory_percent=vm.percent)
    if ctx.stop_requested:
        ctx.log("stopped on request")
    return None


if __name__ == "__main__":
    exit_process(run_job(main))
