"""Write the built-in `tiny-preferences` dataset (engine/resources/datasets/tiny_preferences).

Preference pairs for DPO and ORPO (and, unpaired, for KTO): a short question or request, a chosen
answer that is correct and polite, and a rejected one that is wrong or rude. The answers of the
patterned families (arithmetic, capitals, opposites, plurals, counting) are computed, so the chosen
ones are correct by construction and the wrong ones wrong. About one row in ten gives the prompt as
a list of chat messages (a system message, then the user's), and a few give the answers as
assistant message lists, so both forms the task reads are exercised.

Deterministic: the same files on every run. Usage: python scripts/make_tiny_preferences.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "engine" / "resources" / "datasets" / "tiny_preferences"
SEED = 20240611
VALIDATION = 50

CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Greece", "Athens"),
            ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
            ("Finland", "Helsinki"), ("Poland", "Warsaw"), ("Canada", "Ottawa"), ("Peru", "Lima"),
            ("Kenya", "Nairobi"), ("Cuba", "Havana"), ("Belgium", "Brussels"), ("Australia", "Canberra")]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("happy", "sad"),
             ("open", "closed"), ("early", "late"), ("full", "empty"), ("hard", "soft"), ("high", "low"),
             ("long", "short"), ("old", "young"), ("wet", "dry"), ("loud", "quiet"), ("clean", "dirty"),
             ("day", "night"), ("first", "last"), ("win", "lose"), ("buy", "sell"), ("north", "south")]
PLURALS = [("mouse", "mice"), ("child", "children"), ("man", "men"), ("tooth", "teeth"), ("foot", "feet"),
           ("goose", "geese"), ("person", "people"), ("leaf", "leaves"), ("knife", "knives"),
           ("city", "cities"), ("box", "boxes"), ("bus", "buses"), ("baby", "babies"), ("wolf", "wolves")]
WORDS = ["apple", "river", "garden", "window", "pencil", "yellow", "planet", "coffee", "bridge", "summer",
         "music", "forest", "orange", "castle", "rabbit", "doctor"]
REQUESTS = [
    ("Can you help me write a thank-you note to a colleague?",
     "Of course. Try: \"Thank you for your help this week. It made a real difference.\""),
    ("Please suggest a name for my new cat.", "How about Pepper? It is short, friendly and easy to call."),
    ("Could you explain what a fine-tune is in one sentence?",
     "A fine-tune trains an existing model a little more on your own examples so it fits your task."),
    ("I missed the bus this morning. Any advice?",
     "Sorry to hear that. Leaving ten minutes earlier or checking the timetable the night before can help."),
    ("Can you recommend a short book to read on a train?",
     "Sure. A short story collection works well, since you can stop after any story."),
    ("How do I politely decline a meeting?",
     "You could write: \"Thank you for the invitation. I cannot attend, but please share the notes.\""),
    ("What should I pack for a day at the beach?",
     "Water, sun cream, a hat, a towel and a snack are a good start."),
    ("Please give me a tip for learning new words.",
     "Use each new word in a sentence of your own the same day; it helps you remember it."),
    ("Could you remind me why sleep matters?",
     "Sleep lets the body recover and helps memory and mood, so most adults need seven to nine hours."),
    ("Can you help me plan a quick dinner?",
     "Certainly. Pasta with tomatoes, garlic and spinach takes about fifteen minutes."),
    ("I feel nervous about a talk tomorrow. What can I do?",
     "That is normal. Practise it twice out loud tonight and take a few slow breaths before you start."),
    ("How can I keep my desk tidy?",
     "Clear it for two minutes at the end of each day and keep only what you use daily on it."),
    ("Could you suggest a gift for my grandmother?",
     "A framed family photo or a warm scarf are thoughtful choices."),
    ("What is a good way to start a morning?",
     "A glass of water, a short walk and a simple breakfast make a calm start."),
    ("Please tell me how to say thank you in French.", "In French, thank you is \"merci\"."),
    ("Can you help me name a small bakery?", "How about \"The Morning Loaf\"? It sounds warm and simple."),
]
RUDE = ["Figure it out yourself.", "Not my problem.", "That is a stupid question.", "Go away, I am busy.",
        "Why would I help you with that?", "Ask someone who cares.", "Whatever. Do it yourself.",
        "No. Stop asking me things."]
SYSTEM = "You are a helpful and polite assistant."


def number_word(n: int) -> str:
    ones = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
            "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
    return ones[n] if n < 20 else str(n)


def wrong_number(rng: random.Random, right: int) -> int:
    return right + rng.choice([-3, -2, -1, 1, 2, 3, 10])


def families(rng: random.Random) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) for every patterned question."""
    rows = []
    for a in range(2, 21):
        for b in (3, 5, 7, 9):
            right = a + b
            rows.append((f"What is {a} plus {b}?", f"{a} plus {b} is {right}.",
                         f"{a} plus {b} is {wrong_number(rng, right)}." if rng.random() < 0.6 else rng.choice(RUDE)))
    for a in range(2, 10):
        for b in (3, 4, 6, 8):
            right = a * b
            rows.append((f"What is {a} times {b}?", f"{a} times {b} is {right}.",
                         f"{a} times {b} is {wrong_number(rng, right)}." if rng.random() < 0.6 else rng.choice(RUDE)))
    for a in range(10, 21):
        for b in (2, 4, 6):
            right = a - b
            rows.append((f"What is {a} minus {b}?", f"{a} minus {b} is {right}.",
                         f"{a} minus {b} is {wrong_number(rng, right)}." if rng.random() < 0.6 else rng.choice(RUDE)))
    cities = [c for _, c in CAPITALS]
    for country, city in CAPITALS:
        wrong = rng.choice([c for c in cities if c != city])
        rows.append((f"What is the capital of {country}?", f"The capital of {country} is {city}.",
                     f"The capital of {country} is {wrong}." if rng.random() < 0.6 else rng.choice(RUDE)))
    for word, opposite in OPPOSITES:
        rows.append((f"What is the opposite of '{word}'?", f"The opposite of '{word}' is '{opposite}'.",
                     f"The opposite of '{word}' is '{word}'." if rng.random() < 0.5 else rng.choice(RUDE)))
    for word, plural in PLURALS:
        wrong = word + "s"
        rows.append((f"What is the plural of '{word}'?", f"The plural of '{word}' is '{plural}'.",
                     f"The plural of '{word}' is '{wrong}'." if rng.random() < 0.5 else rng.choice(RUDE)))
    for word in WORDS:
        n = len(word)
        rows.append((f"How many letters are in the word '{word}'?",
                     f"The word '{word}' has {number_word(n)} letters.",
                     f"The word '{word}' has {number_word(n + rng.choice([-2, -1, 1, 2]))} letters."
                     if rng.random() < 0.5 else rng.choice(RUDE)))
    for prompt, answer in REQUESTS:
        for rude in rng.sample(RUDE, 4):
            rows.append((prompt, answer, rude))
    return rows


def as_row(rng: random.Random, prompt: str, chosen: str, rejected: str) -> dict:
    roll = rng.random()
    if roll < 0.1:  # the chat form: a system message, then the user's
        return {"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                "chosen": chosen, "rejected": rejected}
    if roll < 0.15:  # answers as assistant message lists
        return {"prompt": [{"role": "user", "content": prompt}],
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}]}
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def main() -> None:
    rng = random.Random(SEED)
    rows = [as_row(rng, *r) for r in families(rng)]
    rng.shuffle(rows)
    val, train = rows[:VALIDATION], rows[VALIDATION:]
    OUT.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.jsonl", train), ("validation.jsonl", val)):
        with open(OUT / name, "w", encoding="utf-8", newline="\n") as f:
            for row in part:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(train)} training and {len(val)} validation pairs to {OUT}")


if __name__ == "__main__":
    main()
