"""What code a job ran: Ember's version and git commit, and the versions of the packages that matter.

A job records these when it starts (engine/training/context.py); the engine fills them in at report
time for a job that did not (engine/daemon/lineage.py). Stdlib only: read from package metadata,
without importing the packages.
"""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import engine

PACKAGES = ("torch", "torchvision", "transformers", "peft", "accelerate", "safetensors", "onnx", "onnxruntime",
            "onnxscript", "torchao", "torch-pruning", "deepspeed", "tensorrt", "scikit-learn", "numpy", "pydantic")


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_versions() -> dict[str, str | None]:
    """Installed versions of PACKAGES (None: not installed)."""
    return {name: version(name) for name in PACKAGES}


def code_version() -> dict[str, Any]:
    """Ember's version, and the git commit when the engine runs from a checkout (at report time)."""
    root = Path(engine.__file__).resolve().parent.parent
    out: dict[str, Any] = {"ember_version": engine.__version__, "git_commit": None, "git_dirty": None,
                           "source": "installed package", "recorded": "at report time"}
    if (root / ".git").exists():
        out["source"] = f"checkout {root}"
        try:
            env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # a report never takes git's index lock
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                  timeout=10, env=env)
            if head.returncode == 0:
                out["git_commit"] = head.stdout.strip()
                dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                       capture_output=True, text=True, timeout=10, env=env)
                out["git_dirty"] = bool(dirty.stdout.strip()) if dirty.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            pass
    return out
