"""What every task module provides, and the shared error type for bad input.

A task is a module with these functions (see ``Task``). The recipe
(engine/recipes/finetune.py) owns the loop, the method (full/LoRA/prompt
tuning), the strategy (DDP/FSDP/DeepSpeed), checkpoints and events; a task only
knows its model, its data and its metric. torch is imported inside functions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

    from engine.api.train_spec import TrainSpec


@dataclass
class Issue:
    """One problem with the user's input, precise enough to fix without guessing."""

    message: str
    hint: str
    file: str = ""
    line: int | None = None  # 1-based line (or row) in `file`

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else (f"{self.file}: " if self.file else "")
        return f"{where}{self.message} ({self.hint})"


class InputError(Exception):
    """Bad data or model input; carries every issue found, not just the first."""

    def __init__(self, issues: list[Issue]):
        super().__init__("; ".join(str(i) for i in issues[:5]) + (f" (+{len(issues) - 5} more)" if len(issues) > 5 else ""))
        self.issues = issues

    @property
    def hint(self) -> str:
        return self.issues[0].hint if self.issues else ""


def entry_points(prepare: Callable[[TrainSpec], tuple[TaskData | None, list[Issue]]]
                 ) -> tuple[Callable[[TrainSpec], list[Issue]], Callable[[TrainSpec], TaskData]]:
    """A task's ``validate`` (every issue, nothing raised) and ``load_data`` (the data, or InputError with every
    issue) from its one ``prepare(spec) -> (data or None, issues)``, so both read the input the same way."""
    def validate(spec: TrainSpec) -> list[Issue]:
        return prepare(spec)[1]

    def load_data(spec: TrainSpec) -> TaskData:
        data, issues = prepare(spec)
        if issues or data is None:
            raise InputError(issues)
        return data

    return validate, load_data


@dataclass
class TaskData:
    train: Dataset
    val: Dataset
    collate: Any  # callable(list[example]) -> dict[str, Tensor]
    info: dict[str, Any] = field(default_factory=dict)  # num_labels, label_names, counts, ...
    lengths: list[int] | None = None  # tokens per train example (data.group_by_length), for ResumableOrder
    val_collate: Any = None  # validation batches; None: `collate` (packing trains on packed rows only)
    # causal_lm: each validation row's messages as read, in `val` order (answers generated at evaluation)
    val_messages: list[list[dict[str, str]]] | None = None


def build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """Create ``final`` with ``build(tmp)`` in a sibling temp dir, then rename: safe for racing ranks."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # someone else won the race if it is there now
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def load_tokenizer(folder: Path) -> Any:
    """The tokenizer saved in a model folder, offline; InputError when it cannot load.

    Here rather than in the text task: custom text models (engine/tasks/custom_model.py) need it too."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError) as e:
        raise InputError([Issue(f"cannot load the tokenizer: {e}",
                                "save the tokenizer into the model folder with tokenizer.save_pretrained(folder)",
                                str(folder))]) from e


class Task(Protocol):
    # Token counts are reported as tokens/s when a task has them.
    HAS_TOKENS: bool

    def validate(self, spec: TrainSpec) -> list[Issue]:
        """Cheap checks before launch: files exist, rows parse, labels known, enough per class, model folder sane."""

    def load_data(self, spec: TrainSpec) -> TaskData:
        """Datasets for training and validation (raise InputError listing every bad row)."""

    def build_model(self, spec: TrainSpec, data: TaskData) -> torch.nn.Module:
        """The base model in fp32 on CPU (the recipe applies the method and moves it)."""

    def forward(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean loss of the batch and its additive stats: {'samples': n, 'tokens': n}."""

    def eval_sums(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Additive quantities for one eval batch (e.g. loss_sum, correct, count); summed across ranks."""

    def finalize_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """Metrics from the summed quantities (accuracy, loss, perplexity, ...)."""

    def lora_targets(self, model: torch.nn.Module) -> list[str]:
        """Module names LoRA adapts by default for this architecture."""

    def block_types(self, model: torch.nn.Module) -> tuple[type, ...]:
        """Repeated block classes: the FSDP wrapping unit and the activation checkpointing unit."""
