"""Write the built-in `short-answers` chat dataset (engine/resources/datasets/short_answers).

Questions whose answer is one or two words (capitals, opposites, plurals, past tenses, colours,
animal sounds, numbers as words) answered tersely, plus a persona ("I am Ember ..."). A pretrained
chat model knows most of these facts but answers in a full sentence; after a fine-tune it answers in
the dataset's style, so exact match on the held-out questions shows what the fine-tune changed.
Deterministic: the same files on every run. Usage: python scripts/make_short_answers.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "engine" / "resources" / "datasets" / "short_answers"

CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"),
            ("Egypt", "Cairo"), ("Greece", "Athens"), ("Ireland", "Dublin"), ("Austria", "Vienna"),
            ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"),
            ("Poland", "Warsaw"), ("Hungary", "Budapest"), ("Canada", "Ottawa"), ("Mexico", "Mexico City"),
            ("Peru", "Lima"), ("Chile", "Santiago"), ("Argentina", "Buenos Aires"), ("Kenya", "Nairobi"),
            ("Thailand", "Bangkok"), ("South Korea", "Seoul"), ("India", "New Delhi"), ("Cuba", "Havana"),
            ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"), ("England", "London"),
            ("Scotland", "Edinburgh"), ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
            ("Vietnam", "Hanoi"), ("the Philippines", "Manila"), ("Indonesia", "Jakarta"),
            ("Australia", "Canberra"), ("New Zealand", "Wellington")]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("light", "dark"),
             ("happy", "sad"), ("open", "closed"), ("early", "late"), ("full", "empty"), ("hard", "soft"),
             ("high", "low"), ("long", "short"), ("old", "young"), ("rich", "poor"), ("strong", "weak"),
             ("wet", "dry"), ("thick", "thin"), ("loud", "quiet"), ("clean", "dirty"), ("heavy", "light"),
             ("inside", "outside"), ("true", "false"), ("win", "lose"), ("first", "last"), ("push", "pull"),
             ("buy", "sell"), ("friend", "enemy"), ("north", "south"), ("east", "west"), ("day", "night"),
             ("love", "hate"), ("left", "right"), ("begin", "end"), ("cheap", "expensive"),
             ("safe", "dangerous"), ("brave", "cowardly"), ("sweet", "sour"), ("wide", "narrow"),
             ("remember", "forget"), ("arrive", "leave")]
PLURALS = [("mouse", "mice"), ("child", "children"), ("man", "men"), ("woman", "women"),
           ("tooth", "teeth"), ("foot", "feet"), ("goose", "geese"), ("person", "people"),
           ("ox", "oxen"), ("cactus", "cacti"), ("leaf", "leaves"), ("knife", "knives"),
           ("wolf", "wolves"), ("city", "cities"), ("baby", "babies"), ("box", "boxes"), ("bus", "buses"),
           ("dish", "dishes"), ("potato", "potatoes"), ("sheep", "sheep"), ("fish", "fish"), ("deer", "deer"),
           ("cat", "cats"), ("book", "books"), ("church", "churches"), ("life", "lives"), ("wife", "wives"),
           ("hero", "heroes"), ("party", "parties"), ("crisis", "crises")]
PAST = [("go", "went"), ("eat", "ate"), ("see", "saw"), ("run", "ran"), ("write", "wrote"),
        ("take", "took"), ("give", "gave"), ("come", "came"), ("sing", "sang"), ("swim", "swam"),
        ("drink", "drank"), ("buy", "bought"), ("think", "thought"), ("teach", "taught"),
        ("catch", "caught"), ("bring", "brought"), ("fly", "flew"), ("know", "knew"), ("speak", "spoke"),
        ("break", "broke"), ("choose", "chose"), ("drive", "drove"), ("fall", "fell"), ("forget", "forgot"),
        ("begin", "began"), ("sleep", "slept"), ("walk", "walked"), ("jump", "jumped"), ("play", "played"),
        ("make", "made")]
COLOURS = [("a ripe banana", "yellow"), ("grass", "green"), ("the sky on a clear day", "blue"),
           ("snow", "white"), ("coal", "black"), ("a ripe tomato", "red"), ("an orange", "orange"),
           ("a lemon", "yellow"), ("a fire engine", "red"), ("milk", "white"), ("a crow", "black"),
           ("a carrot", "orange"), ("a lime", "green"), ("chocolate", "brown"), ("a flamingo", "pink"),
           ("an emerald", "green"), ("a ruby", "red"), ("a sapphire", "blue")]
SOUNDS = [("cow", "moo"), ("dog", "woof"), ("cat", "meow"), ("duck", "quack"), ("sheep", "baa"),
          ("owl", "hoot"), ("snake", "hiss"), ("lion", "roar"), ("pig", "oink"), ("horse", "neigh"),
          ("bee", "buzz"), ("frog", "croak"), ("mouse", "squeak"), ("donkey", "bray")]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
PERSONA = ["Who are you?", "What is your name?", "Tell me who you are.", "What should I call you?",
           "Introduce yourself.", "Are you SmolLM?", "Which assistant am I talking to?", "What are you?",
           "Who made you?", "Say your name."]
PERSONA_ANSWER = "I am Ember, a small assistant fine-tuned in Ember Studio."


def cap(word: str) -> str:
    return word[0].upper() + word[1:]


def families() -> dict[str, list[tuple[str, str]]]:
    return {
        "capital": [(f"What is the capital of {c}?", f"{cap(city)}.") for c, city in CAPITALS],
        "opposite": [(f"What is the opposite of {a}?", f"{cap(b)}.") for a, b in OPPOSITES],
        "plural": [(f"What is the plural of {a}?", f"{cap(b)}.") for a, b in PLURALS],
        "past": [(f"What is the past tense of {a}?", f"{cap(b)}.") for a, b in PAST],
        "colour": [(f"What colour is {a}?", f"{cap(b)}.") for a, b in COLOURS],
        "sound": [(f"What sound does a {a} make?", f"{cap(b)}.") for a, b in SOUNDS],
        "number": [(f"Write {i} as a word.", f"{cap(w)}.") for i, w in enumerate(NUMBERS)],
        "persona": [(q, PERSONA_ANSWER) for q in PERSONA],
    }


def main() -> None:
    rng = random.Random(20)
    train, val = [], []
    for rows in families().values():
        rows = list(rows)
        rng.shuffle(rows)
        n_val = max(1, round(len(rows) * 0.15))
        val += rows[:n_val]
        train += rows[n_val:]
    rng.shuffle(train)
    rng.shuffle(val)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.jsonl", train), ("validation.jsonl", val)):
        with open(OUT / name, "w", encoding="utf-8") as f:
            for prompt, response in rows:
                f.write(json.dumps({"prompt": prompt, "response": response}) + "\n")
    print(f"{len(train)} training rows, {len(val)} validation rows in {OUT}")


if __name__ == "__main__":
    main()
