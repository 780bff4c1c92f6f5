"""A text classifier scored on labelled rows: accuracy, macro F1 and the rest of metrics.classification.

The ``evaluate.model`` job (docs/evaluate.md) hands in the classifier engine/inference/models.py opened (a
torch model, or an ONNX Runtime session for an ONNX variant) and the rows: a CSV or JSONL file read as a
fine-tune reads its data (engine/tasks/text_files.py), or the run's own validation split.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.evaluate.metrics import classification
from engine.training.context import JobFailed

SAMPLES = 10
SHOWN_ISSUES = 5


def read_labelled(path: Path, text_column: str, label_column: str) -> tuple[list[str], list[str]]:
    """(texts, labels) of a CSV or JSONL file; JobFailed naming the first problems."""
    from engine.tasks.text_files import read_rows

    rows = read_rows(str(path), text_column, label_column, field_name="data")
    if rows.issues:
        shown = "; ".join(f"line {i.line}: {i.message}" if i.line else i.message for i in rows.issues[:SHOWN_ISSUES])
        more = f" (and {len(rows.issues) - SHOWN_ISSUES} more)" if len(rows.issues) > SHOWN_ISSUES else ""
        columns = any(i.message.startswith("no column") for i in rows.issues)
        hint = (f"The text column read is {text_column!r} and the label column {label_column!r}: set text_column "
                "and label_column (ember evaluate --text-column, --label-column) to the file's own names."
                if columns else rows.issues[0].hint)
        raise JobFailed(f"Cannot use {path}: {shown}{more}", hint)
    return rows.texts, rows.labels


def label_ids(labels: Sequence[str], names: Sequence[str]) -> list[int]:
    """Each label's index among the model's classes; JobFailed listing labels the model does not know."""
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted({lab for lab in labels if lab not in index})
    if unknown:
        raise JobFailed(f"The data has labels the model was not trained on: {', '.join(map(repr, unknown[:10]))}"
                        + (f" (and {len(unknown) - 10} more)" if len(unknown) > 10 else ""),
                        f"Use rows labelled with the model's classes: {', '.join(map(repr, names[:20]))}.")
    return [index[lab] for lab in labels]


def logits(classifier: Any, texts: Sequence[str], batch_size: int,
           progress: Callable[[int], None] = lambda _done: None, stop: Callable[[], bool] = lambda: False) -> Any:
    """The classifier's logits for every text (n, classes); None when stopped between batches."""
    import numpy as np

    onnx = classifier.runner is not None
    out = []
    for start in range(0, len(texts), batch_size):
        if stop():
            return None
        enc = classifier.tokenizer(list(texts[start:start + batch_size]), truncation=True,
                                   max_length=classifier.max_length, padding=True,
                                   return_tensors="np" if onnx else "pt")
        if onnx:
            out.append(np.asarray(classifier.runner.run(dict(enc)), dtype=np.float32))
        else:
            import torch

            model = classifier.model
            device = next(model.parameters()).device
            inputs = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            with torch.inference_mode():
                out.append(model(**inputs).logits.float().cpu().numpy())
        progress(start + len(out[-1]))
    return np.concatenate(out, axis=0)


def evaluate(classifier: Any, texts: Sequence[str], labels: Sequence[str], batch_size: int,
             progress: Callable[[int], None] = lambda _done: None,
             stop: Callable[[], bool] = lambda: False) -> dict[str, Any] | None:
    """result.json's ``classification``: accuracy, macro F1, loss, per class, confusion, samples, time."""
    ids = label_ids(labels, classifier.labels)
    t0 = time.perf_counter()
    found = logits(classifier, texts, batch_size, progress, stop)
    if found is None:
        return None
    seconds = time.perf_counter() - t0
    scores = classification(found, ids, classifier.labels)
    predicted = found.argmax(axis=1).tolist()
    samples = [{"text": text[:400], "label": label, "predicted": classifier.labels[p]}
               for text, label, p in list(zip(texts, labels, predicted, strict=True))[:SAMPLES]]
    return {"metrics": {k: scores[k] for k in ("accuracy", "macro_f1", "loss")}, "per_class": scores["per_class"],
            "confusion": scores["confusion"], "labels": scores["labels"], "rows": len(ids), "samples": samples,
            "seconds": seconds}
