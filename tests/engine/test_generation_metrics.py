"""Scores of generated answers (engine/evaluate/generation.py), each checked against arithmetic done here."""

from __future__ import annotations

import math

import pytest

from engine.evaluate import generation as gen

pytest.importorskip("rouge_score")
pytest.importorskip("sacrebleu")


# ---------------------------------------------------------------- normalisation and exact match


def test_normalisation_follows_squad_and_keeps_letters_of_every_script():
    assert gen.normalize("  The Cat, sat!  ") == "cat sat"
    assert gen.normalize("An apple a day") == "apple day"
    assert gen.normalize("theatre then") == "theatre then"  # articles only as whole words
    # Unicode punctuation goes (¿ « » 。), accented letters and other scripts stay, lower-cased.
    assert gen.normalize("¿Dónde está «el» Café? The end。") == "dónde está el café end"
    assert gen.normalize("東京です。") == "東京です"
    assert gen.normalize("...") == ""


def test_exact_match_after_normalisation():
    assert gen.exact_match("The answer is 42.", "answer is 42") == 1.0
    assert gen.exact_match("Madrid", "Madrid.") == 1.0
    assert gen.exact_match("Madrid", "Barcelona") == 0.0
    assert gen.exact_match("CAFÉ!", "café") == 1.0
    assert gen.exact_match("", "") == 1.0  # both empty: SQuAD counts a match
    assert gen.exact_match("", "Madrid") == 0.0
    assert gen.exact_match("the", "") == 1.0  # an article alone normalises to nothing


# ---------------------------------------------------------------- token F1


def test_token_f1_counts_shared_words():
    # "the cat sat" -> [cat, sat] (2 words); "a cat sat down" -> [cat, sat, down] (3 words).
    # shared 2: precision 2/2 = 1, recall 2/3; F1 = 2 * 1 * 2/3 / (1 + 2/3) = (4/3) / (5/3) = 0.8
    assert gen.token_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)
    # Repeats count at most as often as in the other answer: [red, red, red] vs [red, blue]:
    # shared min(3, 1) = 1; precision 1/3, recall 1/2; F1 = 2 * (1/6) / (5/6) = 0.4
    assert gen.token_f1("red red red", "red blue") == pytest.approx(0.4)
    assert gen.token_f1("dog", "cat") == 0.0
    assert gen.token_f1("", "") == 1.0
    assert gen.token_f1("", "cat") == 0.0 and gen.token_f1("cat", "") == 0.0


def test_token_f1_on_unicode_words():
    # [東京, です] vs [東京]: shared 1; precision 1/2, recall 1/1; F1 = 2 * (1/2) / (3/2) = 2/3
    assert gen.token_f1("東京 です", "東京") == pytest.approx(2 / 3)
    # [zürich, ist, schön] vs [zürich, ist, sehr, schön]: shared 3; P 3/3, R 3/4; F1 = 1.5 / 1.75 = 6/7
    assert gen.token_f1("Zürich ist schön!", "zürich ist sehr schön") == pytest.approx(6 / 7)


# ---------------------------------------------------------------- ROUGE-L


def test_rouge_l_is_the_lcs_f_measure():
    # [the, cat, sat, on, the, mat] vs [the, cat, lay, on, the, mat]: the longest common
    # subsequence is [the, cat, on, the, mat] = 5; P = 5/6, R = 5/6, F = 5/6
    assert gen.rouge_l([("the cat sat on the mat", "the cat lay on the mat")]) == [pytest.approx(5 / 6)]
    # generated [a, b, c] vs reference [a, x, b, y, c, z]: LCS 3; P = 3/3, R = 3/6; F = 2 * 0.5 / 1.5 = 2/3
    assert gen.rouge_l([("a b c", "a x b y c z")]) == [pytest.approx(2 / 3)]
    # Order matters to the LCS: [c, b, a] vs [a, b, c] share only one in order; P = R = 1/3
    assert gen.rouge_l([("c b a", "a b c")]) == [pytest.approx(1 / 3)]


def test_rouge_l_on_unicode_and_empty_answers():
    # rouge-score's own tokenizer would drop ü and ö; here [zürich, ist, schön] vs
    # [zürich, ist, sehr, schön]: LCS 3; P 3/3, R 3/4; F = 1.5 / 1.75 = 6/7
    assert gen.rouge_l([("Zürich ist schön", "zürich ist sehr schön")]) == [pytest.approx(6 / 7)]
    # Chinese words separated by spaces are words: [北京, 上海] vs [北京]: LCS 1; P 1/2, R 1; F = 2/3
    assert gen.rouge_l([("北京 上海", "北京")]) == [pytest.approx(2 / 3)]
    assert gen.rouge_l([("", "cat"), ("cat", ""), ("", "")]) == [0.0, 0.0, 0.0]


# ---------------------------------------------------------------- BLEU and chrF


def test_corpus_bleu_modified_precisions_and_brevity_penalty():
    # [a, b, c, d, e] vs [a, b, c, d, f]: matching 1-grams 4/5, 2-grams 3/4, 3-grams 2/3, 4-grams 1/2;
    # same length, no brevity penalty: BLEU = (4/5 * 3/4 * 2/3 * 1/2) ** (1/4) = 0.2 ** 0.25
    assert gen.corpus_bleu([("a b c d e", "a b c d f")]) == pytest.approx(0.2 ** 0.25)
    # [a, b, c, d] vs [a, b, c, d, e, f]: every n-gram matches (4/4, 3/3, 2/2, 1/1), but the answer
    # is 4 words against 6: brevity penalty exp(1 - 6/4) = exp(-0.5)
    assert gen.corpus_bleu([("a b c d", "a b c d e f")]) == pytest.approx(math.exp(-0.5))
    assert gen.corpus_bleu([("the same words here", "the same words here")]) == pytest.approx(1.0)


def test_corpus_bleu_sums_counts_over_pairs_before_the_mean():
    # Pair 1 [a, b, c, d] vs [a, b, c, d]: matches 4/4, 3/3, 2/2, 1/1.
    # Pair 2 [e, f, g, h] vs [e, f, g, x]: matches 3/4, 2/3, 1/2, 0/1.
    # Summed: 7/8, 5/6, 3/4, 1/2; lengths 8 vs 8, no penalty.
    # BLEU = (7/8 * 5/6 * 3/4 * 1/2) ** (1/4) = (105/384) ** 0.25, not the mean of the two sentence scores
    pairs = [("a b c d", "a b c d"), ("e f g h", "e f g x")]
    assert gen.corpus_bleu(pairs) == pytest.approx((105 / 384) ** 0.25)


def test_corpus_chrf_character_ngrams():
    # chrF: character n-grams up to 6 (whitespace left out), precision and recall averaged over the
    # orders both sides have, then F with beta 2: F = 5 P R / (4 P + R).
    # "ab" vs "abc": 1-grams {a, b} vs {a, b, c}: P 2/2, R 2/3; 2-grams {ab} vs {ab, bc}: P 1/1, R 1/2;
    # 3-grams: none in "ab", so orders 1 and 2 count. P = 1, R = (2/3 + 1/2) / 2 = 7/12;
    # F = 5 * 7/12 / (4 + 7/12) = (35/12) / (55/12) = 7/11
    assert gen.corpus_chrf([("ab", "abc")]) == pytest.approx(7 / 11)
    # Unicode characters count as one character each. "ü" vs "üa": 1-grams {ü} vs {ü, a}: P 1, R 1/2;
    # F = 5 * 1/2 / (4 + 1/2) = 5/9
    assert gen.corpus_chrf([("ü", "üa")]) == pytest.approx(5 / 9)
    # Whitespace is removed before the n-grams are taken: "a b" is read as "ab", so P = R = 1 and F = 1
    assert gen.corpus_chrf([("a b", "ab")]) == pytest.approx(1.0)


def test_empty_answers_score_zero_in_corpus_metrics():
    assert gen.corpus_bleu([("", "a b c")]) == 0.0
    assert gen.corpus_chrf([("", "abc")]) == 0.0
    assert gen.corpus_bleu([("", "")]) == 0.0


# ---------------------------------------------------------------- all together


def test_score_pairs_returns_every_metric_on_zero_to_one():
    pairs = [("The cat sat.", "the cat sat"), ("a cat sat", "a cat sat down"), ("", "dog")]
    scores = gen.score_pairs(pairs)
    assert tuple(scores) == gen.METRICS
    # exact match: 1, 0, 0 -> 1/3
    assert scores["exact_match"] == pytest.approx(1 / 3)
    # token F1: 1; [cat, sat] vs [cat, sat, down] = 0.8 (as above); 0 -> 1.8 / 3 = 0.6
    assert scores["token_f1"] == pytest.approx(0.6)
    # ROUGE-L: [the, cat, sat] vs same = 1; [a, cat, sat] vs [a, cat, sat, down]: LCS 3, P 1, R 3/4,
    # F = 1.5 / 1.75 = 6/7; empty = 0 -> (1 + 6/7) / 3 = 13/21
    assert scores["rouge_l"] == pytest.approx(13 / 21)
    assert all(0.0 <= v <= 1.0 for v in scores.values())
    assert scores["bleu"] == pytest.approx(gen.corpus_bleu(pairs))
    assert scores["chrf"] == pytest.approx(gen.corpus_chrf(pairs))
    perfect = gen.score_pairs([("Paris is the capital.", "Paris is the capital.")])
    assert perfect == pytest.approx(dict.fromkeys(gen.METRICS, 1.0))


def test_score_pairs_needs_pairs():
    with pytest.raises(ValueError, match="no .generated, reference. pairs"):
        gen.score_pairs([])
