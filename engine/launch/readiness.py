"""Whether a host can run Ember's recipes, judged from what node_ctl's ``probe`` found there.

The engine's Hosts (probe, prepare) and the multi-node launcher (its check before starting) both ask.
"""

from __future__ import annotations

from typing import Any

import engine

# What a host needs to run Ember's recipes (package -> pip name for the hint).
REQUIRED = ("torch", "transformers", "peft", "safetensors", "scikit-learn", "pydantic", "PyYAML",
            "platformdirs", "psutil", "numpy")


def assess(facts: dict[str, Any], python: str) -> tuple[list[dict[str, str]], bool]:
    """What stops a host from running Ember's recipes, each with what to do."""
    problems: list[dict[str, str]] = []
    pkgs = facts.get("packages") or {}
    version = tuple(int(x) for x in str(facts.get("python", {}).get("version", "0.0")).split(".")[:2])
    if version < (3, 10):
        problems.append({"message": f"Python {facts.get('python', {}).get('version')} at {python} is too old: "
                                    "Ember's recipes need 3.10 or newer",
                         "hint": "Point the host's Python at a 3.10+ interpreter or venv (Edit host)."})
    if not pkgs.get("torch"):
        problems.append({"message": f"torch is not installed in {python}",
                         "hint": "Install PyTorch into that Python (pip install torch, or NVIDIA's wheel on a "
                                 "Jetson), or point the host's Python at a venv that has it."})
    elif facts.get("torch_error"):
        problems.append({"message": f"torch is installed but does not import: {facts['torch_error']}",
                         "hint": "Reinstall a torch build that matches this host's CUDA and CPU."})
    missing = [p for p in REQUIRED if p != "torch" and not pkgs.get(p)]
    if missing:
        problems.append({"message": f"missing in {python}: {', '.join(missing)}",
                         "hint": f"pip install {' '.join(missing)} in that Python (Prepare installs only Ember "
                                 "itself, so the host needs no internet)."})
    remote_version, local_version = pkgs.get("ember-studio"), engine.__version__
    if not remote_version:
        problems.append({"message": "Ember is not installed on the host",
                         "hint": "Press Prepare: it copies Ember's package over and installs it there."})
    elif remote_version != local_version:
        problems.append({"message": f"Ember {remote_version} on the host, {local_version} here",
                         "hint": "Press Prepare to install the matching version on the host."})
    return problems, not problems
