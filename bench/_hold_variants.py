#!/usr/bin/env python
"""The context stage's hold (``src/mnemovault/recall/ranking.py``): the structural variants
it was chosen from, replayed on LoCoMo's captured candidate lists, per half, turn and
session recall @5 / @10 (a development tool, not one of CI's benchmarks: no ``--quick``).

The candidate lists come from ``bench/recall_eval.py --cache PATH`` (its first run writes
them, later runs and this script read them)::

    python bench/recall_eval.py --cache /tmp/re.pkl --out /tmp/re.json
    python bench/_hold_variants.py /tmp/re.pkl

Each variant re-ranks the fusion *without* the hold (``context_hold=False``, the loans
included) by one rule over the plain fusion's first hit of each conversation: a lent turn
of another conversation may pass such a hit at most ``places`` times while it is among the
anchors and ``below`` times under them (the lent turns placed strongest first); the turns
in ``exempt`` (none, the lead anchor's reply, every neighbour of the lead) are held only by
the first hits among the anchors. ``shipped`` is the real ``fuse`` with its hold, so the
line it prints must equal ``places 0 / below 1``'s. The parts (``no_context``,
``vector_only``, ``text_only``) are printed first: the rule is chosen on one half (the
largest turn@10 with fused at least each part minus 0.01 at @5 and @10, both levels) and
read on the other.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_eval as re_
from locomo_recall import session_of

# name -> (places among the anchors, places below them, exempt turns)
VARIANTS: dict[str, tuple[float, float, str]] = {
    "strict": (0, 0, "none"),
    "lead reply exempt (the hold of 0e973bd)": (0, 0, "reply"),
    "lead neighbours exempt": (0, 0, "lead"),
    "places 0 / below 1": (0, 1, "none"),
    "places 0 / below 2": (0, 2, "none"),
    "places 0 / below 3": (0, 3, "none"),
    "places 1 / below 1": (1, 1, "none"),
    "places 0 / below any": (0, math.inf, "none"),
}


def main(argv: list[str]) -> int:
    from mnemovault.config import Settings
    from mnemovault.recall.ranking import fuse

    if len(argv) != 1 or not Path(argv[0]).is_file():
        print(__doc__.split("\n\n")[0] + "\nusage: python bench/_hold_variants.py CACHE.pkl",
              file=sys.stderr)
        return 2
    corpus = re_.Corpus()
    re_.load_locomo(re_.LOCOMO, False, corpus)
    re_.load_madial(re_.MADIAL, False, corpus)
    re_.load_preferences(False, corpus)
    with open(argv[0], "rb") as fh:
        live = pickle.load(fh)
    w = re_._weights(Settings())
    _, gap = re_._context(Settings())
    id_to_doc = {d[0]: d[2] for d in live["docs"]}
    conv = re_.conversation_map(live["docs"])
    doc_meta = {d[0]: (d[5], False) for d in live["docs"]}
    caps = [(c[0], c[1], {**doc_meta, **c[2]}, c[3], c[4]) if c else None
            for c in live["captures"]]
    near = re_.neighbour_map(live["docs"], w.context_window, gap)
    free = dataclasses.replace(w, context_hold=False)

    def of(mid: Any) -> Any:
        return conv.get(mid, ("own", mid))

    def variant(cap: Any, places: float, below: float, exempt: str) -> list[Any]:
        vh, th, meta, now, tmax = cap
        ranked = fuse(vh, th, meta, now, w, text_max=tmax)
        plain, base = [f.id for f in ranked], {f.id: f.score for f in ranked}
        score = {f.id: f.score for f in fuse(vh, th, meta, now, free, text_max=tmax,
                                             neighbours=near, conversations=conv)}
        pos = {m: i for i, m in enumerate(plain)}
        lent = [m for m in score if m not in base or score[m] > base[m] + 1e-15]
        firsts, seen = [], set()
        for i, m in enumerate(plain):
            if of(m) not in seen:
                seen.add(of(m))
                firsts.append((i, m))
        left = {m: places if i < w.context_anchors else below for i, m in firsts}
        lead = near.get(plain[0], ()) if plain else ()
        ex = ({n for n, o in lead if o == 1} if exempt == "reply"
              else {n for n, _ in lead} if exempt == "lead" else set())
        last = len(plain)
        for m in sorted(lent, key=lambda m: (-score[m], m)):
            at = pos.get(m, last)
            others = [r for i, r in firsts if i < at and of(r) != of(m)
                      and (m not in ex or i < w.context_anchors)]
            bound = min((score[r] for r in others if left[r] <= 0), default=math.inf)
            if score[m] >= bound:
                score[m] = math.nextafter(bound, -math.inf)
            for r in others:
                if score[r] < score[m]:
                    left[r] -= 1
        return sorted(score, key=lambda m: (-score[m], m))

    def shipped(cap: Any, ww: Any, context: bool) -> list[Any]:
        vh, th, meta, now, tmax = cap
        return [f.id for f in fuse(vh, th, meta, now, ww, text_max=tmax,
                                   neighbours=near if context else None,
                                   conversations=conv)]

    def measure(idx: list[int], rank: Any) -> str:
        out = []
        for k in (5, 10):
            tv, sv = [], []
            for i in idx:
                q, top = corpus.queries[i], [id_to_doc[m] for m in rank(caps[i])[:k]]
                tv.append(len(q.gold & set(top)) / len(q.gold))
                gold_s = {session_of(d) for d in q.gold}
                sv.append(len(gold_s & {session_of(d) for d in top}) / len(gold_s))
            out.append(f"turn@{k} {statistics.fmean(tv):.4f} session@{k} "
                       f"{statistics.fmean(sv):.4f}")
        return "  ".join(out)

    halves = {h: [i for i, q in enumerate(corpus.queries)
                  if q.set == "locomo" and q.group == h and caps[i]] for h in "AB"}
    parts = {"no_context": (w, False), "vector_only": (dataclasses.replace(w, text=0.0), False),
             "text_only": (dataclasses.replace(w, vector=0.0), False),
             "without the hold": (free, True), "shipped": (w, True)}
    for h, idx in halves.items():
        for name, (ww, ctx) in parts.items():
            print(f"{h} {name:40} {measure(idx, lambda c, ww=ww, ctx=ctx: shipped(c, ww, ctx))}",
                  flush=True)
        for name, (p, b, e) in VARIANTS.items():
            print(f"{h} {name:40} {measure(idx, lambda c, p=p, b=b, e=e: variant(c, p, b, e))}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
