"""Replacing what a scan found, with Presidio's anonymizer, one mode per entity type.

- ``mask``: every character becomes ``*`` (the length stays);
- ``tag``: the type in angle brackets, ``<EMAIL_ADDRESS>``;
- ``fake``: a realistic stand-in from Faker, the same for the same value everywhere (seeded by a keyed
  hash of type and value), so "the same person stays the same person" across rows and files;
- ``hash``: sha256 of the value with the engine's secret salt (Presidio's hash operator): the same value
  gives the same digest within one engine, and the salt keeps a digest from being looked up.

The salt lives in the engine's data folder (``secrets/pii-salt``, made on first use, mode 0600), never in
a spec, a log or the audit log.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import string
from pathlib import Path
from typing import Any

from engine.pii.analyzer import Finding

MODES = ("mask", "tag", "fake", "hash")
SALT_FILE = Path("secrets") / "pii-salt"

# Faker providers by Presidio entity type; the rest keep their shape with random characters.
FAKER = {
    "PERSON": "name", "EMAIL_ADDRESS": "safe_email", "PHONE_NUMBER": "phone_number",
    "CREDIT_CARD": "credit_card_number", "IBAN_CODE": "iban", "IP_ADDRESS": "ipv4_private",
    "URL": "url", "US_SSN": "ssn", "LOCATION": "city", "ORGANIZATION": "company", "NRP": "country",
    "DATE_TIME": "date", "MAC_ADDRESS": "mac_address", "UUID": "uuid4",
}


def load_salt(data_dir: Path) -> bytes:
    path = data_dir / SALT_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32).hex().encode())
    return path.read_bytes().strip()


def _same_shape(value: str, rng: random.Random) -> str:
    return "".join(rng.choice(string.digits) if ch.isdigit() else
                   rng.choice(string.ascii_uppercase if ch.isupper() else string.ascii_lowercase) if ch.isalpha()
                   else ch for ch in value)


class Scrubber:
    def __init__(self, modes: dict[str, str], default_mode: str, salt: bytes):
        from faker import Faker
        from presidio_anonymizer import AnonymizerEngine

        bad = {e: m for e, m in {**modes, "(default)": default_mode}.items() if m not in MODES}
        if bad:
            raise ValueError(f"Unknown scrub mode(s) {bad}; modes are {', '.join(MODES)}")
        self.modes, self.default_mode, self.salt = modes, default_mode, salt
        self.faker = Faker("en_US")
        self.anonymizer = AnonymizerEngine()
        self.fakes: dict[tuple[str, str], str] = {}

    def mode(self, entity: str) -> str:
        return self.modes.get(entity, self.default_mode)

    def fake(self, entity: str, value: str) -> str:
        key = (entity, value)
        if key not in self.fakes:
            seed = int.from_bytes(hmac.new(self.salt, f"{entity}\0{value}".encode(), hashlib.sha256).digest()[:8])
            self.faker.seed_instance(seed)
            provider = FAKER.get(entity)
            out = str(getattr(self.faker, provider)()) if provider else _same_shape(value, random.Random(seed))
            self.fakes[key] = out if out != value else _same_shape(value, random.Random(seed + 1))
        return self.fakes[key]

    def _operator(self, entity: str) -> Any:
        from presidio_anonymizer.entities import OperatorConfig

        mode = self.mode(entity)
        if mode == "mask":
            return OperatorConfig("mask", {"masking_char": "*", "chars_to_mask": 1 << 30, "from_end": False})
        if mode == "tag":
            return OperatorConfig("replace", {"new_value": f"<{entity}>"})
        if mode == "hash":
            return OperatorConfig("hash", {"hash_type": "sha256", "salt": self.salt})
        return OperatorConfig("custom", {"lambda": lambda value, e=entity: self.fake(e, value)})

    def scrub(self, text: str, found: list[Finding]) -> str:
        if not found:
            return text
        from presidio_anonymizer.entities import RecognizerResult

        results = [RecognizerResult(f.entity, f.start, f.end, f.score) for f in found]
        operators = {e: self._operator(e) for e in {f.entity for f in found}}
        return self.anonymizer.anonymize(text=text, analyzer_results=results, operators=operators).text


def masked_example(value: str) -> str:
    """What the scan shows of a finding: its first character and its separators, the rest dotted out."""
    return "".join(ch if i == 0 or not ch.isalnum() else "•" for i, ch in enumerate(value))
