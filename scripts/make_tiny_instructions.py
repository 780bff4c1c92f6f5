"""Write the built-in `tiny-instructions` dataset (engine/resources/datasets/tiny_instructions).

Deterministic (seeded): running it again writes train.jsonl and validation.jsonl byte for
byte as committed (README.md there is written by hand). Hand-written prompt/response pairs
and short chats, plus small families of patterned rows whose answers are computed
(arithmetic, opposites, plurals, capital letters, word counts, days, fruit or vegetable,
sorting), so they are correct by construction.

    .venv/bin/python scripts/make_tiny_instructions.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "engine" / "resources" / "datasets" / "tiny_instructions"
SEED = 2024

HANDWRITTEN = [
    ("Say hello in one short sentence.", "Hello, it is nice to meet you."),
    ("What colour is a clear daytime sky?", "A clear daytime sky is blue."),
    ("Name three primary colours of paint.", "Red, yellow and blue."),
    ("How many days are in a week?", "There are seven days in a week."),
    ("How many hours are in a day?", "There are 24 hours in a day."),
    ("How many minutes are in an hour?", "There are 60 minutes in an hour."),
    ("What do bees make?", "Bees make honey and wax."),
    ("What is ice made of?", "Ice is frozen water."),
    ("At what temperature does water freeze in Celsius?", "Water freezes at 0 degrees Celsius."),
    ("At what temperature does water boil at sea level in Celsius?", "Water boils at 100 degrees Celsius at sea level."),
    ("Which planet do we live on?", "We live on Earth."),
    ("What is the largest planet in our solar system?", "Jupiter is the largest planet in our solar system."),
    ("Which star is closest to Earth?", "The Sun is the star closest to Earth."),
    ("What gas do plants take in from the air?", "Plants take in carbon dioxide from the air."),
    ("What gas do people need to breathe?", "People need oxygen to breathe."),
    ("Give one tip for sleeping well.", "Keep a regular bedtime and avoid screens just before sleep."),
    ("Give one tip for writing clear emails.", "Put the request in the first sentence."),
    ("Suggest a name for a grey cat.", "How about Pebble?"),
    ("Suggest a name for a small boat.", "How about Little Heron?"),
    ("Write a four word motto for a bakery.", "Fresh bread every morning."),
    ("Write a short greeting for a birthday card.", "Happy birthday! Wishing you a bright year ahead."),
    ("Write a polite way to decline a meeting.", "Thank you for the invite, but I cannot join this time."),
    ("Tell me a fact about octopuses.", "An octopus has three hearts."),
    ("Tell me a fact about the Moon.", "The Moon always shows the same side to Earth."),
    ("Tell me a fact about honey.", "Honey can keep for a very long time without spoiling."),
    ("What is a noun?", "A noun is a word that names a person, place or thing."),
    ("What is a verb?", "A verb is a word that describes an action or a state."),
    ("What is an adjective?", "An adjective is a word that describes a noun."),
    ("What does a thermometer measure?", "A thermometer measures temperature."),
    ("What does a ruler measure?", "A ruler measures length."),
    ("What does a clock show?", "A clock shows the time."),
    ("What is the opposite of north?", "The opposite of north is south."),
    ("What is the first letter of the English alphabet?", "The first letter is A."),
    ("What is the last letter of the English alphabet?", "The last letter is Z."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("How many legs does an insect have?", "An insect has six legs."),
    ("What do you call a baby dog?", "A baby dog is called a puppy."),
    ("What do you call a baby cat?", "A baby cat is called a kitten."),
    ("What do you call a baby cow?", "A baby cow is called a calf."),
    ("What is a learning rate in model training?", "It sets how big each update step to the weights is."),
    ("What is a training step?", "One update of the model weights from one batch of examples."),
    ("What is a batch?", "A group of examples processed together in one step."),
    ("What is a validation set for?", "It checks how well a model does on examples it did not train on."),
    ("What does overfitting mean?", "The model memorises the training data and does worse on new data."),
    ("What is LoRA?", "LoRA trains small low-rank matrices added to a frozen model."),
    ("Why save checkpoints during training?", "So training can resume after a crash without starting over."),
    ("What does loss measure?", "Loss measures how wrong the model's predictions are; lower is better."),
    ("What is a GPU good for?", "A GPU runs many calculations in parallel, which speeds up training."),
    ("Name a fruit that is yellow.", "A banana is yellow."),
    ("Name a fruit that is red.", "A strawberry is red."),
    ("Name a vegetable that is orange.", "A carrot is orange."),
    ("Name an animal that can fly.", "A sparrow can fly."),
    ("Name an animal that lives in the sea.", "A dolphin lives in the sea."),
    ("Name a musical instrument with strings.", "A violin has strings."),
    ("What do you use to cut paper?", "You use scissors to cut paper."),
    ("What do you use to write on a whiteboard?", "You use a whiteboard marker."),
    ("Finish the sentence: The early bird", "The early bird catches the worm."),
    ("Finish the sentence: Practice makes", "Practice makes perfect."),
    ("Rewrite more politely: Give me the report.", "Could you please send me the report?"),
    ("Rewrite more politely: Close the door.", "Would you mind closing the door, please?"),
]

HANDWRITTEN_VAL = [
    ("How many months are in a year?", "There are twelve months in a year."),
    ("What colour is fresh grass?", "Fresh grass is green."),
    ("What do cows drink?", "Cows drink water."),
    ("How many legs does a dog have?", "A dog has four legs."),
    ("What do you call a baby sheep?", "A baby sheep is called a lamb."),
    ("What does a scale measure?", "A scale measures weight."),
    ("Name a fruit that is green.", "A lime is green."),
    ("Tell me a fact about snails.", "A snail carries its shell on its back."),
    ("What is an epoch in training?", "One full pass over the training data."),
    ("Rewrite more politely: Call me back.", "Could you call me back when you have a moment?"),
]

OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("light", "dark"),
             ("happy", "sad"), ("open", "closed"), ("early", "late"), ("full", "empty"), ("wet", "dry"),
             ("loud", "quiet"), ("hard", "soft"), ("old", "new"), ("inside", "outside"), ("high", "low"),
             ("thick", "thin"), ("win", "lose"), ("push", "pull"), ("start", "finish"), ("rich", "poor"),
             ("strong", "weak"), ("clean", "dirty"), ("near", "far"), ("day", "night")]

PLURALS = [("cat", "cats"), ("mouse", "mice"), ("child", "children"), ("box", "boxes"), ("leaf", "leaves"),
           ("foot", "feet"), ("tooth", "teeth"), ("city", "cities"), ("sheep", "sheep"), ("knife", "knives"),
           ("woman", "women"), ("bus", "buses"), ("goose", "geese"), ("baby", "babies"), ("fish", "fish"),
           ("tomato", "tomatoes"), ("person", "people"), ("dish", "dishes")]

PHRASES = ["river stone", "good morning", "blue whale", "open the window", "seven apples", "quiet night",
           "green tea", "paper plane", "north wind", "small steps", "bright lamp", "warm bread",
           "silver spoon", "fresh snow", "lucky number", "tall tree", "slow train", "red kite"]

WORD_SETS = ["the cat sat down", "we walked to the park", "rain falls", "birds sing at dawn",
             "she reads a long book every night", "hello", "turn left at the bridge", "bread and butter",
             "the train was late again today", "plants need light", "he likes cold water",
             "a quiet room helps me think", "open the door", "stars shine", "my brother plays chess on sundays",
             "it is warm", "the model learns from data", "pack a coat"]

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

CATEGORIES = [("carrot", "a vegetable"), ("apple", "a fruit"), ("potato", "a vegetable"), ("pear", "a fruit"),
              ("onion", "a vegetable"), ("cherry", "a fruit"), ("cabbage", "a vegetable"), ("plum", "a fruit"),
              ("grape", "a fruit"), ("spinach", "a vegetable"), ("peach", "a fruit"), ("leek", "a vegetable")]

MULTI_TURN = [
    [("user", "Hi! Can you help me plan lunch?"), ("assistant", "Of course. Do you want something warm or cold?"),
     ("user", "Something warm."), ("assistant", "A bowl of vegetable soup with bread would be a good warm lunch.")],
    [("system", "You answer in one short sentence."), ("user", "Why is the sea salty?"),
     ("assistant", "Rivers carry dissolved salts from rocks into the sea.")],
    [("user", "What is 3 plus 4?"), ("assistant", "3 plus 4 is 7."), ("user", "And times 2?"),
     ("assistant", "7 times 2 is 14.")],
    [("system", "You are a friendly assistant."), ("user", "I feel tired today."),
     ("assistant", "Sorry to hear that. A short walk and a glass of water might help.")],
    [("user", "Name a colour."), ("assistant", "Purple."), ("user", "Name another one."), ("assistant", "Orange.")],
    [("system", "Reply with a single word."), ("user", "What is the opposite of cold?"), ("assistant", "Hot.")],
    [("user", "Translate 'thank you' into French."), ("assistant", "Merci.")],
    [("user", "Translate 'good night' into Spanish."), ("assistant", "Buenas noches.")],
    [("user", "I want to train a model but my GPU is small."),
     ("assistant", "Try LoRA and a smaller batch size; both reduce memory use.")],
    [("user", "My validation loss is going up while training loss goes down."),
     ("assistant", "That is a sign of overfitting. Try early stopping or more data.")],
    [("system", "You are a helpful assistant."), ("user", "Give me a word that rhymes with cat."),
     ("assistant", "Hat rhymes with cat.")],
    [("user", "Count to five."), ("assistant", "One, two, three, four, five.")],
    [("user", "Count backwards from three."), ("assistant", "Three, two, one.")],
    [("user", "Which is heavier, a kilogram of feathers or a kilogram of stones?"),
     ("assistant", "They weigh the same: one kilogram each.")],
    [("user", "Spell the word 'cat'."), ("assistant", "C, A, T.")],
    [("user", "What is the capital of France?"), ("assistant", "Paris."),
     ("user", "And of Italy?"), ("assistant", "Rome.")],
    [("user", "What is the capital of Japan?"), ("assistant", "Tokyo.")],
    [("user", "What is the capital of Canada?"), ("assistant", "Ottawa.")],
    [("system", "Keep answers short."), ("user", "What is the capital of Germany?"), ("assistant", "Berlin.")],
    [("user", "Good morning!"), ("assistant", "Good morning! How can I help you today?")],
]
MULTI_TURN_VAL = [
    [("user", "What is the capital of Spain?"), ("assistant", "Madrid.")],
    [("system", "Reply with a single word."), ("user", "What is the opposite of up?"), ("assistant", "Down.")],
    [("user", "What is 2 plus 2?"), ("assistant", "2 plus 2 is 4."), ("user", "And minus 1?"),
     ("assistant", "4 minus 1 is 3.")],
    [("user", "Spell the word 'dog'."), ("assistant", "D, O, G.")],
]


def arith(rng: random.Random, n: int) -> list[tuple[str, str]]:
    rows = []
    seen = set()
    while len(rows) < n:
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        op = rng.choice(["plus", "minus", "times"])
        if op == "minus" and b > a:
            a, b = b, a
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        r = a + b if op == "plus" else a - b if op == "minus" else a * b
        rows.append((f"What is {a} {op} {b}?", f"{a} {op} {b} is {r}."))
    return rows


def sort_rows(rng: random.Random, n: int) -> list[tuple[str, str]]:
    rows = []
    for _ in range(n):
        nums = rng.sample(range(1, 50), rng.randint(3, 5))
        rows.append((f"Sort these numbers from smallest to largest: {', '.join(map(str, nums))}.",
                     ", ".join(map(str, sorted(nums)))))
    return rows


def split(rng: random.Random, items: list, n_val: int) -> tuple[list, list]:
    items = list(items)
    rng.shuffle(items)
    return items[n_val:], items[:n_val]


def msg_rows(conv: list[tuple[str, str]]) -> dict:
    return {"messages": [{"role": r, "content": t} for r, t in conv]}


def word_count(s: str) -> str:
    n = len(s.split())
    return f"There {'is' if n == 1 else 'are'} {n} word{'' if n == 1 else 's'}."


def article(w: str, capital: bool = False) -> str:
    a = "an" if w[0] in "aeiou" else "a"
    return a.capitalize() if capital else a


def rows() -> tuple[list[dict], list[dict]]:
    """The train and validation rows, in file order (the random calls run in a fixed order)."""
    rng = random.Random(SEED)
    pr_train, pr_val = list(HANDWRITTEN), list(HANDWRITTEN_VAL)
    families = [
        (lambda: arith(rng, 30), 5),
        (lambda: [(f"What is the opposite of '{w}'?", f"The opposite of '{w}' is '{x}'.") for w, x in OPPOSITES], 4),
        (lambda: [(f"What is the plural of '{w}'?", f"The plural of '{w}' is '{x}'.") for w, x in PLURALS], 3),
        (lambda: [(f"Write '{w}' in capital letters.", w.upper()) for w in PHRASES], 3),
        (lambda: [(f"How many words are in: '{s}'?", word_count(s)) for s in WORD_SETS], 3),
        (lambda: [(f"What day comes after {DAYS[i]}?", f"{DAYS[(i + 1) % 7]} comes after {DAYS[i]}.")
                  for i in range(7)]
                 + [(f"What day comes before {DAYS[i]}?", f"{DAYS[i - 1]} comes before {DAYS[i]}.")
                    for i in range(7)], 3),
        (lambda: [(f"Is {article(w)} {w} a fruit or a vegetable?", f"{article(w, True)} {w} is {x}.")
                  for w, x in CATEGORIES], 2),
        (lambda: sort_rows(rng, 17), 3),
    ]
    for make, n_val in families:
        tr, va = split(rng, make(), n_val)
        pr_train += tr
        pr_val += va
    train = [{"prompt": q, "response": a} for q, a in pr_train] + [msg_rows(c) for c in MULTI_TURN]
    val = [{"prompt": q, "response": a} for q, a in pr_val] + [msg_rows(c) for c in MULTI_TURN_VAL]
    rng.shuffle(train)
    rng.shuffle(val)
    return train, val


def main() -> None:
    train, val = rows()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.jsonl", train), ("validation.jsonl", val)):
        with open(OUT / name, "w", encoding="utf-8", newline="\n") as f:
            for r in part:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"train {len(train)} rows ({sum('messages' in r for r in train)} messages), "
          f"validation {len(val)} rows ({sum('messages' in r for r in val)} messages) -> {OUT}")


if __name__ == "__main__":
    main()
