"""The learned injection detector (issue 20): a logistic regression over hashed features of
the folded text, scored over sliding windows, behind the sanitiser's detector interface
(:class:`mnemovault.guard.sanitise.Detector`).

**Features** (:func:`featurise`): the text folded by the shared normalisation
(:func:`mnemovault.guard.normalise.fold`: width, zero-width characters, homoglyphs, case,
leetspeak, letter spacing undone), split into words (runs of letters and digits); each word,
each pair of adjacent words and each four-character piece of ``<word>`` is hashed
(CRC-32, stable across processes) into one of :data:`DIMENSION` slots. A window's vector is
the set of its slots, scaled to unit length; its score is
``sigmoid(bias + sum(weights[slot]) / sqrt(len(slots)))``, the probability that the window
carries an injection. No embedding model is involved: the write path's embedding is of
the text *after* this step (sanitised and pseudonymised) and covers only its first 256
tokens, and embedding each window again costs ~200 ms per KB on this machine
(bench/README.md, "Learned injection detector"), while these features cost well under 1 ms
per KB.

**Windows** (:func:`windows`): a text of up to :data:`WINDOW` characters is one window; a
longer one is cut into segments at sentence ends and line breaks (a segment longer than a
window at spaces), and windows of consecutive segments of up to :data:`WINDOW` characters
start every half window, so an instruction hidden in the middle of a long email is scored
with little around it. A window at or above the threshold is a hit: from the first to the
last of its segments that score at or above the threshold on their own, else the whole
window (the sanitiser then widens each hit to its sentence and redacts it). The family is
:data:`FAMILY`.

**The threshold** is the setting ``MNEMOVAULT_INJECTION_THRESHOLD`` (a probability strictly
between 0 and 1; default :data:`DEFAULT_THRESHOLD`, chosen on the development collections
of bench/train_injection.py, see its manifest); ``MNEMOVAULT_INJECTION_DETECTORS`` lists
the sanitiser's detectors (default ``learned,heuristic``).

**The weights** ship in the package (:data:`WEIGHTS`, ``injection_model.npz``) with their
training manifest (:data:`MANIFEST`, ``injection_model.json``: data sets, sizes, seed,
date, metrics and the SHA-256 of the weights file); bench/train_injection.py reproduces
them. Nothing is downloaded. A weights file that is missing, corrupt, of the wrong shape or
not the one its manifest names makes every scan :class:`~mnemovault.errors.Unavailable`
naming the detector (fail closed: the write stores nothing), never a silent pass.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mnemovault.errors import Unavailable
from mnemovault.guard.hit import Hit
from mnemovault.guard.normalise import fold

NAME = "learned"
FAMILY = "learned_injection"
"""The family of this detector's hits (in ``provenance.injection_flags``)."""

DIMENSION = 1 << 18
"""Hashed feature slots."""

WINDOW = 500
"""Characters per window (a shorter text is one window)."""

DEFAULT_THRESHOLD = 0.96
"""The default of ``MNEMOVAULT_INJECTION_THRESHOLD`` (see the manifest's ``threshold``)."""

FEATURES_VERSION = 1
"""Bumped whenever :func:`featurise` changes (the manifest must name the same version)."""

HERE = Path(__file__).resolve().parent
WEIGHTS = HERE / "injection_model.npz"
MANIFEST = HERE / "injection_model.json"

_WORD_RE = re.compile(r"[^\W_]+")
_SEGMENT_RE = re.compile(r"[.!?。！？]+[\"'”’)\]]*\s+|\n+")
_MASK = DIMENSION - 1
_MAX_CACHE = 200_000
_word_cache: dict[str, tuple[int, tuple[int, ...]]] = {}


def _word(w: str) -> tuple[int, tuple[int, ...]]:
    """A word's own hash and the slots of the word and of its four-character pieces."""
    got = _word_cache.get(w)
    if got is None:
        h = zlib.crc32(b"w:" + w.encode("utf-8"))
        p = f"<{w}>"
        grams = tuple(zlib.crc32(b"c:" + p[i:i + 4].encode("utf-8")) & _MASK
                      for i in range(max(1, len(p) - 3)))
        got = (h, (h & _MASK, *grams))
        if len(_word_cache) >= _MAX_CACHE:
            _word_cache.clear()
        _word_cache[w] = got
    return got


def featurise(text: str) -> set[int]:
    """The feature slots of ``text`` (module docstring)."""
    words = _WORD_RE.findall(fold(text))
    out: set[int] = set()
    prev = None
    for w in words:
        h, slots = _word(w)
        out.update(slots)
        if prev is not None:
            out.add(((prev * 1_000_003) ^ h ^ 0x5BD1E995) & _MASK)
        prev = h
    return out


@dataclass(frozen=True)
class Window:
    """``text[start:end]`` and its feature slots; ``segments``: the spans of its segments
    (sentences and lines), scored on their own only when the window is flagged."""

    start: int
    end: int
    slots: frozenset[int]
    segments: tuple[tuple[int, int], ...]


def segments(text: str) -> list[tuple[int, int]]:
    """``text`` cut at sentence ends and line breaks, pieces longer than :data:`WINDOW`
    cut again at spaces (empty pieces dropped)."""
    out: list[tuple[int, int]] = []
    last = 0
    cuts = [m.end() for m in _SEGMENT_RE.finditer(text)] + [len(text)]
    for cut in cuts:
        s, e = last, cut
        last = cut
        while e - s > WINDOW:
            space = text.rfind(" ", s + WINDOW // 2, s + WINDOW)
            mid = space + 1 if space > s else s + WINDOW
            out.append((s, mid))
            s = mid
        if text[s:e].strip():
            out.append((s, e))
    return out


def windows(text: str) -> list[Window]:
    """The windows ``text`` is scored in (module docstring)."""
    if len(text) <= WINDOW:
        return [Window(0, len(text), frozenset(featurise(text)),
                       tuple(segments(text)) or ((0, len(text)),))]
    segs = [(s, e, frozenset(featurise(text[s:e]))) for s, e in segments(text)]
    out: list[Window] = []
    i = 0
    while i < len(segs):
        j = i
        while j + 1 < len(segs) and segs[j + 1][1] - segs[i][0] <= WINDOW:
            j += 1
        part = segs[i:j + 1]
        out.append(Window(part[0][0], part[-1][1], frozenset().union(*(p[2] for p in part)),
                          tuple((a, b) for a, b, _ in part)))
        if j + 1 >= len(segs):
            break
        if j == i:
            i += 1
            continue
        half = segs[i][0] + (segs[j][1] - segs[i][0]) // 2
        nxt = i + 1
        while nxt <= j and segs[nxt][0] < half:
            nxt += 1
        i = nxt
    return out


class Model:
    """The weights: a bias and :data:`DIMENSION` weights, scored by :meth:`score`."""

    def __init__(self, weights: np.ndarray[Any, Any], bias: float) -> None:
        if weights.shape != (DIMENSION,) or not np.all(np.isfinite(weights)):
            raise ValueError(f"weights must be {DIMENSION} finite numbers")
        if not math.isfinite(bias):
            raise ValueError("bias must be finite")
        self.weights = weights.astype(np.float32)
        self.bias = float(bias)

    def score(self, slots: frozenset[int] | set[int]) -> float:
        """The probability that a window with these feature slots carries an injection."""
        if not slots:
            return 1.0 / (1.0 + math.exp(-self.bias))
        idx = np.fromiter(slots, dtype=np.int64, count=len(slots))
        z = self.bias + float(self.weights[idx].sum()) / math.sqrt(len(slots))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(weights: Path = WEIGHTS, manifest: Path = MANIFEST) -> tuple[Model, dict[str, Any]]:
    """The model in ``weights`` and its manifest, checked against each other.

    Raises:
        Unavailable: either file is missing or unreadable, the weights are not the ones the
            manifest names (SHA-256), or are malformed (``details``: ``detector``,
            ``reason``).
    """
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        digest = sha256(weights)
        if meta.get("weights_sha256") != digest:
            raise ValueError("the weights file is not the one its manifest names")
        if meta.get("features_version") != FEATURES_VERSION or meta.get(
                "dimension") != DIMENSION or meta.get("window") != WINDOW:
            raise ValueError("the manifest's features are not this code's")
        with np.load(weights, allow_pickle=False) as z:
            model = Model(np.asarray(z["weights"], dtype=np.float32), float(z["bias"]))
    except Exception as exc:  # any failure to read them: fail closed, never a silent pass
        raise Unavailable(f"injection sanitiser: detector {NAME!r} cannot load its weights "
                          f"({type(exc).__name__}: {exc}); nothing was stored (fail closed)",
                          detector=NAME, reason="weights") from None
    return model, meta


class LearnedDetector:
    """The learned detector (module docstring): hits where a window scores at or above
    ``threshold``. The weights load on first use; a failure to load is ``Unavailable``
    on every call (fail closed)."""

    name = NAME

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, *, weights: Path = WEIGHTS,
                 manifest: Path = MANIFEST) -> None:
        if not isinstance(threshold, float | int) or not 0.0 < float(threshold) < 1.0:
            raise ValueError("threshold must be a probability strictly between 0 and 1")
        self.threshold = float(threshold)
        self._paths = (weights, manifest)
        self._model: Model | None = None
        self._lock = threading.Lock()

    @property
    def model(self) -> Model:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = load(*self._paths)[0]
        return self._model

    def scores(self, text: str) -> list[tuple[Window, float]]:
        """Each window of ``text`` and its score."""
        m = self.model
        return [(w, m.score(w.slots)) for w in windows(text)]

    def score(self, text: str) -> float:
        """The highest window score of ``text`` (0.0 for an empty text)."""
        return max((s for _, s in self.scores(text)), default=0.0) if text.strip() else 0.0

    def detect(self, text: str) -> list[Hit]:
        if not text.strip():
            return []
        m = self.model
        spans: set[tuple[int, int]] = set()
        for w, s in self.scores(text):
            if s < self.threshold:
                continue
            if len(w.segments) == 1:
                spans.add((w.start, w.end))
                continue
            own = [(a, b) for a, b in w.segments
                   if m.score(featurise(text[a:b])) >= self.threshold]
            # from the first segment that scores on its own to the last (the sentences
            # between belong to the same instruction), else the whole window
            spans.add((own[0][0], own[-1][1]) if own else (w.start, w.end))
        out = []
        for a, b in sorted(spans):
            while b > a and text[b - 1].isspace():
                b -= 1
            while a < b and text[a].isspace():
                a += 1
            if a < b:
                out.append(Hit(a, b, FAMILY))
        return out
