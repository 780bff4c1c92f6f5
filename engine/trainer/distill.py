"""Knowledge distillation: a smaller student cut from the teacher, and the distillation loss.

The student of a transformer teacher is the teacher with fewer blocks: the same
embeddings, head and block weights, ``layers`` of the teacher's blocks kept. Which
blocks are kept follows DistilBERT's initialisation (its extraction script keeps
teacher layers ``[0, 2, 4, 7, 9, 11]`` of 12): the first and the last block are
always kept, the rest evenly spaced between them, halfway ties rounded toward the
lower block (the lower layers are the ones that most hurt to lose, Sajjad et al.
2020, "Poor Man's BERT"). So 12 -> 6 keeps ``[0, 2, 4, 7, 9, 11]``, 6 -> 3 keeps
``[0, 2, 5]``, 6 -> 2 keeps ``[0, 5]`` and a 1-block student keeps ``[0]``. Keeping
the first block keeps the one that was trained on the embeddings' output; keeping
the last keeps the one whose output the head was trained on.

The choice depends only on the two layer counts, so the same student skeleton can
be rebuilt from a fresh base model before its saved weights are loaded (strictly).

Image models are not truncated: a CNN student is a smaller architecture
(``model.arch: small_cnn``), built from its spec by the caller.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from engine.training.context import JobFailed

if TYPE_CHECKING:
    import torch

IGNORE = -100  # the label of positions without a target (padding, prompt tokens), as the tasks use
# Module attributes that repeat the block count (DistilBERT's Transformer.n_layers).
_COUNT_ATTRS = ("n_layers", "num_layers", "num_hidden_layers", "n_layer")
_IMAGE_HINT = ("Layer truncation applies to transformer models. For an image model, pick a smaller "
               "architecture as the student instead (model.arch: small_cnn).")


def kept_layers(total: int, layers: int) -> list[int]:
    """The teacher blocks a ``layers``-block student keeps: first and last, evenly spaced between.

    ``round(i * (total - 1) / (layers - 1))`` with halves rounded down, in integers so the
    result never depends on floating point. Distinct and increasing because the spacing
    is at least 1 when ``layers < total``.
    """
    if layers == 1:
        return [0]
    span, steps = total - 1, layers - 1
    return [(2 * i * span + steps - 1) // (2 * steps) for i in range(layers)]


def find_blocks(model: torch.nn.Module) -> tuple[str, Any]:
    """(qualified name, ModuleList) of the model's transformer blocks.

    The block list is the ModuleList of one module type whose length is the config's
    layer count (``num_hidden_layers``; GPT-2's ``n_layer`` and DistilBERT's ``n_layers``
    answer to that name too). When several lists qualify, the one with the most
    parameters is the blocks (per-layer helpers such as norms are smaller).
    """
    from torch import nn

    config = getattr(model, "config", None)
    total = getattr(config, "num_hidden_layers", None)
    if not isinstance(total, int) or total < 1:
        raise JobFailed(f"Cannot find the layer count of {type(model).__name__} (its config has no num_hidden_layers)",
                        "Layer truncation needs a Hugging Face transformer (BERT, RoBERTa, DistilBERT, GPT-2, Llama, "
                        "Qwen2, ...).")
    found = [(name, module) for name, module in model.named_modules()
             if isinstance(module, nn.ModuleList) and len(module) == total
             and len({type(m) for m in module}) == 1]
    if not found:
        raise JobFailed(f"Cannot find the {total} transformer blocks of {type(model).__name__}",
                        "Layer truncation needs the blocks in one ModuleList, as Hugging Face models keep them; "
                        "distill into a smaller model of your own instead.")
    return max(found, key=lambda item: sum(p.numel() for p in item[1].parameters()))


def _check_task(task_name: str) -> None:
    if task_name == "image_classification":
        raise JobFailed("Layer truncation applies to transformer models, not to image classifiers", _IMAGE_HINT)


def truncate_layers(model: torch.nn.Module, task_name: str, layers: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Keep ``layers`` evenly spaced blocks of ``model`` in place; returns (model, info).

    info = ``{"layers": layers, "kept": [teacher block indices], "of": the teacher's count}``.
    The config's layer count (and per-layer lists such as Qwen2's ``layer_types``) and the
    blocks' ``layer_idx`` (their key/value cache slot) follow the kept blocks.
    """
    from torch import nn

    _check_task(task_name)
    name, blocks = find_blocks(model)
    total = len(blocks)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers < total:
        raise JobFailed(f"Cannot keep {layers!r} of the teacher's {total} layers: "
                        f"the student needs between 1 and {total - 1} layers",
                        f"Set the student's layers to a whole number from 1 to {total - 1}.")
    kept = kept_layers(total, layers)
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name)
    setattr(parent, attr, nn.ModuleList([blocks[i] for i in kept]))
    for attr_name in _COUNT_ATTRS:  # the block list's owner may repeat the count (DistilBERT)
        if getattr(parent, attr_name, None) == total:
            setattr(parent, attr_name, layers)
    for new_idx, block in enumerate(parent.get_submodule(attr)):
        for module in block.modules():
            if isinstance(getattr(module, "layer_idx", None), int):
                module.layer_idx = new_idx
    config = model.config
    types = getattr(config, "layer_types", None)
    if isinstance(types, list | tuple) and len(types) == total:
        config.layer_types = [types[i] for i in kept]
    config.num_hidden_layers = layers
    return model, {"layers": layers, "kept": kept, "of": total}


def build_student(teacher: torch.nn.Module, task_name: str, layers: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    """A ``layers``-block copy of ``teacher`` (weights from the teacher); the teacher is untouched."""
    _check_task(task_name)
    find_blocks(teacher)  # fail before copying a model that cannot be truncated
    return truncate_layers(copy.deepcopy(teacher), task_name, layers)


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor | None,
            temperature: float = 2.0, alpha: float = 0.5,
            mask: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """``alpha * T^2 * KL(softmax(teacher/T) || softmax(student/T)) + (1 - alpha) * CE(student, labels)``.

    Classification: logits [B, C], labels [B]; both terms are means over the batch (the KD
    term over the examples in ``mask`` [B], when one is given).

    Causal LM: logits [B, T, V], labels [B, T] as the causal_lm task collates them (-100
    where there is no target). Position t predicts token t+1, so logits are shifted
    left and labels right, as the task's own loss does. The task term is the mean
    cross-entropy over the target tokens; the KD term the mean KL over the positions
    whose next token is in ``mask`` ([B, T] over the input tokens, e.g. the attention
    mask to distil every real token, or ``labels != -100`` for the response only); with
    no mask, the target tokens. The T^2 factor keeps the KD gradients the same size
    whatever the temperature (Hinton et al. 2015). The teacher gets no gradient.

    Returns (loss, {"kd": T^2 * KL, "task": CE}) - the parts unweighted, for logs.
    """
    import torch
    import torch.nn.functional as F

    if not isinstance(temperature, int | float) or not temperature > 0:
        raise JobFailed(f"The distillation temperature must be above 0, got {temperature!r}",
                        "Use a temperature such as 2 (1 is the plain softmax; higher softens the teacher).")
    if not isinstance(alpha, int | float) or not 0 <= alpha <= 1:
        raise JobFailed(f"The distillation weight alpha must be between 0 and 1, got {alpha!r}",
                        "alpha weighs the teacher's soft targets against the labels: 0.5 is a common start.")
    if student_logits.shape != teacher_logits.shape:
        if student_logits.shape[-1] != teacher_logits.shape[-1]:
            what = "vocabulary" if student_logits.dim() == 3 else "labels"
            raise JobFailed(f"The student and the teacher disagree on the {what}: the student has "
                            f"{student_logits.shape[-1]} outputs, the teacher {teacher_logits.shape[-1]}",
                            "Distil into a student built for the same labels (or the same tokenizer and "
                            "vocabulary) as the teacher.")
        raise JobFailed(f"Student logits {tuple(student_logits.shape)} and teacher logits "
                        f"{tuple(teacher_logits.shape)} differ in shape",
                        "Run the student and the teacher on the same batch.")
    if labels is None and alpha < 1:
        raise JobFailed("The distillation loss needs labels unless alpha is 1",
                        "Pass the batch's labels, or set alpha to 1 to learn from the teacher alone.")
    s = student_logits.float()
    t = teacher_logits.detach().float()
    if s.dim() == 3:
        s, t = s[:, :-1], t[:, :-1]
        targets = labels[:, 1:] if labels is not None else None
        if mask is not None:
            if tuple(mask.shape) != tuple(student_logits.shape[:2]):
                raise JobFailed(f"The mask {tuple(mask.shape)} does not match the logits' tokens "
                                f"{tuple(student_logits.shape[:2])}",
                                "Pass a mask over the input tokens, such as the batch's attention_mask.")
            keep = mask[:, 1:].bool()
        elif targets is not None:
            keep = targets != IGNORE
        else:
            keep = torch.ones(s.shape[:2], dtype=torch.bool, device=s.device)
        s_kd, t_kd = s[keep], t[keep]  # [N, V]: the positions that count
        s = s.reshape(-1, s.shape[-1])
        targets = targets.reshape(-1) if targets is not None else None
    elif s.dim() == 2:
        targets = labels
        if mask is not None:
            if tuple(mask.shape) != (s.shape[0],):
                raise JobFailed(f"The mask {tuple(mask.shape)} does not match the batch ({s.shape[0]} examples)",
                                "Pass one flag per example, or no mask.")
            s_kd, t_kd = s[mask.bool()], t[mask.bool()]
        else:
            s_kd, t_kd = s, t
    else:
        raise JobFailed(f"Expected logits of shape [batch, classes] or [batch, tokens, vocabulary], "
                        f"got {tuple(student_logits.shape)}", "Pass the models' logits.")
    if s_kd.shape[0]:
        kl = F.kl_div(F.log_softmax(s_kd / temperature, dim=-1), F.log_softmax(t_kd / temperature, dim=-1),
                      reduction="batchmean", log_target=True)
        kd = kl * temperature ** 2
    else:
        kd = s.sum() * 0.0  # no position to distil: zero, still part of the graph
    if targets is not None:
        task = F.cross_entropy(s, targets, ignore_index=IGNORE) if (targets != IGNORE).any() else s.sum() * 0.0
    else:
        task = s.sum() * 0.0
    loss = alpha * kd + (1 - alpha) * task
    return loss, {"kd": float(kd.detach()), "task": float(task.detach())}
