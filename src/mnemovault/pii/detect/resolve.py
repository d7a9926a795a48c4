"""Overlap resolution: :func:`detect_all` runs several detectors on one text and merges
their possibly overlapping findings into disjoint spans (longest, then most confident,
then first detector wins a cluster; the output span covers the whole cluster).
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemovault.pii.detect.base import Detector, Finding

# ---------------------------------------------------------------------------------------
# Overlap resolution
# ---------------------------------------------------------------------------------------


def detect_all(text: str, detectors: Sequence[Detector]) -> list[Finding]:
    """Run ``detectors`` on ``text``; return disjoint findings sorted by ``start``.

    Findings are grouped into clusters of transitively overlapping spans (touching spans,
    ``a.end == b.start``, do not overlap). Each cluster yields one finding whose kind,
    confidence and detector are those of its best member, ranked by longest span, then
    highest confidence, then the detector's position in ``detectors`` (then start and kind,
    so the result is deterministic). A member contained in the winner is dropped; if some
    member sticks out of the winner, the output span is the union of the cluster, so that
    no detected value is ever left half in the clear after replacement.

    Raises ``ValueError`` if a detector returns a finding that does not match ``text``
    (the message names the detector, never the value).
    """
    ranked: list[tuple[Finding, int]] = []
    for order, det in enumerate(detectors):
        for f in det.detect(text):
            if f.end > len(text) or text[f.start : f.end] != f.value:
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
        out.append(_resolve(text, cluster, cluster_end))
        cluster, cluster_end = [fo], fo[0].end
    out.append(_resolve(text, cluster, cluster_end))
    return out


def _rank(fo: tuple[Finding, int]) -> tuple[int, float, int, int, str]:
    f, order = fo
    return (-f.length, -f.confidence, order, f.start, f.kind)


def _resolve(text: str, cluster: list[tuple[Finding, int]], end: int) -> Finding:
    best = min(cluster, key=_rank)[0]
    start = cluster[0][0].start  # sorted by start
    if (start, end) == (best.start, best.end):
        return best
    return Finding(start, end, best.kind, text[start:end], best.confidence, best.detector)
