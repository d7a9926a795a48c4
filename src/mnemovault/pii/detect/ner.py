"""The optional named-entity detector, :class:`OptionalNerDetector` (Presidio + an
installed spaCy model, the ``ner`` extra), and :class:`NerUnavailableError`. Presidio and
spaCy are imported only when the detector is constructed; nothing is ever downloaded."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

from mnemovault.pii.detect.base import KIND_RE, Finding, _is_word

# ---------------------------------------------------------------------------------------
# Optional NER (the ``ner`` extra)
# ---------------------------------------------------------------------------------------

NER_EXTRA = "ner"


class NerUnavailableError(ImportError):
    """The optional NER detector cannot run: ``presidio-analyzer``/spaCy are not installed
    (``pip install 'mnemovault[ner]'``) or the named spaCy model package is not."""


DEFAULT_NER_KINDS: Mapping[str, str] = {"PERSON": "person", "LOCATION": "location"}


class OptionalNerDetector:
    """Named entities from Presidio's spaCy NLP engine (extra ``ner``: presidio-analyzer
    >= 2.2.33, whose ``SpacyNlpEngine`` takes a model list and returns entity scores, plus
    a spaCy model package the deployer installs), off by default.

    ``model`` is an installed spaCy pipeline package name or a path to one; ``kinds`` maps
    Presidio entity types (``PERSON``, ``LOCATION``, ``ORGANIZATION``, ``NRP``...) to our
    kinds; entities scoring below ``min_score`` are dropped. The model is loaded here with
    ``spacy.load``; Presidio's own loader is bypassed because it downloads missing models,
    and mnemovault never downloads one. Raises :class:`NerUnavailableError` (an
    ``ImportError``) naming the extra when presidio/spaCy or the model is missing.
    """

    name = "ner"

    def __init__(
        self,
        model: str = "en_core_web_sm",
        *,
        language: str = "en",
        kinds: Mapping[str, str] | None = None,
        min_score: float = 0.5,
    ) -> None:
        try:
            import spacy
            from presidio_analyzer.nlp_engine import SpacyNlpEngine
        except ImportError as exc:
            raise NerUnavailableError(
                "OptionalNerDetector needs the optional 'ner' extra: "
                "pip install 'mnemovault[ner]' and a spaCy model package"
            ) from exc
        if not Path(model).exists() and importlib.util.find_spec(model) is None:
            raise NerUnavailableError(
                f"spaCy model {model!r} is not installed (mnemovault never downloads models): "
                "install the model package, or pass the path of a model directory"
            )
        self.kinds = dict(kinds if kinds is not None else DEFAULT_NER_KINDS)
        for kind in self.kinds.values():
            if not KIND_RE.match(kind):
                raise ValueError("OptionalNerDetector: kinds must match [a-z][a-z_]{0,31}")
        self.language = language
        self.min_score = min_score
        self._engine = SpacyNlpEngine(models=[{"lang_code": language, "model_name": model}])
        # never engine.load(): it downloads missing models
        self._engine.nlp = {language: spacy.load(model)}  # type: ignore[assignment,unused-ignore]

    def detect(self, text: str) -> list[Finding]:
        artifacts = self._engine.process_text(text, self.language)
        out: list[Finding] = []
        for ent, score in zip(artifacts.entities, artifacts.scores, strict=False):
            kind = self.kinds.get(ent.label_)
            if kind is None or score < self.min_score:
                continue
            start, end = ent.start_char, ent.end_char
            # spaCy spans can carry surrounding whitespace or punctuation; trim to words
            while start < end and not _is_word(text[start]):
                start += 1
            while end > start and not _is_word(text[end - 1]):
                end -= 1
            if start < end:
                out.append(
                    Finding(start, end, kind, text[start:end], min(float(score), 1.0), self.name)
                )
        return out
