"""Spec fields by the names the form shows them under, for messages read in the window.

The engine's messages name fields by their job-file keys (``data.text_column``), which is
right on the command line. In the window a user looks for "Text column", so messages shown
there say that, and the key stays in the tooltip for whoever edits the YAML. Plain Python.
"""

from __future__ import annotations

import re

from app.text.field_text import plain_message

# Spec key -> the label the wizard shows next to its field.
FIELD_LABELS: dict[str, str] = {
    "task": "Task",
    "objective": "Objective",
    "preference.beta": "Beta",
    "preference.loss_type": "Loss type",
    "preference.desirable_weight": "Desirable weight",
    "preference.undesirable_weight": "Undesirable weight",
    "name": "Run name",
    "model.path": "Model folder",
    "model.builtin": "Built-in model",
    "model.arch": "Architecture",
    "model.code": "Python file",
    "model.code_entry": "Function or class",
    "data.path": "Data file",
    "data.val_path": "Validation file",
    "data.builtin": "Built-in data",
    "data.text_column": "Text column",
    "data.label_column": "Label column",
    "data.max_length": "Tokens per example",
    "data.image_size": "Image size",
    "data.val_fraction": "Held out for validation",
    "data.min_per_class": "Minimum examples per class",
    "data.num_workers": "Data workers",
    "data.packing": "Packing",
    "data.group_by_length": "Group by length",
    "method.kind": "Method",
    "method.lora_r": "LoRA rank",
    "method.lora_alpha": "LoRA alpha",
    "method.lora_dropout": "LoRA dropout",
    "method.target_modules": "Target modules",
    "method.num_virtual_tokens": "Virtual tokens",
    "device": "Device",
    "precision": "Precision",
    "distributed.strategy": "Strategy",
    "distributed.nproc": "Processes",
    "distributed.zero_stage": "ZeRO stage",
    "distributed.nodes": "Machines",
    "distributed.rdzv_port": "Rendezvous port",
    "distributed.rdzv_host": "Rendezvous address",
    "distributed.sync_data": "Copy the dataset and model",
    "batch_size": "Batch size",
    "grad_accum": "Gradient accumulation",
    "max_steps": "Steps",
    "epochs": "Epochs",
    "optim.lr": "Learning rate",
    "optim.schedule": "Schedule",
    "optim": "Learning rate",
    "eval_every": "Evaluate every",
    "checkpoint_every": "Checkpoint every",
    "activation_checkpointing": "Activation checkpointing",
    "speed.attention": "Attention",
    "speed.compile": "torch.compile",
    "speed.optimizer_impl": "AdamW kernel",
}

# A key as a whole word: not part of a longer key or a file name.
_KEY = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in sorted(FIELD_LABELS, key=len, reverse=True))
                  + r")(?![\w])")

def label_for(path: str) -> str:
    """The on-screen label of a spec path (its nearest labelled parent), else the path itself."""
    key = path
    while key:
        if key in FIELD_LABELS:
            return FIELD_LABELS[key]
        key = key.rpartition(".")[0]
    return path


def on_screen(text: str) -> str:
    """``text`` with every spec key it names replaced by that field's label in quotes."""
    return _KEY.sub(lambda m: f"“{FIELD_LABELS[m.group(1)]}”", text)


def field_message(path: str, message: str, label: str | None = None) -> str:
    """A validation message for the window: "Batch size must be at least 1", not pydantic's words."""
    return plain_message(label or label_for(path), message) or on_screen(message)
