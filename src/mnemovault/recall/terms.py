"""The lexical terms of a text, as keyed hashes (issue 21 item 2): the database never sees
a word of a memory in its full-text columns, postings or statistics.

Two steps, both here:

* :func:`analyse` reproduces PostgreSQL's ``to_tsvector('english', text)`` in Python: the
  default parser's token kinds that carry words (ASCII and non-ASCII words, hyphenated
  words giving the whole word and then each part, numbers signed and decimal, versions,
  hosts, emails, URLs with their host and path, file paths), case folding, the english
  configuration's dictionaries (Snowball's English stemmer with PostgreSQL's english stop
  words for words, the ``simple`` dictionary for the rest), and positions counted as
  PostgreSQL counts them (every token a dictionary sees takes a position, stop words
  included; a lexeme keeps at most 255 positions, none above 16,383). Parity with
  PostgreSQL on the LoCoMo turns is measured by ``bench/locomo_recall.py --parity``.
* :func:`hash_lexeme` turns each lexeme into HMAC-SHA256 under the tenant's term key
  (:func:`term_key`, derived from the tenant's secret like the forget-query key of
  :mod:`mnemovault.governance.forget`: the secret is wrapped by the KEK and re-wrapped by
  its rotation), truncated to 72 bits and written as 12 characters of unpadded base64url,
  a valid tsvector lexeme. Equal terms give equal hashes within a tenant, so BM25 (term
  and document frequencies, lengths) works unchanged on the hashes; without the KEK a
  hash cannot be confirmed by guessing a word.

:func:`document` gives what ``memories.tsv`` and ``memories.tsv_length`` hold (the
tsvector literal of the hashed lexemes and their count), :func:`query` the distinct
hashed lexemes of a query (what :mod:`mnemovault.store.search` matches).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import Stemmer

from mnemovault.pii.vault import PiiVault

__all__ = ["ENGLISH_STOP_WORDS", "analyse", "document", "hash_lexeme", "query", "tenant_key",
           "term_key"]

# PostgreSQL's ``tsearch_data/english.stop`` (Snowball's original English list), in order
_STOP_TEXT = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom
this that these those am is are was were be been being have has had having do does did
doing a an the and but if or because as until while of at by for with about against
between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more
most other some such no nor not only own same so than too very s t can will just don
should now
"""
ENGLISH_STOP_WORDS = frozenset(_STOP_TEXT.split())

MAX_POSITION = 16383  # PostgreSQL's MAXENTRYPOS - 1: later positions are all this one
MAX_POSITIONS = 255  # positions kept per lexeme (MAXNUMPOS - 1)
MAX_WORD_BYTES = 2047  # longer tokens are not indexed (MAXSTRLEN)

_STEMMER = Stemmer.Stemmer("english")
_STEM_CACHE: dict[str, str] = {}

_TERM_KEY_LABEL = b"mnemovault/lexical/term"

# -- the parser ------------------------------------------------------------------------
# A letter is what str.isalpha() says (PostgreSQL asks iswalpha in a UTF-8 database).
_L = r"[^\W\d_]"
_AN = r"[^\W_]"  # a letter or a digit
# Atomic and possessive where a run of letters or digits is read: without them a long
# run (a 100,000-letter "word") backtracks through every split of itself in ``host`` and
# ``hword`` before ``word`` takes it (quadratic: minutes of CPU for one long memory).
# What follows a label or a word part (a dot, a hyphen, the end) is never a letter or a
# digit, so giving characters back could not have let the match succeed: the same tokens.
_LABEL = rf"(?>{_AN}+(?:-{_AN}+)*)"
_PART = rf"(?=\d*{_L}){_AN}++"  # a run of letters and digits with a letter in it
_HOST = rf"{_LABEL}(?:\.{_LABEL})+"
_PATH_CHARS = r"[A-Za-z0-9_\-./~%+=&?#;:@!$,*']"
_TOKEN = re.compile(rf"""
  (?P<tag></?[A-Za-z][A-Za-z0-9:_-]*(?:\s[^<>]*)?/?>)
| (?P<email>[A-Za-z0-9][A-Za-z0-9._+\-]*@{_HOST})
| (?P<url>(?:https?|ftp)://(?P<uhost>{_HOST}|{_AN}+)(?P<upath>/{_PATH_CHARS}*)?)
| (?P<file>(?:~?/)[A-Za-z0-9_\-.~]+(?:/[A-Za-z0-9_\-.~]+)*
           |[A-Za-z0-9_\-.~]+(?:/[A-Za-z0-9_\-.~]+)+)
| (?P<dots>(?<=[^\W_])\.\.(?=\s|$))
| (?P<sfloat>-?\d+(?:\.\d+)?[eE][+-]?\d+(?![^\W_]))
| (?P<version>\d+(?:\.\d+){{2,}}(?![^\W_]))
| (?P<float>-?\d+\.\d+(?![^\W_]))
| (?P<host>{_HOST})
| (?P<hword>{_PART}(?:-{_PART})+)
| (?P<int>-\d+(?![^\W_]))
| (?P<word>{_AN}+)
""", re.VERBOSE)


def _stem(word: str) -> str | None:
    """The english dictionary (Snowball): None for a stop word, else the stem."""
    if word in ENGLISH_STOP_WORDS:
        return None
    stem = _STEM_CACHE.get(word)
    if stem is None:
        stem = _STEMMER.stemWord(word)
        if len(_STEM_CACHE) < 200_000:
            _STEM_CACHE[word] = stem
    return stem


def _is_word(token: str) -> bool:
    """Letters only (asciiword / word): the english stemmer; else (numword...) simple."""
    return token.isalpha()


def _tokens(text: str) -> Iterator[str | None]:
    """The lexemes of ``text`` in order, one item per position: a lexeme, or None for a
    stop word (it takes a position and adds nothing)."""
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        tok = m.group(0)
        if len(tok.encode("utf-8")) > MAX_WORD_BYTES:
            continue
        if kind == "tag":  # markup: no lexeme, no position
            continue
        low = tok.lower()
        if kind == "url":
            yield low[low.index("://") + 3:]
            yield m.group("uhost").lower()
            if m.group("upath"):
                yield m.group("upath").lower()
        elif kind == "hword":
            parts = low.split("-")
            if all(p.isalpha() for p in parts):
                yield _stem(low)
                for p in parts:
                    yield _stem(p)
            else:  # numhword: the whole word and its parts, words stemmed, others as they are
                yield low
                for p in parts:
                    yield _stem(p) if p.isalpha() else p
        elif kind == "word":
            yield _stem(low) if _is_word(low) else low
        else:  # email, file, numbers: the simple dictionary
            yield low


def analyse(text: str) -> dict[str, list[int]]:
    """``to_tsvector('english', text)`` as lexeme -> positions (sorted, distinct)."""
    out: dict[str, list[int]] = {}
    pos = 0
    for lexeme in _tokens(text):
        pos += 1
        if lexeme is None or lexeme == "":
            continue
        p = min(pos, MAX_POSITION)
        have = out.get(lexeme)
        if have is None:
            out[lexeme] = [p]
        elif len(have) < MAX_POSITIONS and have[-1] != p:
            have.append(p)
    return out


# -- keyed hashes ------------------------------------------------------------------------
def term_key(fingerprint_key: bytes) -> bytes:
    """The tenant's term key, from its fingerprint key (:class:`~mnemovault.pii.vault.
    TenantKeys`) for this one purpose."""
    return hmac.new(fingerprint_key, _TERM_KEY_LABEL, hashlib.sha256).digest()


def tenant_key(vault: PiiVault, conn: psycopg.Connection[Any], tenant: str, *,
               create: bool = True) -> bytes | None:
    """The tenant's term key (its secret created on first use when ``create``; without
    it, None for a tenant that has none yet: it has no keyed terms either)."""
    keys = (vault.tenant_keys(conn, tenant) if create
            else vault.existing_tenant_keys(conn, tenant))
    return term_key(keys.fingerprint_key) if keys is not None else None


def hash_lexeme(key: bytes, lexeme: str) -> str:
    """The lexeme's keyed hash: the first 72 bits of HMAC-SHA256 under ``key``, as 12
    characters of base64url (letters, digits, ``-`` and ``_``)."""
    digest = hmac.digest(key, lexeme.encode("utf-8"), "sha256")
    return base64.urlsafe_b64encode(digest[:9]).decode("ascii")


def document(key: bytes, text: str) -> tuple[str, int]:
    """What ``memories.tsv`` and ``tsv_length`` hold for ``text``: the tsvector literal of
    its hashed lexemes with their positions, and the number of distinct lexemes."""
    lexemes = analyse(text)
    parts = [f"{hash_lexeme(key, lx)}:{','.join(map(str, pos))}"
             for lx, pos in lexemes.items()]
    return " ".join(parts), len(parts)


def query(key: bytes, text: str) -> list[str]:
    """The distinct hashed lexemes of a query text (sorted): the terms recall matches."""
    return sorted({hash_lexeme(key, lx) for lx in analyse(text)})
