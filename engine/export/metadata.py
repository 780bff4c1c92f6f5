"""What an exported model needs to be used elsewhere: its task, labels and preprocessing.

``model_metadata`` is embedded in the ONNX file (``metadata_props``); ``preprocessing``
is also written as the packages' ``preprocess.json``. Both describe what the task's
data pipeline actually does (engine/tasks/*.py), so that another program can feed
the model the same numbers:

- text: the model folder's tokenizer, truncation to ``data.max_length``, padding to
  the longest in the batch on the tokenizer's side with its pad id;
- image: RGB (alpha composited over white), bilinear resize to ``image_size``
  squared, scaled to [0, 1], then ``(x - mean) / std`` per channel (identity mean 0
  and std 1 when ``data.augment.normalize`` is off), laid out N, C, H, W.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.training.context import JobFailed

if TYPE_CHECKING:
    from engine.trainer.source import Source

# One of these makes a usable tokenizer (the same list engine/tasks/text_classification.py checks).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model", "spm.model")
# Copied beside them when present: the settings that go with them.
TOKENIZER_EXTRAS = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "merges.txt")
TEXT_TASKS = ("text_classification", "causal_lm")


def model_folder(source: Source) -> Path | None:
    """The Hugging Face model folder a text model was built from; None for image models."""
    spec = source.spec
    if spec.task == "text_classification":
        from engine.tasks.text_classification import sources

        return sources(spec).model_dir
    if spec.task == "causal_lm":
        from engine.tasks.causal_lm import resolve_model_dir

        return resolve_model_dir(spec)[0]
    return None


def tokenizer_dir(source: Source) -> Path | None:
    """The folder holding the text model's tokenizer files; None for tasks without a tokenizer.

    Raises JobFailed when a text model's tokenizer files are missing: an exported text
    model is useless without the tokenizer that made its input ids.
    """
    if source.spec.task not in TEXT_TASKS:
        return None
    folder = model_folder(source)
    if folder is None:
        raise JobFailed(f"Run {source.job_id}'s model folder is not known, so its tokenizer cannot be exported",
                        "set model.path in the fine-tune spec to the Hugging Face model folder it trained from.")
    if not folder.is_dir():
        raise JobFailed(f"The tokenizer cannot be exported: the model folder {folder} does not exist",
                        "put the model folder the run trained from back in place, then export again.")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise JobFailed(f"The tokenizer cannot be exported: {folder} has no tokenizer files "
                        f"({', '.join(TOKENIZER_FILES[:3])} or a SentencePiece model)",
                        "save the tokenizer into the model folder (tokenizer.save_pretrained(folder)) "
                        "and export again.")
    return folder


def tokenizer_files(folder: Path) -> list[Path]:
    """The tokenizer files of ``folder`` to ship with a model (never its weights)."""
    return [folder / n for n in (*TOKENIZER_FILES, *TOKENIZER_EXTRAS) if (folder / n).is_file()]


def preprocessing(source: Source, data: Any) -> dict[str, Any]:
    """How raw input becomes the model's input tensors; see the module docstring."""
    spec, info = source.spec, data.info
    if spec.task in TEXT_TASKS:
        collate = getattr(data, "collate", None)
        return {"tokenizer": spec.model.builtin or spec.model.path or "minilm",
                "max_length": int(info.get("max_length") or spec.data.max_length),
                "padding": "longest", "padding_side": getattr(collate, "pad_side", "right"),
                "pad_token_id": int(info.get("pad_token_id") or 0), "truncation": True}
    size = int(info.get("image_size") or spec.data.image_size)
    mean, std = info.get("mean"), info.get("std")
    return {"size": [size, size], "channels": 3, "color": "RGB", "resize": "bilinear", "scale": 1 / 255,
            "mean": list(mean) if mean else [0.0, 0.0, 0.0], "std": list(std) if std else [1.0, 1.0, 1.0],
            "layout": "NCHW"}


def labels(data: Any) -> list[str]:
    """The class names, or the class indices when the data names none."""
    names = data.info.get("label_names")
    return [str(n) for n in names] if names else [str(i) for i in range(int(data.info.get("num_labels") or 0))]


def spec_sha256(path: str | Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise JobFailed(f"Cannot read the source run's spec {path}: {exc}",
                        "the run directory is incomplete; export a run that has its spec.yaml.") from exc


def model_metadata(source: Source, data: Any, run_spec_path: str | Path) -> dict[str, str]:
    """The ``ember.*`` metadata_props of an exported ONNX file (all values strings)."""
    import engine

    return {"ember.task": source.spec.task,
            "ember.labels": json.dumps(labels(data)),
            "ember.preprocessing": json.dumps(preprocessing(source, data), sort_keys=True),
            "ember.source_run": source.job_id,
            "ember.spec_sha256": spec_sha256(run_spec_path),
            "ember.version": engine.__version__}
