"""Quality figures from logits (numpy only, so a torch model and an ONNX model are scored alike)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

IGNORE = -100  # label value of positions that are not scored (the collators' padding)


def _log_softmax(logits: Any) -> Any:
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def classification(logits: Any, labels: Any, label_names: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro F1, mean cross-entropy, per-class precision/recall/F1/support and the confusion matrix.

    ``confusion[i][j]`` counts examples of true class i predicted as j. A class never
    predicted has precision 0 (and never seen, recall 0). Macro F1 averages the classes
    that occur among the labels or the predictions, as scikit-learn does: on a small
    held-out slice a class that is absent from both would otherwise count as F1 0.
    """
    import numpy as np

    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    n, k = logits.shape[0], len(label_names)
    if n == 0 or logits.ndim != 2 or labels.shape != (n,):
        raise ValueError(f"need logits (n, classes) and labels (n,) with n > 0; got {logits.shape} and {labels.shape}")
    if logits.shape[1] != k:
        raise ValueError(f"logits have {logits.shape[1]} classes but there are {k} label names")
    pred = logits.argmax(axis=1)
    confusion = np.zeros((k, k), dtype=np.int64)
    np.add.at(confusion, (labels, pred), 1)
    tp = np.diag(confusion).astype(np.float64)
    support = confusion.sum(axis=1)
    predicted = confusion.sum(axis=0)
    precision = np.divide(tp, predicted, out=np.zeros(k), where=predicted > 0)
    recall = np.divide(tp, support, out=np.zeros(k), where=support > 0)
    denom = precision + recall
    f1 = np.divide(2 * precision * recall, denom, out=np.zeros(k), where=denom > 0)
    present = (support > 0) | (predicted > 0)
    loss = float(-_log_softmax(logits)[np.arange(n), labels].mean())
    return {
        "accuracy": float((pred == labels).mean()),
        "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
        "loss": loss,
        "per_class": [{"label": str(name), "precision": float(precision[i]), "recall": float(recall[i]),
                       "f1": float(f1[i]), "support": int(support[i])} for i, name in enumerate(label_names)],
        "confusion": confusion.tolist(),
        "labels": [str(name) for name in label_names],
    }


def lm_sums(logits: Any, input_ids: Any, attention_mask: Any) -> tuple[float, int]:
    """(summed next-token cross-entropy, scored tokens) of a causal LM batch.

    The logits at position t predict token t+1; a pair counts when both positions are
    real tokens (attention mask 1), so right padding never counts. Every real token
    after the first is scored, prompt included: the figure compares two models on the
    same text, it is not the response-only loss the fine-tune reports.
    """
    import numpy as np

    logp = _log_softmax(np.asarray(logits)[:, :-1])
    ids = np.asarray(input_ids, dtype=np.int64)
    mask = np.asarray(attention_mask).astype(bool)
    targets = ids[:, 1:]
    keep = mask[:, 1:] & mask[:, :-1]
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return float(-picked[keep].sum()), int(keep.sum())


def lm_predictions(logits: Any, attention_mask: Any) -> Any:
    """Top-1 next-token predictions at the scored positions (as ``lm_sums`` picks them), flattened."""
    import numpy as np

    mask = np.asarray(attention_mask).astype(bool)
    keep = mask[:, 1:] & mask[:, :-1]
    return np.asarray(logits)[:, :-1].argmax(axis=-1)[keep]


def language_model(loss_sum: float, tokens: int) -> dict[str, float]:
    """Mean loss per scored token and its perplexity (exp of the mean loss; inf when it overflows)."""
    if tokens <= 0:
        raise ValueError("no tokens were scored")
    loss = loss_sum / tokens
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else math.inf}


def agreement(pred_a: Any, pred_b: Any) -> float:
    """Share of positions where two models' top-1 predictions are the same."""
    import numpy as np

    a, b = np.asarray(pred_a).ravel(), np.asarray(pred_b).ravel()
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two equally long, non-empty prediction lists; got {a.size} and {b.size}")
    return float((a == b).mean())
