"""The facts a ``system.probe`` job reports, as (label, text) rows a person can read.

Known sections get a sentence each ("15.6 GiB total, 12.0 GiB available");
anything the probe adds later is still shown, formatted generically, so a newer
engine never loses information in an older GUI.
"""

from __future__ import annotations

from typing import Any

from app.text import format as fmt


def _os(v: dict[str, Any]) -> str:
    return " ".join(filter(None, [v.get("system"), v.get("release")])) or v.get("platform", "?")


def _python(v: dict[str, Any]) -> str:
    return f"{v.get('version', '?')}  ({v.get('executable', '')})".replace("  ()", "")


def _cpu(v: dict[str, Any]) -> str:
    cores = f"{v.get('logical_cores', '?')} logical cores"
    if v.get("physical_cores"):
        cores += f" ({v['physical_cores']} physical)"
    return ", ".join(filter(None, [v.get("model"), cores, v.get("arch")]))


def _memory(v: dict[str, Any]) -> str:
    return (f"{fmt.size(v.get('total_bytes'))} total, "
            f"{fmt.size(v.get('available_bytes'))} available")


def _disk(v: dict[str, Any]) -> str:
    return (f"{fmt.size(v.get('free_bytes'))} free of {fmt.size(v.get('total_bytes'))}"
            f" (at {v.get('path', '?')})")


def _gpus(v: dict[str, Any]) -> str:
    devices = v.get("devices") or []
    if not devices:
        return v.get("note") or "No GPU found"
    lines = []
    for d in devices:
        parts = [f"{d.get('index', '?')}: {d.get('name', 'GPU')}", fmt.size(d.get("memory_bytes"))]
        if d.get("capability"):
            parts.append(f"compute {d['capability']}")
        if d.get("driver"):
            parts.append(f"driver {d['driver']}")
        lines.append(", ".join(parts))
    return "\n".join(lines)


def _cuda(v: dict[str, Any]) -> str:
    if v.get("cuda_available"):
        return f"available (CUDA {v.get('cuda_version') or '?'})"
    return "not available" + (f" (torch built for CUDA {v['cuda_version']})"
                               if v.get("cuda_version") else "")


def _packages(v: dict[str, Any]) -> str:
    have = [f"{name} {ver}" for name, ver in v.items() if ver]
    missing = [name for name, ver in v.items() if not ver]
    if not have:
        return f"none installed (looked for {', '.join(missing)})"
    return ", ".join(have) + (f"\nnot installed: {', '.join(missing)}" if missing else "")


def probe_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    known = {"host", "os", "python", "cpu", "memory", "disk", "gpu", "packages"}

    def add(label: str, key: str, describe) -> None:
        value = result.get(key)
        if isinstance(value, dict):
            rows.append((label, describe(value)))
        elif value is not None:
            rows.append((label, fmt.fact(value, key)))

    if result.get("host"):
        rows.append(("Host", str(result["host"])))
    add("OS", "os", _os)
    add("Python", "python", _python)
    add("CPU", "cpu", _cpu)
    add("Memory", "memory", _memory)
    add("Disk", "disk", _disk)
    gpu = result.get("gpu")
    if isinstance(gpu, dict):
        rows.append(("GPUs", _gpus(gpu)))
        rows.append(("CUDA", _cuda(gpu)))
        rows.append(("PyTorch", gpu.get("torch") or "not installed"))
    add("Packages", "packages", _packages)
    for key, value in result.items():
        if key not in known:
            rows.append((key.replace("_", " ").capitalize(), fmt.fact(value, key)))
    return rows
