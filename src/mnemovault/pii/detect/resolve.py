"""Overlap resolution: :func:`detect_all` runs several detectors on the folded view of one
text (:func:`~mnemovault.pii.detect.base.fold`) and merges their possibly overlapping
findings into disjoint spans of the original text (longest, then most confident, then
first detector wins a cluster; the output span covers the whole cluster).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mnemovault.pii.detect.base import Detector, Finding, fold, normalise

# ---------------------------------------------------------------------------------------
# Overlap resolution
# ---------------------------------------------------------------------------------------


def detect_all(text: str, detectors: Sequence[Detector]) -> list[Finding]:
    """Run ``detectors`` on ``text``; return disjoint findings sorted by ``start``.

    The detectors see the folded view of ``text`` (:func:`fold`: zero-width characters and
    soft hyphens dropped, full-width and other compatibility forms folded to ASCII), so a
    value disguised with them is found; each finding is mapped back to ``text``, its span
    covering the original characters exactly (dropped ones inside it included), its
    ``value`` the original text and its :attr:`~Finding.identity` taken from the view
    (``normalise`` of the view's value when the detector set none).

    Findings are grouped into clusters of transitively overlapping spans (touching spans,
    ``a.end == b.start``, do not overlap). Each cluster yields one finding whose kind,
    confidence and detector are those of its best member, ranked by longest span, then
    highest confidence, then the detector's position in ``detectors`` (then start and kind,
    so the result is deterministic). A member contained in the winner is dropped; if some
    member sticks out of the winner, the output span is the union of the cluster, so that
    no detected value is ever left half in the clear after replacement.

    Raises ``ValueError`` if a detector returns a finding that does not match the text it
    was given (the message names the detector, never the value).
    """
    view, offsets = fold(text)
    ranked: list[tuple[Finding, int]] = []
    for order, det in enumerate(detectors):
        for f in det.detect(view):
            if f.end > len(view) or view[f.start : f.end] != f.value:
                raise ValueError(f"detector {det.name!r} returned a span that is not in the text")
            ranked.append((f, order))
    if not ranked:
        return []
    ranked.sort(key=lambda fo: (fo[0].start, fo[0].end))
    out: list[Finding] = []
    cluster: list[tuple[Finding, int]] = [ranked[0]]
    cluster_end = ranked[0][0].end
    for fo in ranked[1:]:
        if fo[0].start < cluster_end:
            cluster.append(fo)
            cluster_end = max(cluster_end, fo[0].end)
            continue
        out.append(_resolve(view, cluster, cluster_end))
        cluster, cluster_end = [fo], fo[0].end
    out.append(_resolve(view, cluster, cluster_end))
    return [_to_text(text, view, offsets, f) for f in out]


def _rank(fo: tuple[Finding, int]) -> tuple[int, float, int, int, str]:
    f, order = fo
    return (-f.length, -f.confidence, order, f.start, f.kind)


def _resolve(text: str, cluster: list[tuple[Finding, int]], end: int) -> Finding:
    best = min(cluster, key=_rank)[0]
    start = cluster[0][0].start  # sorted by start
    if (start, end) == (best.start, best.end):
        return best
    # the union is another value than the winner's: its identity is its normal form
    return Finding(start, end, best.kind, text[start:end], best.confidence, best.detector)


def _to_text(text: str, view: str, offsets: list[int] | None, f: Finding) -> Finding:
    """``f`` (a span of ``view``) as a span of ``text``, with its identity filled in."""
    identity = f.identity or normalise(f.value)
    if view is text:
        return f if f.identity else dataclasses.replace(f, identity=identity)
    start, end = (f.start, f.end) if offsets is None else (offsets[f.start], offsets[f.end - 1] + 1)
    return dataclasses.replace(f, start=start, end=end, value=text[start:end], identity=identity)
