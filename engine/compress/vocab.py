"""Vocabulary pruning: keep only the embedding rows of the tokens a text model's training data uses.

A BERT-style classifier's word embeddings are often half its parameters (MiniLM: 11.7M of 22.7M, a
30,522-token vocabulary), and a fine-tune on one domain uses a few thousand of those tokens. Heads and FFN
pruning cannot touch that table; this does. The kept rows are the tokens of the training examples plus
the tokenizer's special tokens; every other id reads the row of the kept token whose original embedding is
nearest to its own (cosine), so "refunded" still reads like "refund" and not like "[UNK]" (on the tickets, 8% of
held-out tokens are unseen in training: reading them as unknown cost 5 points). The tokenizer is unchanged:
the model maps old ids to kept rows itself (``RemappedEmbedding``: one integer lookup before the embedding
lookup, a Gather before a Gather in ONNX), so the exported model takes the same inputs as before.
What it costs is reported: the share of held-out tokens that were not seen in training and now read as
another token (``val_tokens_unknown``).
"""

from __future__ import annotations

from typing import Any

import torch  # noqa: TID253 - a pruned model pickles this class by name; only jobs import this module
import torch.nn.functional as F  # noqa: N812, TID253 - the usual name; as above

from engine.training.context import JobFailed


class RemappedEmbedding(torch.nn.Module):
    """An embedding table holding only some rows of a larger vocabulary: ``index`` maps every old id to its row."""

    def __init__(self, index: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None):
        super().__init__()
        self.register_buffer("index", index.to(torch.long))
        self.weight = torch.nn.Parameter(weight)
        self.padding_idx = padding_idx
        self.num_embeddings, self.embedding_dim = weight.shape

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(self.index[input_ids], self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings} of {self.index.numel()} tokens, {self.embedding_dim}"


def token_ids(rows: Any) -> set[int]:
    return {int(i) for row in rows for i in row["input_ids"]}


def nearest_rows(weight: torch.Tensor, keep: list[int], targets: list[int], chunk: int = 4096) -> torch.Tensor:
    """For every id in the vocabulary, the position in ``keep`` of the ``targets`` row nearest to its embedding.

    Cosine similarity of the original embeddings, in chunks of ``chunk`` ids (30k x 1k floats at once is
    fine, a 250k-token vocabulary against 20k kept tokens is not).
    """
    unit = F.normalize(weight.detach().float(), dim=1)
    position = {t: i for i, t in enumerate(keep)}
    cand = torch.tensor([position[t] for t in targets], dtype=torch.long)
    cand_unit = unit[torch.tensor(targets, dtype=torch.long)]
    out = torch.empty(weight.shape[0], dtype=torch.long)
    for start in range(0, weight.shape[0], chunk):
        out[start:start + chunk] = cand[(unit[start:start + chunk] @ cand_unit.T).argmax(dim=1)]
    return out


def trim(model: Any, train_rows: Any, val_rows: Any, info: dict[str, Any],
         unseen: str = "nearest") -> dict[str, Any]:
    """Replace ``model``'s input embeddings (in place) by the rows ``train_rows`` use; returns the report."""
    if not hasattr(model, "get_input_embeddings"):
        raise JobFailed("Vocabulary pruning needs a transformers text model (one with get_input_embeddings)",
                        "Turn vocabulary off for this model.")
    emb = model.get_input_embeddings()
    if isinstance(emb, RemappedEmbedding):
        raise JobFailed("This model's vocabulary was pruned already", "Turn vocabulary off.")
    if not isinstance(emb, torch.nn.Embedding):
        raise JobFailed(f"Cannot prune a {type(emb).__name__} vocabulary", "Turn vocabulary off for this model.")
    unk = info.get("unk_token_id")
    if unk is None:
        raise JobFailed("The tokenizer has no unknown token for the pruned-out tokens to read as",
                        "Turn vocabulary off for this model.")
    vocab = emb.num_embeddings
    special = {int(i) for i in info.get("special_token_ids") or []} | {int(unk)}
    keep = sorted((token_ids(train_rows) | special) & set(range(vocab)))
    rows = torch.tensor(keep, dtype=torch.long)
    targets = [t for t in keep if t not in special]
    if unseen == "nearest" and targets:
        # Special tokens are never a target: an unseen word that reads as [SEP] would cut the text short.
        index = nearest_rows(emb.weight, keep, targets)
    else:
        index = torch.full((vocab,), keep.index(int(unk)), dtype=torch.long)
    index[rows] = torch.arange(len(keep))
    padding = emb.padding_idx
    new_padding = int(index[padding]) if padding is not None else None
    with torch.no_grad():
        remapped = RemappedEmbedding(index, emb.weight[rows].detach().clone(), new_padding)
    model.set_input_embeddings(remapped)
    val = [int(i) for row in val_rows for i in row["input_ids"]]
    kept = set(keep)
    unknown = sum(1 for i in val if i not in kept) / len(val) if val else 0.0
    return {"vocabulary_before": vocab, "vocabulary_after": len(keep),
            "params_removed": (vocab - len(keep)) * emb.embedding_dim,
            "val_tokens_unknown": round(unknown, 6), "kept": "tokens of the training examples and special tokens",
            "unseen": "the nearest kept token (cosine of the embeddings)" if unseen == "nearest" and targets
            else "the unknown token"}
