"""Scores of generated answers against reference answers, all on 0..1.

- ``exact_match``: 1 when the two answers are equal after normalisation, else 0; the mean over pairs.
- ``token_f1``: the F1 of the normalised answers' words (bag of words, counted with repeats); the mean
  over pairs.
- ``rouge_l``: ROUGE-L F-measure (longest common subsequence of words) from the ``rouge-score``
  package; the mean over pairs.
- ``bleu``: corpus BLEU from ``sacrebleu`` with its defaults (13a tokenisation, 4-grams, exponential
  smoothing), divided by 100.
- ``chrf``: corpus chrF from ``sacrebleu`` with its defaults (character 6-grams, beta 2, whitespace
  left out), divided by 100.

sacrebleu reports BLEU and chrF on 0..100; they are divided by 100 here so that every score shares
one scale with exact match and F1.

Normalisation (exact match and token F1) follows the SQuAD evaluation script: lower case, drop
punctuation, drop the articles a, an and the, collapse whitespace. Punctuation is every character
in Python's ``string.punctuation`` and every Unicode punctuation character (``¿``, ``«``, ``。``), so
letters with accents and other scripts are kept. Words are what remains between whitespace.

ROUGE-L lower-cases and takes runs of letters and digits as words. rouge-score's own tokenizer
keeps only ``a-z0-9`` (so ``"café"`` would become ``"caf"`` and Chinese text nothing at all); a
Unicode-aware tokenizer with the same rule is passed to it instead.

Empty answers: two answers that are both empty after normalisation match (exact match 1, F1 1, as
SQuAD); one empty answer scores 0 against a non-empty one. ROUGE-L is 0 when either side has no
words (rouge-score's rule). BLEU and chrF are corpus scores: empty answers count as answers with
no n-grams. Every function imports its package inside, so importing this module costs nothing.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence

METRICS = ("exact_match", "token_f1", "rouge_l", "bleu", "chrf")

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_WORDS = re.compile(r"[^\W_]+", re.UNICODE)  # runs of letters and digits, any script


def _is_punctuation(ch: str) -> bool:
    return ch in _ASCII_PUNCTUATION or unicodedata.category(ch).startswith("P")


def normalize(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if not _is_punctuation(ch))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(generated: str, reference: str) -> float:
    return float(normalize(generated) == normalize(reference))


def token_f1(generated: str, reference: str) -> float:
    """SQuAD's F1: precision and recall of the shared words (with repeats) of the normalised answers."""
    got, want = normalize(generated).split(), normalize(reference).split()
    if not got or not want:
        return float(got == want)
    same = sum((Counter(got) & Counter(want)).values())
    if not same:
        return 0.0
    precision, recall = same / len(got), same / len(want)
    return 2 * precision * recall / (precision + recall)


class _UnicodeWords:
    """rouge-score's tokenizer rule (lower case, runs of letters and digits) for every script."""

    def tokenize(self, text: str) -> list[str]:
        return _WORDS.findall(text.lower())


def rouge_l(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """ROUGE-L F-measure of each (generated, reference) pair."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_UnicodeWords())
    return [scorer.score(reference, generated)["rougeL"].fmeasure for generated, reference in pairs]


def corpus_bleu(pairs: Sequence[tuple[str, str]]) -> float:
    """sacrebleu's corpus BLEU on 0..1 (its own figure divided by 100)."""
    import sacrebleu

    return sacrebleu.corpus_bleu([g for g, _ in pairs], [[r for _, r in pairs]]).score / 100.0


def corpus_chrf(pairs: Sequence[tuple[str, str]]) -> float:
    """sacrebleu's corpus chrF on 0..1 (its own figure divided by 100)."""
    import sacrebleu

    return sacrebleu.corpus_chrf([g for g, _ in pairs], [[r for _, r in pairs]]).score / 100.0


def score_pairs(pairs: Sequence[tuple[str, str]]) -> dict[str, float]:
    """{exact_match, token_f1, rouge_l, bleu, chrf}, each on 0..1, for (generated, reference) pairs.

    Exact match, token F1 and ROUGE-L are means over the pairs; BLEU and chrF are corpus scores
    (n-gram counts summed over all pairs first). BLEU and chrF are sacrebleu's 0..100 figures
    divided by 100.
    """
    pairs = [(str(g), str(r)) for g, r in pairs]
    if not pairs:
        raise ValueError("no (generated, reference) pairs to score")
    n = len(pairs)
    return {
        "exact_match": sum(exact_match(g, r) for g, r in pairs) / n,
        "token_f1": sum(token_f1(g, r) for g, r in pairs) / n,
        "rouge_l": sum(rouge_l(pairs)) / n,
        "bleu": corpus_bleu(pairs),
        "chrf": corpus_chrf(pairs),
    }
