"""One normalisation for every text detector, and the injection detector's folding on top.

**The shared view** (:func:`views`, :data:`CANON_TABLE`): what every detector reads, the
capture guard's (:mod:`mnemovault.guard.capture` hands each detector these views and maps
its findings back) and the sanitiser's (its folding below starts from it). It keeps case
(a key's letters are part of the key) and undoes what hides a token from a regex:

* **width and compatibility forms** (NFKD: fullwidth ``ＡＫＩＡ``, mathematical ``𝐀𝐊𝐈𝐀``,
  ligatures, superscripts, circled letters), combining marks dropped (``pré`` -> ``pre``);
* **invisible characters** dropped: zero-width and other format characters (U+200B-U+200F,
  U+2060-U+2064, U+FEFF, the soft hyphen, bidi controls, variation selectors) and control
  characters (vertical tab, form feed and the like become a line break); Unicode *tag*
  characters (U+E0020-U+E007E, "ASCII smuggling") read as the ASCII they encode;
* **homoglyphs**: Cyrillic, Greek, Armenian and small-capital lookalikes mapped to the
  Latin letter they imitate, case kept (:data:`UPPER_HOMOGLYPHS` for capitals,
  :data:`HOMOGLYPHS` for the rest: ``АKІA`` with Cyrillic А and І -> ``AKIA``). Every such
  character is mapped, so a Russian word becomes a string of Latin letters: only a text that
  then matches a pattern's full shape (a key's prefix, length and alphabet; a checksum) is
  a finding;
* **line breaks inside a token**: when a line break sits between two non-space characters
  (``AKIAQX7Z⏎R2LKVE3MB5TW``; the next line's indentation goes with it), a second view
  joins it up. A break after a space, or a blank line, is a word or paragraph boundary
  and stays. Detectors read both views (the first keeps every line boundary a
  keyword-near-number rule relies on), so joining can only add findings;
* **keys split by spaces** (``AKIA QX7Z R2LK VE3M B5TW``): a third view drops the spaces
  inside a run of three or more chunks that each have a digit, a capital or ``_`` (16
  characters or more joined; :func:`views`);
* **digits of other scripts** (Arabic-Indic ``٥٣٦``, Devanagari, ... any Unicode decimal
  digit) read as ASCII digits (fullwidth and mathematical digits are NFKD's already);

Every view carries a map from its characters back to the original offsets
(:meth:`View.origin`), computed only when a finding asks for it; an ASCII text without
control characters is its own first view.

**The sanitiser's folding** (:func:`fold`, :func:`fold_with_offsets`) matches phrases in a
*folded* form with a map from every folded character back to the original offset it came
from. The folded form is for matching only (nothing stored is ever folded). Stages, in order,
each a pure function of the previous stage's output:

1. **characters** (:data:`FOLD_TABLE`, one ``str.translate``): the shared view's characters
   (above), then case folded (and the lookalike table applied once more to what case
   folding produced). Patterns are folded the same way (:func:`fold_literal`).
2. **leetspeak**: inside a token that has a letter, ``0 1 3 4 5 7 8 9`` read as
   ``o i e a s t b g`` and ``@ $ ! | +`` (not at the token's end) as ``a s i i t``:
   ``1gn0r3 pr3v10u5`` -> ``ignore previous``; in a text with two or more words that have a
   digit between letters, all-digit words of up to three such digits too (``70`` -> ``to``).
   ``1`` and ``|`` stand for ``l`` as often as for ``i``: patterns accept ``i`` wherever they
   spell ``l`` (:func:`mnemovault.guard.patterns.L`).
3. **in-word punctuation**: ``- _ * ~ ` ^ '`` between two letters dropped (``ig-no_re``,
   ``don't`` -> ``dont``).
4. **letter spacing**: three or more single letters or digits separated by up to three of
   ``space . - _ * / · •`` are joined (``i g n o r e``, ``i.g.n.o.r.e``), a gap of two or more
   separators between them staying one space (``i g n o r e  a l l`` -> ``ignore all``); spaces
   between CJK characters are dropped.
5. **whitespace**: every run of whitespace becomes one space (one newline if it holds one).

Words that end up glued together (``ignoreallprevious``) are why the detector's patterns allow
an empty separator between words.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

HOMOGLYPHS: dict[str, str] = {
    # Cyrillic (lower case: the table is applied after case folding)
    "а": "a", "в": "b", "г": "r", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h",
    "о": "o", "п": "n", "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ь": "b", "і": "i",
    "ї": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l", "џ": "u",
    "ѡ": "w", "ү": "y", "ҡ": "k", "ԍ": "g", "ɡ": "g",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "η": "n", "ι": "i", "κ": "k", "μ": "u", "ν": "v",
    "ο": "o", "π": "n", "ρ": "p", "σ": "o", "ς": "c", "τ": "t", "υ": "u", "χ": "x", "ω": "w",
    "ϲ": "c", "ϳ": "j",
    # Armenian
    "օ": "o", "ս": "u", "ո": "n", "զ": "q", "հ": "h", "ց": "g", "ւ": "l",
    # Latin lookalikes NFKD leaves alone (small capitals, dotless i, script l, ...)
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɩ": "i", "ɪ": "i", "ʟ": "l", "ɴ": "n", "ʀ": "r", "ʏ": "y",
    "ʙ": "b", "ʜ": "h", "ɢ": "g", "ᴀ": "a", "ᴄ": "c", "ᴅ": "d", "ᴇ": "e", "ᴊ": "j", "ᴋ": "k",
    "ᴍ": "m", "ᴏ": "o", "ᴘ": "p", "ᴛ": "t", "ᴜ": "u", "ᴠ": "v", "ᴡ": "w", "ᴢ": "z", "ꜱ": "s",
    "ƅ": "b", "ɵ": "o", "ø": "o", "đ": "d", "ħ": "h", "ł": "l", "ŧ": "t", "ß": "ss",
    "æ": "ae", "œ": "oe", "þ": "th",
}
"""Lookalike letters and the Latin letter they imitate (applied after case folding)."""

UPPER_HOMOGLYPHS: dict[str, str] = {
    # Cyrillic capitals
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C",
    "Т": "T", "У": "Y", "Х": "X", "І": "I", "Ј": "J", "Ѕ": "S", "Ԛ": "Q", "Ԝ": "W", "Һ": "H",
    "Ӏ": "I", "Ү": "Y", "Ԍ": "G",
    # Greek capitals
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C", "Ϳ": "J",
    # Armenian capitals
    "Օ": "O", "Ս": "U",
}
"""Capital lookalikes and the Latin capital they imitate (the shared view keeps case; a
capital not listed is left to the sanitiser's case folding and :data:`HOMOGLYPHS`)."""

_DROP_CATEGORIES = frozenset({"Mn", "Me", "Cf", "Cc", "Co", "Cs", "Cn"})
_BREAKS = frozenset("\x0b\x0c\x1c\x1d\x1e\x1f\x85")  # control characters that end a line


def _canon_char(ch: str) -> str:
    """The shared view of one character (module docstring): case kept."""
    cp = ord(ch)
    if cp < 128:
        if 32 <= cp < 127 or ch in "\t\n\r":
            return ch
        return "\n" if ch in _BREAKS else ""
    if 0xE0020 <= cp <= 0xE007E:  # tag characters: invisible ASCII
        return chr(cp - 0xE0000)
    category = unicodedata.category(ch)
    if category == "Nd":  # a decimal digit of any script (Arabic-Indic, Devanagari, ...)
        return str(unicodedata.decimal(ch))
    if category in ("Zl", "Zp") or ch in _BREAKS:
        return "\n"
    if category == "Zs":
        return " "
    out = []
    for d in unicodedata.normalize("NFKD", ch):
        if unicodedata.category(d) in _DROP_CATEGORIES:
            continue
        out.append(UPPER_HOMOGLYPHS.get(d) or HOMOGLYPHS.get(d, d))
    return "".join(out)


def _fold_char(ch: str) -> str:
    """Stage 1 of the sanitiser's folding for one character: the shared view, case folded
    (see the module docstring)."""
    out = []
    for c in _canon_char(ch):
        if c < "\x80":
            out.append(c.lower())
            continue
        for d in unicodedata.normalize("NFKD", c.casefold()):
            if unicodedata.category(d) in _DROP_CATEGORIES:
                continue
            out.append(HOMOGLYPHS.get(d, d))
    return "".join(out)


class _Table(dict[int, str]):
    """A ``str.translate`` table computing (and caching) ``fn`` of each code point seen."""

    def __init__(self, fn: Callable[[str], str]) -> None:
        super().__init__()
        self._fn = fn

    def __missing__(self, cp: int) -> str:
        value = self._fn(chr(cp))
        if len(self) < 200_000:
            self[cp] = value
        return value


CANON_TABLE = _Table(_canon_char)
"""The shared view's characters as a ``str.translate`` table (filled lazily)."""

FOLD_TABLE = _Table(_fold_char)
"""Stage 1 of the folding as a ``str.translate`` table (filled lazily, one entry per code
point seen)."""

_PLAIN_RE = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f]*")
_BREAK_RE = re.compile(r"(?<=\S)\r?\n[ \t]*(?=\S)")


class View:
    """One normalised view of a text: ``text`` (what detectors read) and, for any span of
    it, the span of the original it came from (:meth:`origin`)."""

    __slots__ = ("_make", "_offsets", "source", "text")

    def __init__(self, source: str, text: str,
                 make_offsets: Callable[[], list[int]] | None) -> None:
        self.source = source
        self.text = text
        self._make = make_offsets
        self._offsets: list[int] | None = None

    @property
    def offsets(self) -> list[int] | None:
        """For each character of ``text``, the offset in ``source`` it came from (None:
        ``text`` is ``source``)."""
        if self._offsets is None and self._make is not None:
            self._offsets = self._make()
        return self._offsets

    def origin(self, start: int, end: int) -> tuple[int, int]:
        """The span of ``source`` that ``text[start:end]`` came from (``0 <= start <= end
        <= len(text)``; an empty span maps to an empty span)."""
        offsets = self.offsets
        if offsets is None:
            return start, end
        if start >= end:
            at = offsets[start] if start < len(offsets) else len(self.source)
            return at, at
        return offsets[start], offsets[end - 1] + 1


def _canon_offsets(text: str) -> list[int]:
    offsets: list[int] = []
    table = CANON_TABLE
    for i, ch in enumerate(text):
        offsets.extend([i] * len(table[ord(ch)]))
    return offsets


def canonical(text: str) -> str:
    """The first shared view's text (module docstring): one ``str.translate``."""
    if text.isascii() and _PLAIN_RE.fullmatch(text):
        return text
    return text.translate(CANON_TABLE)


_RUN_RE = re.compile(r"\S+(?:[ \t]\S+)+")
_CHUNK_RE = re.compile(r"[A-Za-z0-9_-]{2,12}")
MIN_UNSPLIT = 16
"""The shortest run of space-split chunks the unsplit view joins (characters, joined)."""


def _chunk(tok: str) -> bool:
    """A piece of a key split by spaces: 2-12 of ``A-Z a-z 0-9 _ -`` with a digit, a capital
    or an underscore (a lower-case word is prose)."""
    return bool(_CHUNK_RE.fullmatch(tok)) and any(c.isdigit() or c.isupper() or c == "_"
                                                  for c in tok)


def _unsplit(m: re.Match[str]) -> str:
    """Runs of three or more :func:`_chunk` tokens separated by single spaces or tabs, at
    least :data:`MIN_UNSPLIT` characters joined, with the separators dropped."""
    parts = re.split(r"([ \t])", m.group())
    toks, seps = parts[0::2], parts[1::2]
    out: list[str] = []
    i = 0
    while i < len(toks):
        j = i
        while j + 1 < len(toks) and _chunk(toks[j]) and _chunk(toks[j + 1]):
            j += 1
        if j - i >= 2 and sum(map(len, toks[i:j + 1])) >= MIN_UNSPLIT:
            out.append("".join(toks[i:j + 1]))
        else:
            j = i
            out.append(toks[i])
        if j < len(seps):
            out.append(seps[j])
        i = j + 1
    return "".join(out)


def views(text: str) -> tuple[View, ...]:
    """The shared views of ``text`` (module docstring): the normalised text; when a line
    break sits inside a token, the same with such breaks joined; when a key looks split
    by spaces (three or more chunks with a digit, a capital or ``_`` each, 16 characters
    or more joined: ``AKIA QX7Z R2LK VE3M B5TW``), the same with those spaces dropped.
    Detectors read every view; a finding in any one counts."""
    first_text = canonical(text)
    first = View(text, first_text, None if first_text is text else
                 lambda: _canon_offsets(text))
    out = [first]
    if "\n" in first_text and _BREAK_RE.search(first_text):

        def joined_offsets() -> list[int]:
            base = first.offsets or list(range(len(text)))
            return _sub_tracked(_BREAK_RE, _empty, first_text, base)[1]

        out.append(View(text, _BREAK_RE.sub("", first_text), joined_offsets))
    if " " in first_text or "\t" in first_text:
        unsplit = _RUN_RE.sub(_unsplit, first_text)
        if unsplit != first_text:

            def unsplit_offsets() -> list[int]:
                base = first.offsets or list(range(len(text)))
                return _sub_tracked(_RUN_RE, _unsplit, first_text, base)[1]

            out.append(View(text, unsplit, unsplit_offsets))
    return tuple(out)

LEET: dict[str, str] = {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b",
                        "9": "g", "@": "a", "$": "s", "!": "i", "|": "i", "+": "t"}
"""Stage 2: leetspeak characters read as letters inside a token with a letter."""

_LEET_SYMBOLS = frozenset("@$!|+")
_TOKEN = "a-z0-9@$!|+"
_LEET_RE = re.compile(rf"(?<![{_TOKEN}])[{_TOKEN}]*[01345789@$!|+][{_TOKEN}]*")


_MIXED_RE = re.compile(r"[a-z][01345789]+[a-z]")


def _leet(m: re.Match[str]) -> str:
    tok = m.group()
    if not any("a" <= c <= "z" for c in tok):
        return tok
    last = len(tok) - 1
    return "".join(LEET[c] if c in LEET and (i < last or c not in _LEET_SYMBOLS) else c
                   for i, c in enumerate(tok))


def _leet_all(m: re.Match[str]) -> str:
    """In a text written in leetspeak, short all-digit words are words too (``70`` = to)."""
    tok = m.group()
    if len(tok) <= 3 and tok.isdigit() and all(c in LEET for c in tok):
        return "".join(LEET[c] for c in tok)
    return _leet(m)


def _leet_repl(text: str) -> Callable[[re.Match[str]], str]:
    """Stage 2's replacement for ``text``: in leetspeak mode (two or more words with a
    digit between letters: ``y0ur r3ply``) short all-digit words are read too."""
    mixed = _MIXED_RE.search(text)
    if mixed and _MIXED_RE.search(text, mixed.end()):
        return _leet_all
    return _leet


_INWORD_RE = re.compile(r"(?<=[a-z])[\-_*~`^']{1,2}(?=[a-z])")
_SPACED_RE = re.compile(r"(?<![a-z0-9])[a-z0-9](?:[ .\-_*/·•]{1,3}[a-z0-9](?![a-z0-9])){2,}")
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_SPACE_RE = re.compile(rf"(?<=[{_CJK}])[ \t]+(?=[{_CJK}])")
_SPACE_RE = re.compile(r"\s{2,}|[^\S ]")


_WIDE_GAP_RE = re.compile(r"[ .\-_*/·•]{2,}")


def _letters(m: re.Match[str]) -> str:
    """A letter-spaced run joined; a wider gap (two or more separators) stays a space."""
    return " ".join("".join(c for c in word if c.isalnum())
                    for word in _WIDE_GAP_RE.split(m.group()))


def _empty(m: re.Match[str]) -> str:
    return ""


def _space(m: re.Match[str]) -> str:
    return "\n" if "\n" in m.group() else " "


_STAGES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_LEET_RE, _leet),
    (_INWORD_RE, _empty),
    (_SPACED_RE, _letters),
    (_CJK_SPACE_RE, _empty),
    (_SPACE_RE, _space),
)


_LEET_CHAR_RE = re.compile(r"[01345789@$!|+]")


_TAG_RUN_RE = re.compile("[\U000E0000-\U000E007F]+")


def _pad(m: re.Match[str]) -> str:
    return f" {m.group()} "


def fold(text: str) -> str:
    """The folded form of ``text`` (all five stages), without offsets: the fast path (it skips
    a stage that cannot change the text, and replaces with plain strings where it can; the
    result is the same as :func:`fold_with_offsets`'s)."""
    if not text.isascii() and _TAG_RUN_RE.search(text):
        text = _TAG_RUN_RE.sub(_pad, text)
    out = text.translate(FOLD_TABLE)
    if _LEET_CHAR_RE.search(out):
        out = _LEET_RE.sub(_leet_repl(out), out)
    out = _INWORD_RE.sub("", out)
    out = _SPACED_RE.sub(_letters, out)
    if not out.isascii():
        out = _CJK_SPACE_RE.sub("", out)
    if "  " in out or "\n" in out or "\t" in out or "\r" in out:
        out = _SPACE_RE.sub(_space, out)
    return out


def fold_with_offsets(text: str) -> tuple[str, list[int]]:
    """The folded form of ``text`` and, for each of its characters, the offset in ``text`` of
    the character it came from (same result as :func:`fold`)."""
    source = list(range(len(text)))
    if not text.isascii() and _TAG_RUN_RE.search(text):
        text, source = _sub_tracked(_TAG_RUN_RE, _pad, text, source)
    chars: list[str] = []
    offsets: list[int] = []
    table = FOLD_TABLE
    for i, ch in zip(source, text, strict=True):
        f = table[ord(ch)]
        if len(f) == 1:
            chars.append(f)
            offsets.append(i)
        elif f:
            chars.extend(f)
            offsets.extend([i] * len(f))
    out = "".join(chars)
    for rx, repl in _STAGES:
        if rx is _LEET_RE:
            repl = _leet_repl(out)
        out, offsets = _sub_tracked(rx, repl, out, offsets)
    return out, offsets


def _sub_tracked(rx: re.Pattern[str], repl: Callable[[re.Match[str]], str], text: str,
                 offsets: list[int]) -> tuple[str, list[int]]:
    """``rx.sub(repl, text)`` carrying ``offsets`` along: a replacement's characters are
    aligned greedily with the characters of the match they keep (every stage only maps one to
    one, deletes, or collapses); one it cannot align takes the match's first offset."""
    parts: list[str] = []
    new_offsets: list[int] = []
    last = 0
    for m in rx.finditer(text):
        s, e = m.span()
        r = repl(m)
        parts.append(text[last:s])
        new_offsets.extend(offsets[last:s])
        if len(r) == e - s:
            new_offsets.extend(offsets[s:e])
        else:
            j = s
            for c in r:
                k = text.find(c, j, e)
                if k < 0:
                    new_offsets.append(offsets[j] if j < e else offsets[e - 1])
                else:
                    new_offsets.append(offsets[k])
                    j = k + 1
        parts.append(r)
        last = e
    if not parts:
        return text, offsets
    parts.append(text[last:])
    new_offsets.extend(offsets[last:])
    return "".join(parts), new_offsets


def fold_literal(text: str) -> str:
    """A pattern's literal text folded as stage 1 folds input (so a Russian, Chinese or
    accented pattern word matches its folded input). ASCII is only lower-cased."""
    return "".join(c.lower() if ord(c) < 128 else FOLD_TABLE[ord(c)] for c in text)
