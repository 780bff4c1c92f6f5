"""pydantic's validation wording in plain words, with the field's on-screen label in front.

"Input should be greater than or equal to 1" under a field called Batch size reads
"Batch size must be at least 1.": what a user of the window needs, where the CLI keeps
pydantic's own words and the job-file keys. Plain Python, for every form of the GUI.
"""

from __future__ import annotations

import re

# pydantic's wording -> plain words, with the field's label in front.
BOUNDS = (
    (re.compile(r"^Input should be greater than or equal to (\S+)$"), "must be at least {0}"),
    (re.compile(r"^Input should be greater than (\S+)$"), "must be more than {0}"),
    (re.compile(r"^Input should be less than or equal to (\S+)$"), "must be at most {0}"),
    (re.compile(r"^Input should be less than (\S+)$"), "must be less than {0}"),
    (re.compile(r"^Input should be a valid number.*$"), "must be a number, such as 0.0005"),
    (re.compile(r"^Input should be a valid integer.*$"), "must be a whole number"),
    (re.compile(r"^Field required$"), "is required"),
)



def plain_message(label: str, message: str) -> str | None:
    """``message`` as "<label> must be …", or None when it is not one of pydantic's bound messages."""
    for pattern, words in BOUNDS:
        match = pattern.match(message.strip())
        if match:
            return f"{label} {words.format(*match.groups())}."
    return None
