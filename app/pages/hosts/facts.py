"""A host's probe facts (``hosts.probe``) as rows and warnings a person can read.

The rows mirror Settings' "This machine" so a remote host and this one read the
same way; what the probe reports beyond the known keys is left to the engine's
``problems``, which say what is wrong and what to do.
"""

from __future__ import annotations

import time
from typing import Any

from app.text import format as fmt

PACKAGES_SHOWN = ("transformers", "peft", "onnx", "onnxruntime")  # torch has its own row


def ago(epoch: float | None, now: float | None = None) -> str:
    """'just now', '3 min ago', '2 h ago', '4 days ago'; '' when never."""
    if epoch is None:
        return ""
    seconds = max(0.0, (time.time() if now is None else now) - float(epoch))
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} days ago"


def address_line(record: dict[str, Any]) -> str:
    """user@address:port, as ssh would take it (the user is left out when it is this one's)."""
    user = record.get("user") or ""
    where = f"{record.get('address', '?')}:{record.get('port', 22)}"
    return f"{user}@{where}" if user else where


def _gpus(gpus: list[dict[str, Any]]) -> str:
    if not gpus:
        return "no GPU"
    lines = []
    for gpu in gpus:
        parts = [str(gpu.get("name") or "GPU")]
        if gpu.get("memory_bytes"):
            parts.append(fmt.size(gpu["memory_bytes"]))
        if gpu.get("driver"):
            parts.append(f"driver {gpu['driver']}")
        lines.append(", ".join(parts))
    return "\n".join(lines)


def _cuda(facts: dict[str, Any]) -> str:
    cuda, torch_cuda = facts.get("cuda"), facts.get("torch_cuda")
    text = f"CUDA {cuda}" if cuda else "no CUDA driver"
    if torch_cuda:
        text += f"; PyTorch built for CUDA {torch_cuda}"
    return text


def hardware_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    os_text = " ".join(filter(None, [facts.get("os"), facts.get("arch")])) or "?"
    if facts.get("kernel"):
        os_text += f"\nkernel {facts['kernel']}"
    cpu = ", ".join(filter(None, [facts.get("cpu_model"),
                                  f"{facts['cpu_count']} cores" if facts.get("cpu_count") else ""]))
    disk = fmt.size(facts.get("disk_free_bytes")) if facts.get("disk_free_bytes") is not None else "?"
    if facts.get("workdir"):
        disk += f" free in {facts['workdir']}"
    rows = [("Host name", str(facts.get("hostname") or "?")), ("OS", os_text), ("CPU", cpu or "?"),
            ("Memory", fmt.size(facts.get("ram_bytes")) if facts.get("ram_bytes") else "?"),
            ("Free disk", disk), ("GPUs", _gpus(facts.get("gpus") or []))]
    jetson = facts.get("jetson")
    if jetson:
        rows.append(("Jetson", ", ".join(filter(None, [
            f"L4T {jetson['l4t']}" if jetson.get("l4t") else "",
            f"JetPack {jetson['jetpack']}" if jetson.get("jetpack") else "JetPack unknown",
            f"TensorRT {jetson['tensorrt']}" if jetson.get("tensorrt") else "no TensorRT"]))))
    return rows


def software_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    python = facts.get("python") or {}
    packages = facts.get("packages") or {}
    others = [f"{name} {packages[name]}" for name in PACKAGES_SHOWN if packages.get(name)]
    others += [f"{name} {ver}" for name, ver in packages.items()
               if ver and name not in ("torch", "ember-studio") and name not in PACKAGES_SHOWN]
    ember = facts.get("ember_version") or "not installed"
    return [
        ("Python", " ".join(filter(None, [python.get("version") or "?",
                                          f"({python['path']})" if python.get("path") else ""]))),
        ("PyTorch", packages.get("torch") or "not installed"),
        ("CUDA", _cuda(facts)),
        ("Packages", _short_list(others) or "none of " + ", ".join(PACKAGES_SHOWN)),
        ("Ember", ember),
    ]


def _short_list(items: list[str], shown: int = 3) -> str:
    """The first few, then how many more (the engine's problems name any that are missing)."""
    if len(items) <= shown + 1:
        return ", ".join(items)
    return f"{', '.join(items[:shown])} and {len(items) - shown} more"


def ember_warning(facts: dict[str, Any]) -> str:
    """Why the host's Ember does not match this one's ('' when it does)."""
    local = facts.get("local_ember_version")
    remote = facts.get("ember_version")
    if not remote:
        return ("Ember is not installed in the host's Python. Press Prepare to install "
                + (f"Ember {local}." if local else "it."))
    if local and remote != local:
        return (f"The host has Ember {remote}, this machine has {local}: runs need the same version. "
                "Press Prepare to install this one.")
    return ""
