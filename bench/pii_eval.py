#!/usr/bin/env python
"""Precision/recall/F1 of mnemovault's structured PII detectors next to Presidio's own
predefined pattern recognizers, per entity type, on the same texts in the same run.

Data: presidio-research's ``synth_dataset_v2.json`` (1,500 synthetic texts with labelled
character spans), read from ``<workspace>/shared/datasets/presidio_research/``. Scored types:
EMAIL_ADDRESS, PHONE_NUMBER, CREDIT_CARD, IBAN_CODE, IP_ADDRESS.

Systems (issue 3, "Measurements"):

- ``mnemovault``: ``mnemovault.pii.detect.default_detectors`` with the product's default
  settings (``Settings.phone_default_region`` and ``phone_fallback_regions`` field defaults,
  environment ignored), resolved by ``detect_all`` as the write path does.
- ``presidio``: presidio-analyzer's ``EmailRecognizer``, ``PhoneRecognizer``,
  ``CreditCardRecognizer``, ``IbanRecognizer`` and ``IpRecognizer`` instantiated directly
  with their defaults and called with ``analyze(text, entities, nlp_artifacts=None)``;
  regex and checksum only: no NLP engine, no spaCy model, no network (tldextract, which the
  email recognizer uses, is pinned to its bundled public-suffix snapshot, and outbound
  sockets are refused for the whole run). Their results are merged the way
  ``AnalyzerEngine`` merges them (``EntityRecognizer.remove_duplicates``: zero scores and
  same-type contained spans dropped; score threshold 0).
- ``presidio_resolved`` (secondary): the same Presidio results passed through our
  ``detect_all`` overlap resolution (longest span, then score), so a cross-type overlap such
  as a card number also read as a phone is settled for Presidio as it is for us.

Span matching, the same for every system: predictions are taken in text order; a prediction
of type T is a true positive if it overlaps (shares at least one character with) a gold span
of type T not already matched, each gold span matching at most one prediction. Any other
prediction of a scored type is a false positive (also one that lands on a gold span of an
unscored type, e.g. a phone read inside a US_SSN). Unmatched gold spans are false negatives.
``tp_exact`` counts true positives with identical offsets.

Phone labels: each PHONE_NUMBER label is parsed with every region phonenumbers knows (and
with none, for ``+`` numbers); labels valid in no region are reported apart.
``PHONE_NUMBER`` scores all labels; ``PHONE_NUMBER_valid`` scores only the valid labels
(predictions that overlap an invalid label are then neither true nor false positives);
``phone_labels`` gives each system's recall over the invalid labels alone.

Targets (issue 3): precision and recall at least Presidio's on every scored type, and card
recall 1.0. Examples of gold spans Presidio finds and we miss (and the reverse), and of
false positives, are listed under ``differences``.

Classes (issue 9, fault 5; section ``classes`` of the JSON): a small hand-written labelled
set, ``bench/data/pii_classes.json`` (see its ``description``), one group of cases per
class of miss: several values of one kind in a row (``in_a_row``), one value written in
several formats (``multi_format``), obfuscation inside a value (``obfuscation``), formats
that were missed (``formats``) and false findings (``false_findings``), negatives
included (cases without gold). Scored for the same two systems on the same cases, per
class, with ``exact`` matching (a true positive has the gold span's offsets exactly: a
phone span that swallowed a postal code, or a value half covered, is a false positive
and a false negative) and, for reference, ``overlap`` matching as above. Cases with
``known`` values (PERSON) give them to both systems: ours as a ``KnownEntityDetector``
first in the list (as the write path has its index), Presidio as a deny-list
``PatternRecognizer``. ``identity`` reports, for ours, how many groups of cases that
write one value differently got one identity (one vault entry); Presidio has no such
notion. The class set runs in ``--quick`` too (it is ~110 short texts).

Usage::

    python bench/pii_eval.py                                  # all 1,500 texts + classes
    python bench/pii_eval.py --quick                          # first 100 texts + classes
    python bench/pii_eval.py --out bench/results/pii_eval.json

JSON on stdout (and ``--out``), progress on stderr. Without presidio-analyzer installed the
JSON says so and reports our side only.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import phonenumbers
from _common import skip_without

from mnemovault.pii.detect import (
    Detector,
    Finding,
    KnownEntityDetector,
    default_detectors,
    detect_all,
)

DATASET = (
    Path(__file__).resolve().parents[2] / "shared/datasets/presidio_research/synth_dataset_v2.json"
)
KIND_TO_TYPE = {
    "email": "EMAIL_ADDRESS",
    "phone": "PHONE_NUMBER",
    "card": "CREDIT_CARD",
    "iban": "IBAN_CODE",
    "ip": "IP_ADDRESS",
}
TYPE_TO_KIND = {v: k for k, v in KIND_TO_TYPE.items()}
TYPES = list(KIND_TO_TYPE.values())
CLASSES_DATA = Path(__file__).resolve().parent / "data" / "pii_classes.json"
CLASSES = ["in_a_row", "multi_format", "obfuscation", "formats", "false_findings"]
CLASS_TYPES = [*TYPES, "PERSON"]
PRESIDIO_RECOGNIZERS = [
    "EmailRecognizer",
    "PhoneRecognizer",
    "CreditCardRecognizer",
    "IbanRecognizer",
    "IpRecognizer",
]
PRESIDIO_MISSING_NOTE = (
    "presidio-analyzer is not importable ({error}); only mnemovault's figures are reported. "
    "Install it with `pip install presidio-analyzer` (the `bench` extra) to compare."
)


@dataclass(frozen=True, slots=True)
class Pred:
    start: int
    end: int
    type: str
    score: float


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# No network
# ---------------------------------------------------------------------------------------


def forbid_network() -> None:
    """Refuse outbound IP connections for the rest of the process (Unix sockets and loopback
    stay allowed: the embedded PostgreSQL of pii_speed uses them)."""
    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = str(address[0])
            if host not in ("127.0.0.1", "::1", "localhost"):
                raise OSError(f"bench: network access refused ({host})")
        return original(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------


def load(path: Path, limit: int | None) -> list[dict[str, Any]]:
    if not path.is_file():
        sys.exit(
            f"dataset not found: {path}\n"
            "expected presidio-research's synth_dataset_v2.json under "
            "../shared/datasets/presidio_research/ (see shared/datasets/README.md)"
        )
    with path.open(encoding="utf-8") as fh:
        data: list[dict[str, Any]] = json.load(fh)
    return data[:limit] if limit else data


def phone_valid_anywhere(value: str) -> bool:
    """Is ``value`` a valid number in some region (or as written, with ``+``)?"""
    for region in [None, *sorted(phonenumbers.SUPPORTED_REGIONS)]:
        try:
            num = phonenumbers.parse(value, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(num):
            return True
    return False


# ---------------------------------------------------------------------------------------
# The systems
# ---------------------------------------------------------------------------------------


def product_phone_settings() -> tuple[str | None, list[str]]:
    """The phone settings the product ships with (field defaults, environment ignored)."""
    from mnemovault.config import Settings

    fields = Settings.model_fields
    region = fields["phone_default_region"].default
    factory = fields["phone_fallback_regions"].default_factory
    fallback = list(factory()) if factory is not None else []
    return region, fallback


def our_detectors() -> list[Detector]:
    region, fallback = product_phone_settings()
    return default_detectors(region, fallback_regions=fallback)


def ours(text: str, detectors: Sequence[Detector]) -> list[Pred]:
    return [
        Pred(f.start, f.end, KIND_TO_TYPE[f.kind], f.confidence)
        for f in detect_all(text, detectors)
        if f.kind in KIND_TO_TYPE
    ]


class Presidio:
    """Presidio's predefined pattern recognizers, called directly (no AnalyzerEngine, so no
    NLP engine and no model)."""

    def __init__(self) -> None:
        import tldextract
        import tldextract.tldextract as tldmod

        # The email recognizer calls tldextract.extract(), whose default extractor fetches
        # the public suffix list over HTTP: use the bundled snapshot only.
        tldmod.TLD_EXTRACTOR = tldextract.TLDExtract(cache_dir=None, suffix_list_urls=())
        import presidio_analyzer
        from presidio_analyzer import EntityRecognizer
        from presidio_analyzer.predefined_recognizers import (
            CreditCardRecognizer,
            EmailRecognizer,
            IbanRecognizer,
            IpRecognizer,
            PhoneRecognizer,
        )

        self.version = getattr(presidio_analyzer, "__version__", None) or _dist_version(
            "presidio-analyzer"
        )
        self._dedupe = EntityRecognizer.remove_duplicates
        self.recognizers: list[Any] = [
            EmailRecognizer(),
            PhoneRecognizer(),
            CreditCardRecognizer(),
            IbanRecognizer(),
            IpRecognizer(),
        ]
        self.phone_regions = list(self.recognizers[1].supported_regions)

    def results(self, text: str, recognizers: Sequence[Any] | None = None) -> list[Any]:
        out: list[Any] = []
        for r in recognizers if recognizers is not None else self.recognizers:
            out += r.analyze(text, r.supported_entities, None)
        return self._dedupe(out)

    def __call__(self, text: str) -> list[Pred]:
        return [
            Pred(r.start, r.end, r.entity_type, float(r.score))
            for r in sorted(self.results(text), key=lambda r: (r.start, r.end))
            if r.entity_type in TYPE_TO_KIND
        ]

    def as_detector(self) -> Detector:
        return _PresidioDetector(self)


class _PresidioDetector:
    """Presidio's results as one of our detectors, for ``detect_all``'s overlap rule."""

    name = "presidio"

    def __init__(self, presidio: Presidio) -> None:
        self._p = presidio

    def detect(self, text: str) -> list[Finding]:
        return [
            Finding(
                p.start,
                p.end,
                TYPE_TO_KIND[p.type],
                text[p.start : p.end],
                min(max(p.score, 0.0), 1.0),
                self.name,
            )
            for p in self._p(text)
        ]


def load_presidio() -> tuple[Presidio | None, str | None]:
    try:
        return Presidio(), None
    except ImportError as exc:
        return None, PRESIDIO_MISSING_NOTE.format(error=exc)


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------

GoldKey = tuple[int, int, int, str]  # text index, start, end, type


def _snippet(text: str, start: int, end: int, pad: int = 30) -> str:
    a, b = max(0, start - pad), min(len(text), end + pad)
    return (
        ("…" if a else "")
        + text[a:start]
        + "⟦"
        + text[start:end]
        + "⟧"
        + text[end:b]
        + ("…" if b < len(text) else "")
    ).replace("\n", "⏎")


def score(
    texts: list[dict[str, Any]], preds: list[list[Pred]], invalid_phone: set[GoldKey]
) -> dict[str, Any]:
    """Per type and for valid phone labels: counts, P/R/F1; the gold keys matched; the false
    positives (text index, start, end, type, gold types there)."""
    rows = [*TYPES, "PHONE_NUMBER_valid"]
    tp: Counter[str] = Counter()
    tp_exact: Counter[str] = Counter()
    npred: Counter[str] = Counter()
    ngold: Counter[str] = Counter()
    matched: set[GoldKey] = set()
    fps: list[tuple[int, int, int, str, list[str]]] = []
    for i, (item, ps) in enumerate(zip(texts, preds, strict=True)):
        gold = [(s["start_position"], s["end_position"], s["entity_type"]) for s in item["spans"]]
        for s, e, t in gold:
            if t in TYPES:
                ngold[t] += 1
                if t == "PHONE_NUMBER" and (i, s, e, t) not in invalid_phone:
                    ngold["PHONE_NUMBER_valid"] += 1
        used: set[int] = set()
        for pr in sorted(ps, key=lambda x: (x.start, x.end)):
            if pr.type not in TYPES:
                continue
            npred[pr.type] += 1
            hit = next(
                (
                    j
                    for j, (s, e, t) in enumerate(gold)
                    if j not in used and t == pr.type and pr.start < e and s < pr.end
                ),
                None,
            )
            on_invalid = pr.type == "PHONE_NUMBER" and any(
                (i, s, e, t) in invalid_phone
                for s, e, t in gold
                if t == "PHONE_NUMBER" and pr.start < e and s < pr.end
            )
            if pr.type == "PHONE_NUMBER" and not on_invalid:
                npred["PHONE_NUMBER_valid"] += 1
            if hit is None:
                here = sorted({t for s, e, t in gold if pr.start < e and s < pr.end})
                fps.append((i, pr.start, pr.end, pr.type, here))
                continue
            used.add(hit)
            s, e, t = gold[hit]
            matched.add((i, s, e, t))
            exact = (pr.start, pr.end) == (s, e)
            tp[t] += 1
            tp_exact[t] += exact
            if t == "PHONE_NUMBER" and (i, s, e, t) not in invalid_phone:
                tp["PHONE_NUMBER_valid"] += 1
                tp_exact["PHONE_NUMBER_valid"] += exact
    table: dict[str, Any] = {}
    for t in rows:
        p = tp[t] / npred[t] if npred[t] else None
        r = tp[t] / ngold[t] if ngold[t] else None
        f1 = 2 * p * r / (p + r) if p is not None and r is not None and p + r else None
        table[t] = {
            "gold": ngold[t],
            "predicted": npred[t],
            "tp": tp[t],
            "tp_exact": tp_exact[t],
            "fp": npred[t] - tp[t],
            "fn": ngold[t] - tp[t],
            "precision": _r(p),
            "recall": _r(r),
            "f1": _r(f1),
        }
    micro_tp = sum(tp[t] for t in TYPES)
    micro_pred = sum(npred[t] for t in TYPES)
    micro_gold = sum(ngold[t] for t in TYPES)
    p = micro_tp / micro_pred if micro_pred else None
    r = micro_tp / micro_gold if micro_gold else None
    f1 = 2 * p * r / (p + r) if p is not None and r is not None and p + r else None
    table["micro"] = {"precision": _r(p), "recall": _r(r), "f1": _r(f1)}
    return {"table": table, "matched": matched, "fps": fps}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def targets(our: dict[str, Any], ref: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 3's targets: P and R >= Presidio's per type, card recall 1.0."""
    out: dict[str, Any] = {}
    ok = True
    for t in [*TYPES, "PHONE_NUMBER_valid"]:
        row: dict[str, Any] = {}
        if ref is not None:
            for m in ("precision", "recall"):
                a, b = our[t][m], ref[t][m]
                row[f"{m}_at_least_presidio"] = None if a is None or b is None else a >= b
            if t in TYPES:
                ok = ok and all(v is not False for v in row.values())
        out[t] = row
    card = our["CREDIT_CARD"]["recall"]
    out["card_recall_1"] = card == 1.0
    out["all_met"] = (ok and card == 1.0) if ref is not None else None
    return out


def differences(
    texts: list[dict[str, Any]],
    a: dict[str, Any],
    b: dict[str, Any],
    limit: int,
) -> dict[str, list[str]]:
    """Gold spans matched by ``b`` and not by ``a``, per type, with context."""
    out: dict[str, list[str]] = {}
    for i, s, e, t in sorted(b["matched"] - a["matched"]):
        lst = out.setdefault(t, [])
        if len(lst) < limit:
            lst.append(_snippet(texts[i]["full_text"], s, e))
    return out


def fp_examples(
    texts: list[dict[str, Any]], sc: dict[str, Any], limit: int
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i, s, e, t, here in sc["fps"]:
        lst = out.setdefault(t, [])
        if len(lst) < limit:
            lst.append(f"{_snippet(texts[i]['full_text'], s, e)} (gold here: {here or 'none'})")
    return out


def fn_examples(
    texts: list[dict[str, Any]], sc: dict[str, Any], limit: int
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i, item in enumerate(texts):
        for g in item["spans"]:
            key = (i, g["start_position"], g["end_position"], g["entity_type"])
            if key[3] in TYPES and key not in sc["matched"]:
                lst = out.setdefault(key[3], [])
                if len(lst) < limit:
                    lst.append(_snippet(item["full_text"], key[1], key[2]))
    return out


# ---------------------------------------------------------------------------------------
# Classes (issue 9, fault 5): the hand-written labelled set
# ---------------------------------------------------------------------------------------


def load_classes(path: Path) -> list[dict[str, Any]]:
    """The cases of ``path`` with their gold ``spans`` ``(start, end, type)``: each gold value
    is searched in the text from the end of the previous one."""
    with path.open(encoding="utf-8") as fh:
        cases: list[dict[str, Any]] = json.load(fh)["cases"]
    for case in cases:
        pos, spans = 0, []
        for typ, value in case["gold"]:
            start = case["text"].index(value, pos)
            spans.append((start, start + len(value), typ))
            pos = start + len(value)
        case["spans"] = spans
        if case["class"] not in CLASSES:
            raise ValueError(f"{path}: unknown class {case['class']!r}")
    return cases


def ours_on_case(case: dict[str, Any], detectors: Sequence[Detector]) -> list[tuple[Pred, str]]:
    """Our findings on one case, with their identities."""
    dets = list(detectors)
    if case.get("known"):
        dets.insert(0, KnownEntityDetector([("person", v) for v in case["known"]]))
    out = []
    for f in detect_all(case["text"], dets):
        typ = "PERSON" if f.kind == "person" else KIND_TO_TYPE.get(f.kind)
        if typ is not None:
            out.append((Pred(f.start, f.end, typ, f.confidence), f.identity))
    return out


def presidio_on_case(case: dict[str, Any], presidio: Presidio) -> list[Pred]:
    """Presidio's pattern recognizers on one case, plus a deny-list recognizer of the case's
    known values (Presidio's way of being told values), merged as ``AnalyzerEngine`` does."""
    recognizers = list(presidio.recognizers)
    if case.get("known"):
        from presidio_analyzer import PatternRecognizer

        recognizers.append(PatternRecognizer(supported_entity="PERSON", deny_list=case["known"]))
    return [
        Pred(r.start, r.end, r.entity_type, float(r.score))
        for r in sorted(presidio.results(case["text"], recognizers), key=lambda r: r.start)
        if r.entity_type in CLASS_TYPES
    ]


def score_classes(
    cases: list[dict[str, Any]], preds: list[list[Pred]], *, exact: bool, limit: int = 6
) -> dict[str, Any]:
    """Per class and over all classes: gold, predicted, tp, P/R/F1; a few false positives
    and false negatives per class (with context)."""
    tp: Counter[str] = Counter()
    npred: Counter[str] = Counter()
    ngold: Counter[str] = Counter()
    fps: dict[str, list[str]] = {}
    fns: dict[str, list[str]] = {}
    for case, ps in zip(cases, preds, strict=True):
        cls, text, gold = case["class"], case["text"], case["spans"]
        ngold[cls] += len(gold)
        used: set[int] = set()
        for pr in sorted(ps, key=lambda x: (x.start, x.end)):
            npred[cls] += 1
            hit = next(
                (
                    j
                    for j, (s, e, t) in enumerate(gold)
                    if j not in used
                    and t == pr.type
                    and ((pr.start, pr.end) == (s, e) if exact else pr.start < e and s < pr.end)
                ),
                None,
            )
            if hit is None:
                lst = fps.setdefault(cls, [])
                if len(lst) < limit:
                    lst.append(f"{pr.type}: {_visible(_snippet(text, pr.start, pr.end, 20))}")
                continue
            used.add(hit)
            tp[cls] += 1
        for j, (s, e, t) in enumerate(gold):
            if j not in used:
                lst = fns.setdefault(cls, [])
                if len(lst) < limit:
                    lst.append(f"{t}: {_visible(_snippet(text, s, e, 20))}")
    table: dict[str, Any] = {}
    for cls in [*CLASSES, "all"]:
        if cls == "all":
            t, n, g = sum(tp.values()), sum(npred.values()), sum(ngold.values())
        else:
            t, n, g = tp[cls], npred[cls], ngold[cls]
        p = t / n if n else None
        r = t / g if g else None
        f1 = 2 * p * r / (p + r) if p is not None and r is not None and p + r else None
        table[cls] = {"gold": g, "predicted": n, "tp": t, "precision": _r(p), "recall": _r(r),
                      "f1": _r(f1)}
    return {"table": table, "false_positives": fps, "false_negatives": fns}


def _visible(text: str) -> str:
    """``text`` with invisible and unusual space characters written as ``\\uXXXX``."""
    return "".join(
        f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cf", "Cc", "Zs") and ch != " "
        else ch
        for ch in text
    )


def identity_groups(cases: list[dict[str, Any]],
                    found: list[list[tuple[Pred, str]]]) -> dict[str, Any]:
    """For ours: per group of cases that write one value differently, the identities of the
    findings on the gold spans; a group is consistent if all its gold spans were found
    exactly and share one identity."""
    groups: dict[str, set[str | None]] = {}
    for case, fs in zip(cases, found, strict=True):
        if not case.get("group"):
            continue
        ids = groups.setdefault(case["group"], set())
        for s, e, t in case["spans"]:
            ids.add(next((i for p, i in fs if (p.start, p.end, p.type) == (s, e, t)), None))
    consistent = sorted(g for g, ids in groups.items() if len(ids) == 1 and None not in ids)
    return {
        "groups": len(groups),
        "one_identity": len(consistent),
        "identities": {g: sorted(i or "(not found)" for i in ids) for g, ids in groups.items()},
    }


def run_classes(path: Path, detectors: Sequence[Detector],
                presidio: Presidio | None) -> dict[str, Any]:
    cases = load_classes(path)
    log(f"classes: {len(cases)} cases from {path}")
    t0 = time.perf_counter()
    found = [ours_on_case(c, detectors) for c in cases]
    log(f"classes, mnemovault: {time.perf_counter() - t0:.2f} s")
    preds: dict[str, list[list[Pred]]] = {"mnemovault": [[p for p, _ in fs] for fs in found]}
    if presidio is not None:
        t0 = time.perf_counter()
        preds["presidio"] = [presidio_on_case(c, presidio) for c in cases]
        log(f"classes, presidio: {time.perf_counter() - t0:.2f} s")
    scored = {
        mode: {name: score_classes(cases, ps, exact=mode == "exact") for name, ps in preds.items()}
        for mode in ("exact", "overlap")
    }
    per_class: dict[str, Any] = {}
    for cls in [*CLASSES, "all"]:
        mine = [c for c in cases if cls in ("all", c["class"])]
        per_class[cls] = {
            "cases": len(mine),
            "negatives": sum(1 for c in mine if not c["spans"]),
            **{mode: {name: sc["table"][cls] for name, sc in by.items()}
               for mode, by in scored.items()},
        }
        if presidio is not None:
            a, b = per_class[cls]["exact"]["mnemovault"], per_class[cls]["exact"]["presidio"]
            per_class[cls]["exact_at_least_presidio"] = all(
                a[m] is None or b[m] is None or a[m] >= b[m] for m in ("precision", "recall"))
    try:
        data = str(path.resolve().relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        data = str(path)
    return {
        "data": data,
        "cases": len(cases),
        "gold": sum(len(c["spans"]) for c in cases),
        "matching": {
            "exact": "a prediction of type T is a true positive if it has the offsets of an "
                     "unmatched gold span of type T",
            "overlap": "as for the data set above: it overlaps an unmatched gold span of type T",
        },
        "presidio": None if presidio is None else (
            "the five pattern recognizers, plus a deny-list PatternRecognizer(PERSON) of the "
            "case's known values; remove_duplicates as AnalyzerEngine"),
        "per_class": per_class,
        "identity": {"mnemovault": identity_groups(cases, found), "presidio": None},
        "differences": {
            name: {"false_positives": sc["false_positives"],
                   "false_negatives": sc["false_negatives"]}
            for name, sc in scored["exact"].items()
        },
    }


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="first 100 texts only")
    ap.add_argument("--limit", type=int, default=None, help="first N texts")
    ap.add_argument("--examples", type=int, default=8, help="examples listed per type")
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--classes", type=Path, default=CLASSES_DATA,
                    help="the labelled class set (issue 9, fault 5)")
    args = ap.parse_args(argv)
    forbid_network()
    limit = 100 if args.quick else args.limit

    skip_without(args.dataset, benchmark="pii_eval", quick=args.quick)
    texts = load(args.dataset, limit)
    log(f"{len(texts)} texts from {args.dataset}")
    region, fallback = product_phone_settings()
    detectors = our_detectors()

    phone_gold = [
        (i, s["start_position"], s["end_position"], s["entity_type"], s["entity_value"])
        for i, item in enumerate(texts)
        for s in item["spans"]
        if s["entity_type"] == "PHONE_NUMBER"
    ]
    invalid_phone = {(i, s, e, t) for i, s, e, t, v in phone_gold if not phone_valid_anywhere(v)}
    log(f"phone labels: {len(phone_gold)}, valid in no region: {len(invalid_phone)}")

    t0 = time.perf_counter()
    our_preds = [ours(item["full_text"], detectors) for item in texts]
    log(f"mnemovault: {time.perf_counter() - t0:.2f} s")
    our_sc = score(texts, our_preds, invalid_phone)

    presidio, note = load_presidio()
    systems: dict[str, dict[str, Any]] = {"mnemovault": our_sc}
    if presidio is not None:
        t0 = time.perf_counter()
        p_preds = [presidio(item["full_text"]) for item in texts]
        log(f"presidio: {time.perf_counter() - t0:.2f} s")
        systems["presidio"] = score(texts, p_preds, invalid_phone)
        pdet = [presidio.as_detector()]
        resolved = [
            [
                Pred(f.start, f.end, KIND_TO_TYPE[f.kind], f.confidence)
                for f in detect_all(item["full_text"], pdet)
            ]
            for item in texts
        ]
        systems["presidio_resolved"] = score(texts, resolved, invalid_phone)
    else:
        log(note or "presidio unavailable")

    per_type = {
        t: {name: sc["table"][t] for name, sc in systems.items()}
        for t in [*TYPES, "PHONE_NUMBER_valid", "micro"]
    }

    def invalid_recall(sc: dict[str, Any]) -> float | None:
        if not invalid_phone:
            return None
        return _r(len(invalid_phone & sc["matched"]) / len(invalid_phone))

    ex = args.examples
    diffs: dict[str, Any] = {
        "false_positives": {name: fp_examples(texts, sc, ex) for name, sc in systems.items()},
        "false_negatives": {name: fn_examples(texts, sc, ex) for name, sc in systems.items()},
    }
    if presidio is not None:
        diffs["found_by_presidio_missed_by_mnemovault"] = differences(
            texts, our_sc, systems["presidio"], ex
        )
        diffs["found_by_mnemovault_missed_by_presidio"] = differences(
            texts, systems["presidio"], our_sc, ex
        )

    ref = systems.get("presidio")
    ref_res = systems.get("presidio_resolved")
    result: dict[str, Any] = {
        "bench": "pii_eval",
        "dataset": args.dataset.name,
        "texts": len(texts),
        "command": " ".join(
            ["python bench/pii_eval.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "matching": (
            "a prediction of type T is a true positive if it overlaps an unmatched gold span "
            "of type T (one prediction per gold span, text order); tp_exact: identical offsets"
        ),
        "systems": {
            "mnemovault": {
                "detectors": [d.name for d in detectors],
                "phone_default_region": region,
                "phone_fallback_regions": fallback,
                "overlaps": "detect_all (longest, then confidence)",
            },
            "presidio": (
                {
                    "available": True,
                    "version": presidio.version,
                    "recognizers": PRESIDIO_RECOGNIZERS,
                    "phone_regions": presidio.phone_regions,
                    "overlaps": "EntityRecognizer.remove_duplicates (as AnalyzerEngine)",
                    "nlp_engine": None,
                    "network": "refused (tldextract on its bundled suffix snapshot)",
                }
                if presidio is not None
                else {"available": False, "note": note}
            ),
        },
        "per_type": per_type,
        "phone_labels": {
            "total": len(phone_gold),
            "valid_in_no_region": len(invalid_phone),
            "invalid_examples": [
                v for i, s, e, t, v in phone_gold if (i, s, e, t) in invalid_phone
            ][:10],
            "recall_on_invalid_labels": {name: invalid_recall(sc) for name, sc in systems.items()},
        },
        "targets": {
            "vs_presidio": targets(our_sc["table"], ref["table"] if ref else None),
            "vs_presidio_resolved": targets(our_sc["table"], ref_res["table"] if ref_res else None),
        },
        "differences": diffs,
        "classes": run_classes(args.classes, detectors, presidio),
        "python": platform.python_version(),
        "phonenumbers": phonenumbers.__version__,
    }
    if presidio is None:
        result["note"] = note
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
