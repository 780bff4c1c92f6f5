"""Preference tuning of a causal LM: objectives dpo, orpo and kto (``spec.objective``).

The model, its folder and the chat rendering are the causal LM task's (engine/tasks/causal_lm.py);
the rows are preference pairs or labelled completions (engine/tasks/preference_data.py); the
losses give TRL's numbers (engine/tasks/preference_loss.py).

The reference model (dpo, kto) is never held in memory beside the policy: ``prepare_reference``
runs once, on the base model before the method (LoRA, full, ...) is applied, and stores each
row's reference log-probabilities in the row. For LoRA that base is exactly the policy with its
adapters disabled; for full fine-tuning it is the frozen starting point. ``forward(model, batch)``
then reads the reference from the batch, so it stays a pure function of the model and the batch,
and every strategy (single, DDP, FSDP, DeepSpeed) and checkpoint/resume work unchanged. ORPO needs
no reference.

Metrics, in each ``train`` event (``step_metrics``) and each evaluation: reward_chosen,
reward_rejected, reward_margin and reward_accuracy (a pair is right when its chosen answer earns
more reward than its rejected one; a kto row when its reward's sign matches its label), and loss.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks import causal_lm as lm
from engine.tasks import chat_templates
from engine.tasks import preference_data as pdata
from engine.tasks import preference_loss as ploss
from engine.tasks.base import Issue, TaskData, entry_points

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

HAS_TOKENS = True
# The forward stats the trainer sums over each step for step_metrics (the train event's reward figures).
STEP_SUMS = ("reward_chosen_sum", "chosen_count", "reward_rejected_sum", "rejected_count", "reward_correct",
             "reward_count")

build_model = lm.build_model
lora_targets = lm.lora_targets
block_types = lm.block_types


def _split(spec: TrainSpec, path: Path, rows: list) -> tuple[list, list, list[Issue]]:
    """A validation share of ``rows`` when there is no validation file (pairs stay whole)."""
    if len(rows) < 2:
        return rows, [], [Issue("one row cannot be split into training and validation",
                                "add rows or set data.val_path", str(path))]
    shuffled = list(rows)
    random.Random(spec.seed).shuffle(shuffled)
    n_val = min(max(1, round(len(shuffled) * spec.data.val_fraction)), len(shuffled) - 1)
    return sorted(shuffled[n_val:], key=lambda r: r[0]), sorted(shuffled[:n_val], key=lambda r: r[0]), []


def _prepare(spec: TrainSpec) -> tuple[TaskData | None, list[Issue]]:
    folder, tokenizer, issues = lm.model_and_tokenizer(spec)
    train_path, val_path, found = pdata.resolve_files(spec)
    issues += found
    if train_path is None:
        return None, issues
    objective = spec.objective
    train_rows, bad = pdata.read(train_path, objective)
    issues += bad
    val_rows: list = []
    if val_path is not None:
        val_rows, bad = pdata.read(val_path, objective)
        issues += bad
    if tokenizer is None:
        return None, issues
    if val_path is None and train_rows:
        train_rows, val_rows, split_issues = _split(spec, train_path, train_rows)
        issues += split_issues
        val_path = train_path
    if objective == "kto":
        train_rows, val_rows = pdata.unpair(train_rows), pdata.unpair(val_rows)
    max_length = spec.data.max_length
    train, bad, cut_train = pdata.encode_rows(tokenizer, train_path, train_rows, objective, max_length)
    val, val_bad, cut_val = pdata.encode_rows(tokenizer, val_path or train_path, val_rows, objective, max_length)
    issues += bad + val_bad
    if issues:  # a kto row unpaired from a pair shares its line: one issue per line and problem
        return None, list({(i.file, i.line, i.message): i for i in issues}.values())
    if not val:
        return None, [Issue("no validation rows", "add rows to the validation file, or leave data.val_path "
                                                  "empty to hold out a share of the training rows",
                            str(val_path or train_path))]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    options = ploss.options(spec)
    if objective == "kto":
        for rows in (train, val):
            pdata.add_kl_completions(rows, max(2, spec.batch_size), max_length)
        collate: Any = pdata.KtoCollator(pad_id, options)
        lengths = [len(r["prompt_ids"]) + len(r["completion_ids"]) for r in train]
    else:
        collate = pdata.PairCollator(pad_id, options)
        lengths = [len(r["prompt_ids"]) + max(len(r["chosen_ids"]), len(r["rejected_ids"])) for r in train]
    answers = ("completion",) if objective == "kto" else ("chosen", "rejected")
    info = {
        "model_dir": str(folder),
        "pad_id": pad_id,
        "objective": objective,
        "train_size": len(train),
        "val_size": len(val),
        "train_tokens": sum(len(r["prompt_ids"]) * len(answers) + sum(len(r[f"{a}_ids"]) for a in answers)
                            for r in train),
        "target_tokens": sum(len(r[f"{a}_ids"]) for r in train for a in answers),
        "truncated_rows": int(cut_train + cut_val),
        "chat_template": tokenizer.model_has_chat_template,  # the model's own
        "chat_template_name": chat_templates.used_name(tokenizer.model_has_chat_template, spec.data.chat_template),
        "max_length": max_length,
    }
    if objective == "kto":
        info["desirable"] = sum(bool(r["label"]) for r in train)
        info["undesirable"] = len(train) - info["desirable"]
    # The preferred answers, for the generated-answer evaluation (spec.generate_eval) of the causal LM task.
    good = [row["prompt"] + row[answers[0]] for _, row in val_rows if row.get("label", True)]
    return TaskData(train=lm.TokenRows(train), val=lm.TokenRows(val), collate=collate, info=info,
                    lengths=lengths, val_messages=good), []


# Model folder, tokenizer, and every data row (fields, message roles, answer kept after cutting).
validate, load_data = entry_points(_prepare)


def prepare_reference(model: torch.nn.Module, data: TaskData, spec: TrainSpec, world: Any, autocast: Any) -> None:
    """Store the reference log-probabilities in every train and validation row (dpo, kto).

    Called by the trainer with the base model before the method is applied. Each process scores
    its share of the rows, then all shares are exchanged; the model is left on the process's device."""
    if spec.objective == "orpo":
        return
    import torch

    from engine.training import dist, methods

    if not methods.is_quantized(model):
        model.to(world.device)
    was_training = model.training
    model.eval()
    step = max(1, spec.batch_size)
    for rows in (data.train.rows, data.val.rows):
        mine = list(range(world.rank, len(rows), world.size))
        scores: dict[int, tuple[float, float]] = {}
        for start in range(0, len(mine), step):
            idx = mine[start:start + step]
            batch = {k: (v.to(world.device) if hasattr(v, "to") else v)
                     for k, v in data.collate([{k: v for k, v in rows[i].items() if k != "ref"} for i in idx]).items()}
            with torch.no_grad(), autocast():
                pairs = _reference_scores(model, batch)
            scores.update(zip(idx, pairs, strict=True))
        for part in dist.gather_objects(world, scores):
            for i, pair in part.items():  # type: ignore[union-attr]
                rows[i]["ref"] = pair
    model.train(was_training)


def _reference_scores(model: Any, batch: dict[str, Any]) -> list[tuple[float, float]]:
    """Per row: (chosen, rejected) summed answer log-probabilities for pairs, (completion, KL completion) for kto."""
    if "kl_input_ids" in batch:
        first = ploss.answer_logps(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
        second = ploss.answer_logps(model, batch["kl_input_ids"], batch["kl_attention_mask"], batch["kl_labels"])
    else:
        both = ploss.answer_logps(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
        first, second = both.chunk(2)
    return [(float(a), float(b)) for a, b in zip(first.float().cpu(), second.float().cpu(), strict=True)]


def _loss(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    if batch["options"].objective == "kto":
        return ploss.kto_loss(model, batch)
    return ploss.pair_loss(model, batch)


def forward(model: torch.nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    """The objective's mean loss over the batch. Stats: samples (pairs or kto rows), tokens, positions,
    and the reward sums the train event's reward metrics come from (``step_metrics``)."""
    loss, parts = _loss(model, batch)
    ids = batch["input_ids"]
    samples = ids.shape[0] // 2 if "kl_input_ids" not in batch else ids.shape[0]
    stats = {"samples": float(samples), "tokens": float(batch["attention_mask"].sum()),
             "positions": float(ids.numel()), **ploss.reward_sums(parts)}
    return loss, stats


def step_metrics(sums: dict[str, float]) -> dict[str, float]:
    """The train event's reward figures from one step's summed stats (all micro-batches and processes)."""
    return ploss.reward_metrics(sums)


def eval_sums(model: torch.nn.Module, batch: dict[str, Any]) -> dict[str, float]:
    import torch

    with torch.no_grad():
        loss, parts = _loss(model, batch)
    sums = ploss.reward_sums(parts)
    if "nll_sum" in parts:  # orpo: the token-mean NLL and the per-pair odds-ratio term, kept apart
        sums.update(nll_sum=float(parts["nll_sum"]), nll_tokens=float(parts["nll_tokens"]),
                    ratio_term_sum=batch["options"].beta * float(parts["ratio"].sum()),
                    pairs=float(parts["ratio"].numel()))
    else:
        sums.update(loss_sum=float(parts["losses"].sum()), rows=float(parts["losses"].numel()))
    if "kl" in parts:
        sums.update(kl_sum=float(parts["kl"]), batches=1.0)
    return sums


def finalize_metrics(sums: dict[str, float]) -> dict[str, float]:
    metrics = ploss.reward_metrics(sums)
    if sums.get("pairs"):  # orpo
        metrics["loss"] = sums["nll_sum"] / sums["nll_tokens"] - sums["ratio_term_sum"] / sums["pairs"]
    else:
        metrics["loss"] = sums["loss_sum"] / sums["rows"] if sums.get("rows") else float("nan")
    if sums.get("batches"):
        metrics["kl"] = sums["kl_sum"] / sums["batches"]
    return metrics
