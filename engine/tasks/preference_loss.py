"""The losses of objectives dpo, orpo and kto, written to give TRL 1.16's numbers.

Log-probabilities are those of the answer tokens only (labels not -100), summed over the answer for
DPO and KTO (TRL's DPOTrainer and KTOTrainer) and averaged over it for ORPO (TRL's ORPOTrainer,
``average_log_prob=True``). ORPO's NLL term is TRL's too: the mean cross-entropy over every
non-padding token of the chosen sequences, prompt included. tests/engine/test_preference.py
checks each loss against TRL's own code on the same model and batch.

Rewards, as TRL logs them: beta x (policy - reference) log-probability for DPO and KTO, beta x the
average log-probability for ORPO (which has no reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.tasks import causal_lm as lm

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Options:
    """The objective and its settings (spec.objective, spec.preference), carried by every batch."""

    objective: str
    beta: float = 0.1
    loss_type: str = "sigmoid"
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0


def options(spec: Any) -> Options:
    p = spec.preference
    return Options(spec.objective, p.beta, p.loss_type, p.desirable_weight, p.undesirable_weight)


def token_logps(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per position t (predicting token t+1): its log-probability in fp32, whether it is an answer
    token, and whether it is a real (non-padding) token."""
    logits = lm.logits(model, {"input_ids": input_ids, "attention_mask": attention_mask})
    if logits.shape[1] > input_ids.shape[1]:  # prompt tuning prepends virtual tokens
        logits = logits[:, -input_ids.shape[1]:]
    logits = logits[:, :-1].float()
    targets = input_ids[:, 1:]
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
    answer, real = labels[:, 1:] != lm.IGNORE, attention_mask[:, 1:] == 1
    return picked * real, answer, real


def answer_logps(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
                 ) -> torch.Tensor:
    """Summed log-probability of each row's answer tokens."""
    lp, answer, _ = token_logps(model, input_ids, attention_mask, labels)
    return (lp * answer).sum(-1)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, branching at -ln 2 to avoid cancellation (as TRL's ORPO)."""
    import torch

    return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def pair_loss(model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """DPO or ORPO on a PairCollator batch: (mean loss, per-pair parts for the metrics)."""
    import torch
    import torch.nn.functional as F

    o: Options = batch["options"]
    lp, answer, real = token_logps(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
    n = lp.shape[0] // 2
    if o.objective == "orpo":
        avg = (lp * answer).sum(-1) / answer.sum(-1)
        chosen, rejected = avg[:n].float(), avg[n:].float()
        log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected))
        ratio = F.logsigmoid(log_odds)
        nll_sum, nll_tokens = -(lp[:n] * real[:n]).sum(), real[:n].sum()
        loss = nll_sum / nll_tokens - (o.beta * ratio).mean()
        parts = {"chosen_rewards": o.beta * chosen.detach(), "rejected_rewards": o.beta * rejected.detach(),
                 "nll_sum": nll_sum.detach(), "nll_tokens": nll_tokens, "ratio": ratio.detach()}
        return loss, parts
    logps = (lp * answer).sum(-1)
    ref = batch["ref_logps"].to(logps.dtype)
    chosen_ratio, rejected_ratio = logps[:n] - ref[:n], logps[n:] - ref[n:]
    delta = chosen_ratio - rejected_ratio
    if o.loss_type == "hinge":
        losses = torch.relu(1 - o.beta * delta)
    elif o.loss_type == "ipo":
        # Per answer token, as TRL (and the IPO authors): the squared loss would grow with the length.
        lengths = (batch["labels"] != lm.IGNORE).sum(-1).clamp(min=1)
        losses = (chosen_ratio / lengths[:n] - rejected_ratio / lengths[n:] - 1 / (2 * o.beta)) ** 2
    else:
        losses = -F.logsigmoid(o.beta * delta)
    parts = {"chosen_rewards": o.beta * chosen_ratio.detach(), "rejected_rewards": o.beta * rejected_ratio.detach(),
             "losses": losses.detach()}
    return losses.mean(), parts


def kto_loss(model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """KTO on a KtoCollator batch: (mean loss, parts). The KL baseline is the batch's mean of
    (policy - reference) log-probability of the mismatched answers, averaged over the processes,
    never below 0 and without gradient, as TRL's KTOTrainer."""
    import torch

    o: Options = batch["options"]
    with torch.no_grad():
        kl_logps = answer_logps(model, batch["kl_input_ids"], batch["kl_attention_mask"], batch["kl_labels"])
    kl = _mean_over_processes((kl_logps - batch["ref_kl_logps"].to(kl_logps.dtype)).mean()).clamp(min=0)
    logps = answer_logps(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
    ratio = logps - batch["ref_logps"].to(logps.dtype)
    good = batch["label"]
    losses = torch.where(good, o.desirable_weight * (1 - torch.sigmoid(o.beta * (ratio - kl))),
                         o.undesirable_weight * (1 - torch.sigmoid(o.beta * (kl - ratio))))
    rewards = o.beta * ratio.detach()
    return losses.mean(), {"rewards": rewards, "good": good, "losses": losses.detach(), "kl": kl}


def _mean_over_processes(x: torch.Tensor) -> torch.Tensor:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    x = x.detach().clone()
    dist.all_reduce(x)
    return x / dist.get_world_size()


def reward_sums(parts: dict[str, Any]) -> dict[str, float]:
    """Additive figures for the reward metrics (summed over micro-batches, processes, eval batches)."""
    if "good" in parts:  # kto: each row is either desirable or not; correct when the reward's sign agrees
        rewards, good = parts["rewards"], parts["good"]
        chosen, rejected = rewards[good], rewards[~good]
        correct = ((rewards > 0) == good).sum()
        return {"reward_chosen_sum": float(chosen.sum()), "chosen_count": float(chosen.numel()),
                "reward_rejected_sum": float(rejected.sum()), "rejected_count": float(rejected.numel()),
                "reward_correct": float(correct), "reward_count": float(rewards.numel())}
    chosen, rejected = parts["chosen_rewards"], parts["rejected_rewards"]
    n = float(chosen.numel())
    return {"reward_chosen_sum": float(chosen.sum()), "chosen_count": n,
            "reward_rejected_sum": float(rejected.sum()), "rejected_count": n,
            "reward_correct": float((chosen > rejected).sum()), "reward_count": n}


def reward_metrics(sums: dict[str, float]) -> dict[str, float]:
    """reward_chosen, reward_rejected, reward_margin and reward_accuracy from reward_sums totals."""
    def ratio(a: str, b: str) -> float:
        return sums.get(a, 0.0) / sums[b] if sums.get(b) else float("nan")

    chosen, rejected = ratio("reward_chosen_sum", "chosen_count"), ratio("reward_rejected_sum", "rejected_count")
    return {"reward_chosen": chosen, "reward_rejected": rejected, "reward_margin": chosen - rejected,
            "reward_accuracy": ratio("reward_correct", "reward_count")}
