"""Finding personal data in text with Microsoft Presidio, offline.

Presidio's pattern recognizers (e-mail, phone, credit card, IBAN, IP address, URL, national ids, ...)
need no model. Its context words ("phone", "ssn", "card" near a match raise the score) need tokens and
lemmas; without a trained spaCy model, ``TokenNlpEngine`` gives them from spaCy's blank English
tokenizer (lower-cased words stand in for lemmas, enough for context words). Names, places and
organisations need a named-entity model: a spaCy model when one is installed (``en_core_web_lg``,
``_md``, ``_sm``, ``_trf``), or a transformers token-classification model (a local folder or a Hub
id, ``ner_model``). ``Analyzer.info`` says which recognizers ran and whether names were looked for.

Presidio returns overlapping candidates (an IP address is also a weak phone number, an e-mail's
domain also a URL); ``find`` keeps, of overlapping ones, the highest score (then the longest), the
rule Presidio's anonymizer applies, so each piece of text is counted once and scrubbed once.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_THRESHOLD = 0.4  # a bare phone number scores 0.4; context words lift real ones higher
SPACY_MODELS = ("en_core_web_lg", "en_core_web_trf", "en_core_web_md", "en_core_web_sm")
NER_ENTITIES = ("PERSON", "LOCATION", "ORGANIZATION", "NRP")


@dataclass(frozen=True)
class Finding:
    entity: str
    start: int
    end: int
    score: float


def _offline_tldextract() -> None:
    """The e-mail recognizer checks domains with tldextract, which would fetch the public suffix list
    from the internet on first use; its bundled copy is enough."""
    import tldextract.tldextract as tld

    tld.TLD_EXTRACTOR = tld.TLDExtract(suffix_list_urls=())


def is_spacy_folder(name: str) -> bool:
    """A spaCy pipeline saved to a folder (config.cfg and meta.json), e.g. an unpacked en_core_web_sm."""
    folder = Path(name).expanduser()
    return (folder / "config.cfg").is_file() and (folder / "meta.json").is_file()


def installed_spacy_model() -> str | None:
    for name in SPACY_MODELS:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def _token_engine() -> Any:
    import spacy
    from presidio_analyzer.nlp_engine import NlpArtifacts, SlimSpacyNlpEngine

    class TokenNlpEngine(SlimSpacyNlpEngine):
        """Tokens from spaCy's blank English pipeline, lower-cased words as lemmas, no entities."""

        def __init__(self) -> None:
            super().__init__(models=[{"lang_code": "en", "model_name": "blank"}], auto_download=False)

        def load(self) -> None:
            self.nlp = {"en": spacy.blank("en")}

        def _doc_to_nlp_artifact(self, doc: Any, language: str) -> Any:
            return NlpArtifacts(entities=[], tokens=doc, tokens_indices=[t.idx for t in doc],
                                lemmas=[t.lower_ for t in doc], nlp_engine=self, language=language, scores=[])

    engine = TokenNlpEngine()
    engine.load()
    return engine


class Analyzer:
    """One Presidio AnalyzerEngine, built once per job; ``find(text)`` gives non-overlapping findings."""

    def __init__(self, entities: list[str] | None = None, threshold: float = DEFAULT_THRESHOLD,
                 ner_model: str | None = None):
        logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)  # it warns per unused language
        _offline_tldextract()
        from presidio_analyzer import AnalyzerEngine, RecognizerRegistry

        self.threshold = threshold
        if ner_model and is_spacy_folder(ner_model):  # a spaCy pipeline folder: people and places through spaCy
            spacy_model, ner_model = str(Path(ner_model).expanduser().resolve()), None
        else:
            spacy_model = None if ner_model else installed_spacy_model()
        if spacy_model:
            from presidio_analyzer.nlp_engine import SpacyNlpEngine

            nlp = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": spacy_model}])
            nlp.load()
            ner = {"ran": True, "model": spacy_model, "how": "spaCy"}
        else:
            nlp = _token_engine()
            ner = {"ran": False, "why": "no named-entity model: install a spaCy English model "
                                        "(python -m spacy download en_core_web_sm) or name a transformers "
                                        "NER model (ner_model) to find people, places and organisations"}
        registry = RecognizerRegistry(supported_languages=["en"])
        registry.load_predefined_recognizers(languages=["en"], nlp_engine=nlp)
        if not spacy_model:  # the spaCy recognizer only relays a model's entities; there are none
            registry.remove_recognizer("SpacyRecognizer")
        if ner_model:
            from presidio_analyzer.predefined_recognizers import HuggingFaceNerRecognizer

            registry.add_recognizer(HuggingFaceNerRecognizer(model_name=ner_model, device="cpu"))
            ner = {"ran": True, "model": ner_model, "how": "transformers"}
        self.engine = AnalyzerEngine(nlp_engine=nlp, registry=registry, supported_languages=["en"])
        supported = sorted({e for r in registry.recognizers for e in r.supported_entities})
        unknown = sorted(set(entities or []) - set(supported))
        if unknown:
            raise ValueError(f"Unknown entity type(s) {', '.join(unknown)}; this scan knows {', '.join(supported)}")
        self.entities = sorted(entities) if entities else supported
        self.info = {
            "presidio": _version("presidio-analyzer"),
            "recognizers": sorted({type(r).__name__ for r in registry.recognizers
                                   if set(r.supported_entities) & set(self.entities)}),
            "entities": self.entities, "threshold": threshold, "ner": ner,
        }

    def find(self, text: str) -> list[Finding]:
        if not text or not text.strip():
            return []
        results = self.engine.analyze(text=text, language="en", entities=self.entities,
                                      score_threshold=self.threshold)
        return resolve_overlaps([Finding(r.entity_type, r.start, r.end, float(r.score)) for r in results])


def resolve_overlaps(found: list[Finding]) -> list[Finding]:
    """Of overlapping findings keep the highest score, then the longest; in text order."""
    kept: list[Finding] = []
    for f in sorted(found, key=lambda f: (-f.score, -(f.end - f.start), f.start)):
        if all(f.end <= k.start or f.start >= k.end for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: f.start)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
