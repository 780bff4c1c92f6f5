"""The specs of a PII scan and a scrub (docs/privacy.md). Stdlib + pydantic: the GUI imports this module."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.api.resources import NAME_OR_PATH, READ, WRITE, resource

SCRUB_MODES = ("mask", "tag", "fake", "hash")
ScrubMode = Literal["mask", "tag", "fake", "hash"]
ENTITY = r"^[A-Z][A-Z0-9_]{1,40}$"
# Scrub modes in words: the Data step, the CLI's help.
MODE_WORDS = {
    "mask": "mask: every character becomes *",
    "tag": "tag: replaced by its type, <EMAIL_ADDRESS>",
    "fake": "fake: a realistic stand-in, the same one for the same value everywhere",
    "hash": "hash: sha256 with the engine's secret salt",
}


class PiiScanSpec(BaseModel):
    """pii.scan: look for personal data in a CSV/TSV/JSONL file or an image folder's metadata."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., json_schema_extra=resource(READ), min_length=1, max_length=4096, description="the data file, or a folder of images")
    entities: list[str] | None = Field(None, max_length=100, description="entity types to look for (Presidio's "
                                       "names, e.g. EMAIL_ADDRESS); None = every type the recognizers know")
    threshold: float = Field(0.4, ge=0.0, le=1.0, description="the lowest Presidio score that counts as a finding")
    ner_model: str | None = Field(None, json_schema_extra=resource(NAME_OR_PATH), max_length=500, description="a transformers token-classification model "
                                  "(local folder or Hub id), or a spaCy pipeline folder, for people, places and "
                                  "organisations; None = a spaCy model when one is installed")

    @field_validator("entities")
    @classmethod
    def _entity_names(cls, v: list[str] | None) -> list[str] | None:
        _check_entities(v or [])
        return v


class PiiScrubSpec(PiiScanSpec):
    """pii.scrub: write a copy of the data with what a scan finds replaced; the original is never changed."""

    default_mode: ScrubMode = Field("tag", description="how to replace a finding of a type not in modes")
    modes: dict[str, ScrubMode] = Field(default_factory=dict, max_length=100,
                                        description="the mode per entity type, e.g. {PERSON: fake, EMAIL_ADDRESS: hash}")
    output: str | None = Field(None, json_schema_extra=resource(WRITE), max_length=4096, description="where to write the copy; None = in the job's "
                                                                  "folder, <name>.scrubbed<suffix>")

    @field_validator("modes")
    @classmethod
    def _mode_names(cls, v: dict[str, str]) -> dict[str, str]:
        _check_entities(list(v))
        return v


def _check_entities(names: list[str]) -> None:
    for e in names:
        if not re.match(ENTITY, e):
            raise ValueError(f"{e!r} is not an entity type name (capitals and _, like EMAIL_ADDRESS)")
