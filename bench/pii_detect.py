#!/usr/bin/env python
"""Precision, recall and F1 of ``mnemovault.pii.detect`` per entity type, and throughput.

Data: presidio-research's ``synth_dataset_v2.json`` (1,500 synthetic texts; a JSON list of
``{"full_text", "masked", "spans": [{"entity_type", "entity_value", "start_position",
"end_position"}], "template_id", "metadata"}``), read from
``<workspace>/shared/datasets/presidio_research/``. Only the types we detect are scored:
EMAIL_ADDRESS, PHONE_NUMBER, IBAN_CODE, CREDIT_CARD, IP_ADDRESS.

Scoring is per span. A prediction of type T is a true positive if it overlaps a gold span
of type T not already matched (``overlap``); ``exact`` counts only identical offsets.
Every other prediction is a false positive (including predictions that land on gold spans
of types we do not score, e.g. a phone detected on a US_SSN). Gold spans left unmatched are
false negatives.

Phone labels: many of the dataset's phone numbers are not valid numbers in any region
(libphonenumber metadata). Each phone label is parsed with every region phonenumbers knows
(and with none, for ``+`` numbers); those valid nowhere are counted apart, and phone recall
is given over all labels and over the valid ones. Phone is scored twice: with
``--region`` as the default region (the main table) and with no default region
(international format only).

Throughput: ``detect_all`` with the five built-in detectors over all texts, best of
``--repeat`` passes, as texts/s and ms per KB (UTF-8).

Usage::

    python bench/pii_detect.py                 # all 1,500 texts, default region US
    python bench/pii_detect.py --quick         # first 100 texts
    python bench/pii_detect.py --region GB --out bench/results/pii_detect.json

JSON on stdout (and ``--out``), progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import phonenumbers
from _common import skip_without

from mnemovault.pii.detect import (
    CardDetector,
    Detector,
    EmailDetector,
    Finding,
    IbanDetector,
    IpDetector,
    PhoneDetector,
    detect_all,
)

DATASET = (
    Path(__file__).resolve().parents[2] / "shared/datasets/presidio_research/synth_dataset_v2.json"
)
KIND_TO_TYPE = {
    "email": "EMAIL_ADDRESS",
    "phone": "PHONE_NUMBER",
    "iban": "IBAN_CODE",
    "card": "CREDIT_CARD",
    "ip": "IP_ADDRESS",
}
TYPES = list(KIND_TO_TYPE.values())
# Presidio's PhoneRecognizer default regions (2.2.36x): one matcher pass per region there,
# one parse per region per candidate here.
PRESIDIO_PHONE_REGIONS = ["US", "GB", "DE", "FR", "IL", "IN", "CA", "BR"]
Span = tuple[int, int, str]  # start, end, entity type


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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
    """Is ``value`` a valid number for some region (or as written, with ``+``)?"""
    regions: Sequence[str | None] = [None, *sorted(phonenumbers.SUPPORTED_REGIONS)]
    for region in regions:
        try:
            num = phonenumbers.parse(value, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(num):
            return True
    return False


def score(
    texts: list[dict[str, Any]],
    predictions: list[list[Finding]],
    types: Sequence[str],
) -> dict[str, Any]:
    """Per type: gold, predicted, tp (overlap), tp_exact, fp, fn, precision, recall, f1;
    plus the matched gold spans (for the valid-phone recall)."""
    tp: Counter[str] = Counter()
    tp_exact: Counter[str] = Counter()
    pred_n: Counter[str] = Counter()
    gold_n: Counter[str] = Counter()
    fp_examples: dict[str, list[str]] = {t: [] for t in types}
    matched: set[tuple[int, int, int]] = set()
    for i, (item, preds) in enumerate(zip(texts, predictions, strict=True)):
        gold = [(s["start_position"], s["end_position"], s["entity_type"]) for s in item["spans"]]
        for s in gold:
            if s[2] in types:
                gold_n[s[2]] += 1
        used: set[int] = set()
        for f in preds:
            t = KIND_TO_TYPE.get(f.kind)
            if t is None or t not in types:
                continue
            pred_n[t] += 1
            hit = next(
                (
                    j
                    for j, g in enumerate(gold)
                    if j not in used and g[2] == t and f.start < g[1] and g[0] < f.end
                ),
                None,
            )
            if hit is None:
                if len(fp_examples[t]) < 5:
                    other = [g[2] for g in gold if f.start < g[1] and g[0] < f.end]
                    fp_examples[t].append(f"{f.value!r} (gold here: {other or 'none'})")
                continue
            used.add(hit)
            tp[t] += 1
            g = gold[hit]
            matched.add((i, g[0], g[1]))
            if (f.start, f.end) == (g[0], g[1]):
                tp_exact[t] += 1
    out: dict[str, Any] = {}
    for t in types:
        p = tp[t] / pred_n[t] if pred_n[t] else None
        r = tp[t] / gold_n[t] if gold_n[t] else None
        f1 = 2 * p * r / (p + r) if p is not None and r is not None and p + r else None
        out[t] = {
            "gold": gold_n[t],
            "predicted": pred_n[t],
            "tp": tp[t],
            "tp_exact": tp_exact[t],
            "fp": pred_n[t] - tp[t],
            "fn": gold_n[t] - tp[t],
            "precision": _r(p),
            "recall": _r(r),
            "f1": _r(f1),
            "fp_examples": fp_examples[t],
        }
    out["_matched"] = matched
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def run(detectors: Sequence[Detector], texts: list[dict[str, Any]]) -> list[list[Finding]]:
    return [detect_all(item["full_text"], detectors) for item in texts]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="first 100 texts only")
    ap.add_argument("--limit", type=int, default=None, help="first N texts")
    ap.add_argument("--region", default="US", help="phone default region ('none' for none)")
    ap.add_argument(
        "--fallback-regions",
        default="",
        help="comma-separated phone fallback regions for the main table (default none)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="timing passes (best is kept)")
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    region = None if args.region.lower() == "none" else args.region.upper()
    limit = 100 if args.quick else args.limit
    fallback = [r.strip().upper() for r in args.fallback_regions.split(",") if r.strip()]

    skip_without(args.dataset, benchmark="pii_detect", quick=args.quick)
    texts = load(args.dataset, limit)
    log(f"{len(texts)} texts from {args.dataset}")

    base: list[Detector] = [IbanDetector(), CardDetector(), EmailDetector(), IpDetector()]
    detectors: list[Detector] = [*base, PhoneDetector(region, fallback_regions=fallback)]

    preds = run(detectors, texts)
    table = score(texts, preds, TYPES)
    matched = table.pop("_matched")
    log("scored the five detectors")

    # Phone labels valid in no region, and recall over the valid ones.
    phone_gold = [
        (i, s["start_position"], s["end_position"], s["entity_value"])
        for i, item in enumerate(texts)
        for s in item["spans"]
        if s["entity_type"] == "PHONE_NUMBER"
    ]
    validity = [phone_valid_anywhere(v) for *_, v in phone_gold]
    valid = [(i, a, b) for (i, a, b, _), ok in zip(phone_gold, validity, strict=True) if ok]
    invalid = [v for (*_, v), ok in zip(phone_gold, validity, strict=True) if not ok]
    log(f"phone labels: {len(phone_gold)}, valid in some region: {len(valid)}")

    def valid_recall(m: set[tuple[int, int, int]]) -> float | None:
        return _r(sum(1 for k in valid if k in m) / len(valid)) if valid else None

    phone = table["PHONE_NUMBER"]
    phone["recall_all_labels"] = phone["recall"]
    phone["recall_valid_labels"] = valid_recall(matched)
    phone["default_region"] = region
    phone["fallback_regions"] = list(fallback)

    # The same texts with other phone settings: no default region (international format
    # only), the default region alone, and the default region with Presidio's regions.
    variants: list[dict[str, Any]] = []
    presidio_fallback = [r for r in PRESIDIO_PHONE_REGIONS if r != region]
    for label, det in [
        ("no default region", PhoneDetector(None)),
        (f"default region {region}", PhoneDetector(region)),
        (
            f"default region {region} + fallback {','.join(presidio_fallback)}",
            PhoneDetector(region, fallback_regions=presidio_fallback),
        ),
    ]:
        t = score(texts, run([det], texts), ["PHONE_NUMBER"])
        m = t.pop("_matched")
        row = {"setting": label, **t["PHONE_NUMBER"]}
        row["recall_all_labels"] = row["recall"]
        row["recall_valid_labels"] = valid_recall(m)
        variants.append(row)
        log(f"phone variant: {label}")

    # Throughput (the main detector set).
    total_bytes = sum(len(item["full_text"].encode("utf-8")) for item in texts)
    best = float("inf")
    for k in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        run(detectors, texts)
        best = min(best, time.perf_counter() - t0)
        log(f"timing pass {k + 1}: {best:.3f} s")

    result = {
        "bench": "pii_detect",
        "dataset": str(args.dataset.name),
        "texts": len(texts),
        "command": " ".join(
            ["python bench/pii_detect.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "detectors": [d.name for d in detectors],
        "matching": "overlap (tp_exact: identical offsets)",
        "per_type": table,
        "micro": _micro(table),
        "phone_labels": {
            "total": len(phone_gold),
            "valid_in_some_region": len(valid),
            "valid_in_no_region": len(invalid),
            "invalid_examples": invalid[:10],
        },
        "phone_variants": variants,
        "throughput": {
            "seconds": round(best, 4),
            "texts_per_s": round(len(texts) / best, 1),
            "kb": round(total_bytes / 1024, 1),
            "ms_per_kb": round(best * 1000 / (total_bytes / 1024), 4),
            "passes": args.repeat,
        },
        "python": platform.python_version(),
        "phonenumbers": phonenumbers.__version__,
    }
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


def _micro(table: dict[str, Any]) -> dict[str, float | None]:
    tp = sum(v["tp"] for v in table.values())
    pred = sum(v["predicted"] for v in table.values())
    gold = sum(v["gold"] for v in table.values())
    p = tp / pred if pred else None
    r = tp / gold if gold else None
    f1 = 2 * p * r / (p + r) if p is not None and r is not None and p + r else None
    return {"precision": _r(p), "recall": _r(r), "f1": _r(f1)}


if __name__ == "__main__":
    raise SystemExit(main())
