"""Task plumbing for knowledge distillation and parity checks: logits of a batch, and the KD loss per task.

The loss itself (temperature-scaled KL plus the task loss) is ``distill.kd_loss``; this
module picks, per task, which positions and labels it applies to.
"""

from __future__ import annotations

from typing import Any


def logits(task_name: str, model: Any, batch: dict[str, Any]) -> Any:
    """The model's logits for a collated batch, in fp32."""
    if task_name == "image_classification":
        out = model(batch["pixel_values"])
    elif task_name == "causal_lm":
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    else:
        from engine.tasks.text_classification import model_inputs

        out = model(**model_inputs(batch)).logits
    return out.float()


def task_loss(task_name: str, student: Any, teacher: Any, batch: dict[str, Any], temperature: float,
              alpha: float) -> tuple[Any, dict[str, float]]:
    """KD loss of one batch: per example for classifiers, per target token for causal LMs."""
    from engine.trainer.distill import kd_loss

    labels = batch["labels"]
    if task_name == "causal_lm":
        from engine.tasks.causal_lm import IGNORE

        targets = labels[:, 1:]
        keep = targets != IGNORE  # the response tokens the task's own loss counts
        student, teacher = student[:, :-1][keep], teacher[:, :-1][keep]
        labels = targets[keep]
    return kd_loss(student, teacher, labels, temperature=temperature, alpha=alpha)
