#!/usr/bin/env python
"""Speed of PII detection (ms per KB), ours next to Presidio's pattern recognizers on the same
texts in the same run, and vault write throughput next to bare AES-GCM.

Texts: presidio-research's ``synth_dataset_v2.json`` (the texts ``bench/pii_eval.py`` scores;
short, ~85 bytes each), and the same texts joined into ~8 KB documents (``documents``), so
per-call overhead and per-byte cost both show. KB = 1,024 bytes of UTF-8.

Detection (each pass runs over every text; the figure is the median of ``--repeat`` passes
after one untimed warm-up, the systems interleaved pass by pass):

- ``mnemovault``: ``detect_all`` with ``default_detectors`` at the product's default settings
  (IBAN, card, email, IP, phone; ``phone_default_region`` None, fallback regions
  US,GB,DE,FR,IL,IN,CA,BR).
- ``presidio``: presidio-analyzer's ``EmailRecognizer``, ``PhoneRecognizer``,
  ``CreditCardRecognizer``, ``IbanRecognizer`` and ``IpRecognizer`` called directly (no NLP
  engine, no model, no network) plus ``EntityRecognizer.remove_duplicates``, as
  ``bench/pii_eval.py`` runs them.
- ``mnemovault_known``: the same plus a ``KnownEntityIndex`` holding ``--known`` values
  (default 1,000: distinct PERSON, ORGANIZATION, STREET_ADDRESS and GPE values of the data
  set, sampled with ``--seed``, so many of them do occur in the texts), first in the list as
  in the write path; ``known_only``: the index alone.
- ``per_detector``: each of our detectors and each Presidio recognizer alone.

Targets (issue 3): ours at least 10x faster than Presidio and under 1 ms/KB; under 3 ms/KB
with known-entity matching on and 1,000 known values.

Vault writes: a ``MemoryVault`` on a temporary data directory (embedded PostgreSQL, a KEK
file made there; a stub embedder, since nothing is embedded). Per repeat, a fresh tenant:
``vault.ensure_tenant``, then in one ``vault.db.transaction(tenant)``: ``pii.tenant_keys``,
``pii.known_index``, ``pii.get_or_create`` for ``--values`` new values (timed: ``create``),
the same values again (timed: ``existing``, the lookup path), then the commit (timed). Then
``pii.known_index`` is rebuilt from the stored fingerprints (timed). Baselines on the same
values in the same run: ``aesgcm_encrypt``, one ``AESGCM.encrypt`` per value with a random
nonce under a key set up once (bare cipher calls), and ``envelope_crypto``, the crypto one new
vault entry needs without the database (the fingerprint and first-token digests, the
placeholder HMAC, a random DEK, ``seal`` of the value under it, ``seal`` of the DEK under the
KEK).

Usage::

    python bench/pii_speed.py                        # all 1,500 texts, 1,000 vault values
    python bench/pii_speed.py --quick                # 100 texts, 200 values, fewer repeats
    python bench/pii_speed.py --no-vault             # detection only (no database)
    python bench/pii_speed.py --out bench/results/pii_speed.json

JSON on stdout (and ``--out``), progress on stderr. Without presidio-analyzer the JSON says
so and reports our side only. Exit status 2 if the vault section failed (its error is in the
JSON).
"""

from __future__ import annotations

import argparse
import atexit
import json
import platform
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import skip_without
from pii_eval import (
    DATASET,
    PRESIDIO_RECOGNIZERS,
    forbid_network,
    load,
    load_presidio,
    our_detectors,
    product_phone_settings,
)

from mnemovault.pii.detect import KnownEntityIndex, detect_all

KNOWN_TYPES = {
    "PERSON": "person",
    "ORGANIZATION": "organization",
    "STREET_ADDRESS": "address",
    "GPE": "location",
}
DOC_BYTES = 8 * 1024


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def kb(texts: Sequence[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1024


def documents(texts: Sequence[str], size: int = DOC_BYTES) -> list[str]:
    """The texts joined by blank lines into documents of about ``size`` bytes."""
    docs: list[str] = []
    cur: list[str] = []
    n = 0
    for t in texts:
        cur.append(t)
        n += len(t.encode("utf-8")) + 2
        if n >= size:
            docs.append("\n\n".join(cur))
            cur, n = [], 0
    if cur:
        docs.append("\n\n".join(cur))
    return docs


def known_values(path: Path, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` distinct (kind, value) pairs from the data set's name, organisation, address and
    place labels (all 1,500 texts), sampled with ``seed``; padded with made-up names if the
    data set has fewer."""
    data = load(path, None)
    seen: dict[str, tuple[str, str]] = {}
    for item in data:
        for s in item["spans"]:
            kind = KNOWN_TYPES.get(s["entity_type"])
            value = s["entity_value"].strip()
            if kind and any(c.isalnum() for c in value):
                seen.setdefault(" ".join(value.split()).casefold(), (kind, value))
    pool = sorted(seen.values())
    rng = random.Random(seed)
    rng.shuffle(pool)
    out = pool[:n]
    i = 0
    while len(out) < n:
        out.append(("person", f"Benchperson Number{i} Zq{rng.randrange(10**6)}"))
        i += 1
    return out


def timed_passes(
    fns: dict[str, Callable[[], Any]], repeat: int, label: str
) -> dict[str, list[float]]:
    """One untimed warm-up of each, then ``repeat`` rounds running each once (interleaved);
    seconds per pass."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        log(
            f"{label} pass {r + 1}/{repeat}: "
            + ", ".join(f"{k} {v[-1] * 1000:.1f} ms" for k, v in times.items())
        )
    return times


def summary(secs: list[float], size_kb: float, n_texts: int) -> dict[str, Any]:
    med = statistics.median(secs)
    return {
        "ms_per_kb": round(med * 1000 / size_kb, 4),
        "ms_per_text": round(med * 1000 / n_texts, 4),
        "texts_per_s": round(n_texts / med, 1),
        "pass_ms_median": round(med * 1000, 2),
        "pass_ms_min": round(min(secs) * 1000, 2),
        "pass_ms_max": round(max(secs) * 1000, 2),
        "passes": len(secs),
    }


def bench_detection(
    texts: list[str], known: KnownEntityIndex, presidio: Any, repeat: int, label: str
) -> dict[str, Any]:
    detectors = our_detectors()
    with_known = [known, *detectors]
    fns: dict[str, Callable[[], Any]] = {
        "mnemovault": lambda: [detect_all(t, detectors) for t in texts],
        "mnemovault_known": lambda: [detect_all(t, with_known) for t in texts],
        "known_only": lambda: [known.detect(t) for t in texts],
    }
    if presidio is not None:
        fns["presidio"] = lambda: [presidio.results(t) for t in texts]
    times = timed_passes(fns, repeat, label)
    size = kb(texts)
    out: dict[str, Any] = {
        "texts": len(texts),
        "kb": round(size, 1),
        "systems": {k: summary(v, size, len(texts)) for k, v in times.items()},
    }
    hits = sum(len(known.detect(t)) for t in texts)
    out["known_hits"] = hits
    sysm = out["systems"]
    if presidio is not None:
        out["presidio_over_mnemovault"] = round(
            sysm["presidio"]["ms_per_kb"] / sysm["mnemovault"]["ms_per_kb"], 1
        )
        out["presidio_over_mnemovault_known"] = round(
            sysm["presidio"]["ms_per_kb"] / sysm["mnemovault_known"]["ms_per_kb"], 1
        )
    return out


def bench_per_detector(texts: list[str], presidio: Any, repeat: int) -> dict[str, Any]:
    def ours(d: Any) -> Callable[[], Any]:
        return lambda: [d.detect(t) for t in texts]

    def theirs(r: Any) -> Callable[[], Any]:
        return lambda: [r.analyze(t, r.supported_entities, None) for t in texts]

    fns: dict[str, Callable[[], Any]] = {}
    for d in our_detectors():
        fns[f"mnemovault.{d.name}"] = ours(d)
    if presidio is not None:
        for r in presidio.recognizers:
            fns[f"presidio.{type(r).__name__}"] = theirs(r)
    times = timed_passes(fns, repeat, "per detector")
    size = kb(texts)
    return {k: round(statistics.median(v) * 1000 / size, 4) for k, v in times.items()}


# ---------------------------------------------------------------------------------------
# Vault writes
# ---------------------------------------------------------------------------------------


class _StubEmbedder:
    """The vault needs an embedder to open; nothing here is embedded."""

    model = "bench/pii-speed-stub"

    @property
    def dimension(self) -> int:
        return 384

    def embed(self, texts: list[str]) -> np.ndarray:
        v = np.zeros((len(texts), 384), dtype=np.float32)
        v[:, 0] = 1.0
        return v


def bench_vault(
    values: list[tuple[str, str]], repeat: int, keep: bool, known_texts: list[str]
) -> dict[str, Any]:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from mnemovault.config import Settings
    from mnemovault.pii.crypto import dek_aad, seal, value_aad
    from mnemovault.vault import MemoryVault

    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-"))
    if not keep:
        # registered before the embedded server's own exit hook, so it runs after it
        atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    settings = Settings().model_copy(
        update={"data_dir": data_dir, "database_url": None, "kek": None, "kek_file": None}
    )
    log(f"vault: opening a MemoryVault in {data_dir}")
    t0 = time.perf_counter()
    vault = MemoryVault.open(settings, embedder=_StubEmbedder())
    open_s = time.perf_counter() - t0
    n = len(values)
    create_s: list[float] = []
    existing_s: list[float] = []
    commit_s: list[float] = []
    rebuild_s: list[float] = []
    aes_s: list[float] = []
    env_s: list[float] = []
    known_ms_kb: list[float] = []
    plain = [(k, v, v.encode("utf-8")) for k, v in values]
    kek = secrets.token_bytes(32)
    try:
        for r in range(repeat + 1):  # round 0 is a warm-up
            tenant = f"pii-bench-{r}"
            vault.ensure_tenant(tenant)
            with vault.db.transaction(tenant) as conn:
                keys = vault.pii.tenant_keys(conn, tenant)
                index = vault.pii.known_index(conn, keys)
                t0 = time.perf_counter()
                created = 0
                for kind, value, _ in plain:
                    created += vault.pii.get_or_create(
                        conn, tenant, keys, kind, value, index
                    ).created
                t1 = time.perf_counter()
                for kind, value, _ in plain:
                    vault.pii.get_or_create(conn, tenant, keys, kind, value, index)
                t2 = time.perf_counter()
                assert created == n, f"expected {n} new entries, got {created}"
            t3 = time.perf_counter()
            with vault.db.transaction(tenant) as conn:
                t4 = time.perf_counter()
                rebuilt = vault.pii.known_index(conn, keys)
                t5 = time.perf_counter()
            assert len(rebuilt) == n, f"index rebuilt with {len(rebuilt)} of {n} values"

            # bare AES-GCM: one encrypt per value, key schedule set up once
            aes = AESGCM(kek)
            t6 = time.perf_counter()
            for _, _, pt in plain:
                aes.encrypt(secrets.token_bytes(12), pt, b"mnemovault-bench")
            t7 = time.perf_counter()
            # the crypto of one new vault entry, without the database
            for kind, value, pt in plain:
                index.entity(kind, value)  # fingerprint and first-token digest
                ph = keys.candidate(kind, value, 0)
                dek = secrets.token_bytes(32)
                seal(dek, pt, value_aad(tenant, ph))
                seal(kek, dek, dek_aad(tenant, ph, 1))
            t8 = time.perf_counter()

            # known-entity matching with the index the vault rebuilt
            size = kb(known_texts)
            t9 = time.perf_counter()
            dets = [rebuilt, *our_detectors()]
            for t in known_texts:
                detect_all(t, dets)
            t10 = time.perf_counter()
            if r == 0:
                log(f"vault warm-up round: {n / (t1 - t0):.0f} values/s")
                continue
            create_s.append(t1 - t0)
            existing_s.append(t2 - t1)
            commit_s.append(t3 - t2)
            rebuild_s.append(t5 - t4)
            aes_s.append(t7 - t6)
            env_s.append(t8 - t7)
            known_ms_kb.append((t10 - t9) * 1000 / size)
            log(
                f"vault round {r}/{repeat}: create {n / (t1 - t0):.0f}/s, existing "
                f"{n / (t2 - t1):.0f}/s, aesgcm {n / (t7 - t6):.0f}/s, envelope "
                f"{n / (t8 - t7):.0f}/s"
            )
    finally:
        vault.close()

    def rate(secs: list[float]) -> float:
        return round(n / statistics.median(secs), 1)

    create_rate = rate(create_s)
    with_commit = round(
        n / statistics.median([a + b for a, b in zip(create_s, commit_s, strict=True)]), 1
    )
    aes_rate = rate(aes_s)
    env_rate = rate(env_s)
    return {
        "values": n,
        "rounds": repeat,
        "open_s": round(open_s, 2),
        "values_per_s": {
            "get_or_create_new": create_rate,
            "get_or_create_new_incl_commit": with_commit,
            "get_or_create_existing": rate(existing_s),
            "aesgcm_encrypt": aes_rate,
            "envelope_crypto": env_rate,
        },
        "bare_aesgcm_over_vault": round(aes_rate / create_rate, 1),
        "envelope_crypto_share_of_vault_write": round(create_rate / env_rate, 3),
        "commit_ms_median": round(statistics.median(commit_s) * 1000, 2),
        "known_index_rebuild_ms_median": round(statistics.median(rebuild_s) * 1000, 2),
        "known_from_vault_ms_per_kb": round(statistics.median(known_ms_kb), 4),
        "data_dir": str(data_dir) if keep else "(temporary, removed)",
        "note": (
            "get_or_create_new: per new value a fingerprint lookup, two INSERTs (value, "
            "wrapped DEK) and two AES-256-GCM seals, all in one open transaction; commit "
            "timed apart. known_from_vault_ms_per_kb: structured detectors plus the index "
            "rebuilt from the vault, on the detection texts"
        ),
    }


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="100 texts, 200 vault values, 5 detection passes, 2 vault rounds",
    )
    ap.add_argument("--limit", type=int, default=None, help="first N texts")
    ap.add_argument("--repeat", type=int, default=None, help="detection passes (default 7)")
    ap.add_argument("--known", type=int, default=1000, help="known values in the index")
    ap.add_argument("--values", type=int, default=None, help="vault values (default 1000)")
    ap.add_argument("--vault-rounds", type=int, default=None, help="vault rounds (default 5)")
    ap.add_argument("--no-vault", action="store_true", help="skip the vault section")
    ap.add_argument("--keep", action="store_true", help="keep the vault's data directory")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    forbid_network()
    limit = 100 if args.quick else args.limit
    repeat = args.repeat or (5 if args.quick else 7)
    n_values = args.values or (200 if args.quick else 1000)
    rounds = args.vault_rounds or (2 if args.quick else 5)

    skip_without(args.dataset, benchmark="pii_speed", quick=args.quick)
    items = load(args.dataset, limit)
    texts = [item["full_text"] for item in items]
    docs = documents(texts)
    log(f"{len(texts)} texts ({kb(texts):.1f} KB), {len(docs)} documents, from {args.dataset}")

    presidio, note = load_presidio()
    if presidio is None:
        log(note or "presidio unavailable")

    known_pairs = known_values(args.dataset, args.known, args.seed)
    known = KnownEntityIndex(secrets.token_bytes(32))
    t0 = time.perf_counter()
    for kind, value in known_pairs:
        known.add(kind, value)
    build_ms = (time.perf_counter() - t0) * 1000
    log(f"known-entity index: {len(known)} values in {build_ms:.1f} ms")

    detection = {
        "texts": bench_detection(texts, known, presidio, repeat, "texts"),
        "documents": bench_detection(docs, known, presidio, repeat, "documents"),
    }
    per_detector = bench_per_detector(texts, presidio, repeat)

    main_row = detection["texts"]["systems"]
    tgt: dict[str, Any] = {
        "mnemovault_under_1_ms_per_kb": main_row["mnemovault"]["ms_per_kb"] < 1.0,
        "mnemovault_known_under_3_ms_per_kb": main_row["mnemovault_known"]["ms_per_kb"] < 3.0,
    }
    if presidio is not None:
        tgt["at_least_10x_faster_than_presidio"] = (
            detection["texts"]["presidio_over_mnemovault"] >= 10
        )

    vault_out: dict[str, Any]
    status = 0
    if args.no_vault:
        vault_out = {"skipped": "--no-vault"}
    else:
        value_pairs = known_values(args.dataset, n_values, args.seed + 1)
        try:
            vault_out = bench_vault(value_pairs, rounds, args.keep, texts)
        except Exception as exc:
            log(f"vault section failed: {type(exc).__name__}: {exc}")
            vault_out = {"error": f"{type(exc).__name__}: {exc}"}
            status = 2

    region, fallback = product_phone_settings()
    result: dict[str, Any] = {
        "bench": "pii_speed",
        "dataset": args.dataset.name,
        "command": " ".join(
            ["python bench/pii_speed.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "statistic": f"median of {repeat} passes after a warm-up, systems interleaved",
        "mnemovault": {
            "detectors": [d.name for d in our_detectors()],
            "phone_default_region": region,
            "phone_fallback_regions": fallback,
            "known_values": len(known),
            "known_kinds": sorted({k for k, _ in known_pairs}),
            "known_index_build_ms": round(build_ms, 1),
        },
        "presidio": (
            {
                "available": True,
                "version": presidio.version,
                "recognizers": PRESIDIO_RECOGNIZERS,
                "phone_regions": presidio.phone_regions,
                "nlp_engine": None,
            }
            if presidio is not None
            else {"available": False, "note": note}
        ),
        "detection": detection,
        "per_detector_ms_per_kb": per_detector,
        "targets": tgt,
        "vault": vault_out,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }
    if presidio is None:
        result["note"] = note
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
