"""Detection of personal values in free text (SPEC section 3, issue 3 item 1).

Pure Python, no model and no database. Every detector maps ``text -> list[Finding]``; a
:class:`Finding` is a half-open character span ``[start, end)`` of ``text`` with its
``value == text[start:end]``, a ``kind`` (``email``, ``phone``, ``iban``, ``card``, ``ip``
or a caller's kind such as ``person``), a confidence in ``[0, 1]`` and the detector's name.
:func:`detect_all` runs several detectors and resolves overlaps into disjoint spans.

:func:`detect_all` runs the detectors on a folded view of the text (:func:`fold`: zero-width
characters and soft hyphens dropped, full-width and other compatibility forms of letters,
digits and punctuation folded to ASCII) and maps each finding back to the original text, its
span covering the disguised value exactly. Each finding carries its value's *identity*
(:attr:`Finding.identity`: a card's digits, a phone's E.164, an IBAN compact in upper case,
an address case-folded, an IP compressed, a known entity's normal form), which the vault
uses as the value's fingerprint and placeholder input, so every written form of one value
is one vault entry.

Built-in detectors, each validating its candidates rather than trusting a regex alone
(precision first: a look-alike left in the text is cheaper to fix than a memory whose
order number became a placeholder, but a value that *is* found is never cut in half):

- :class:`EmailDetector`: a simplification of RFC 5321/5322 ``addr-spec`` (dot-atom local
  part, DNS host name with an alphabetic or punycode TLD), anchored on each ``@`` so it
  stays linear.
- :class:`PhoneDetector`: one regex for candidate digit runs, each validated by
  ``phonenumbers.parse`` + ``is_valid_number`` (libphonenumber metadata), with the
  caller's default region (and optional fallback regions) for numbers written without a
  country code; a run that is several numbers is split into them, a postal code in front
  of a number is left out of its span, ``tel:``/``sms:``/``wa.me/`` links are read.
- :class:`IbanDetector`: ISO 13616 via ``stdnum.iban`` (mod-97 check digits and the
  country's BBAN format; national checks not required), compact or in groups of four
  separated by spaces or dashes.
- :class:`CardDetector`: 12-19 digits, Luhn (ISO/IEC 7812-1 annex B), a known issuer
  prefix (IIN) and a length that issuer uses, or any issuer after a card word; groups
  separated consistently (a line break may stand for a separator); several in a row.
- :class:`IpDetector`: IPv4 dotted quads and IPv6 (RFC 4291 section 2.2 text forms,
  including RFC 5952 compressed ``::`` and embedded IPv4), validated by ``ipaddress``;
  eight bare one- or two-digit groups (``1:2:3:4:5:6:7:8``) are not an address.
- :class:`KnownEntityIndex`: values the tenant already knows (names, addresses, account
  numbers), matched by keyed fingerprints ``HMAC-SHA256(secret, normalise(value))`` of
  word n-grams, so no plaintext list is kept outside the vault.
- :class:`OptionalNerDetector`: Presidio + a spaCy model the deployer installed (the
  ``ner`` extra), off by default; it never downloads a model.

Layout (arrows point down only: every module imports only :mod:`~.base` from this
package, none imports this package's ``__init__``, and ``__init__`` imports them all):

- ``base.py``: :data:`KIND_RE`, :class:`Finding`, the :class:`Detector` protocol, the text
  helpers the detectors share, the folded view :func:`fold`, and the comparison form
  :func:`normalise`, :func:`token_count` and :func:`fingerprint`.
- ``email.py``: :class:`EmailDetector`.
- ``phone.py``: :class:`PhoneDetector`.
- ``iban.py``: :class:`IbanDetector`.
- ``card.py``: :class:`CardDetector` and :func:`luhn_valid`.
- ``ip.py``: :class:`IpDetector`.
- ``known.py``: :class:`KnownEntity`, :class:`KnownEntityIndex`,
  :class:`KnownEntityDetector`.
- ``ner.py``: :class:`OptionalNerDetector`, :class:`NerUnavailableError` (the ``ner``
  extra; presidio/spaCy are imported only when the detector is built).
- ``resolve.py``: :func:`detect_all`, the overlap resolution.
- ``__init__.py`` (here): the public names below and :func:`default_detectors`.

The protocol: a detector is any object with a ``name: str`` and a thread-safe
``detect(text) -> list[Finding]`` whose findings satisfy
``text[f.start:f.end] == f.value`` (they may overlap; :func:`detect_all` resolves that).
No base class is needed: :class:`Detector` is a runtime-checkable :class:`typing.Protocol`.

Adding a detector: create ``<kind>.py`` next to the others holding the class and its
private regexes and helpers, importing only from :mod:`mnemovault.pii.detect.base` (move a
helper into ``base`` once a second detector needs it); re-export the class here and add it
to ``__all__``; add it to :func:`default_detectors` only if it is model-free and precise
enough to run on every text (its position there is its precedence for ties).
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemovault.pii.detect.base import KIND_RE as KIND_RE
from mnemovault.pii.detect.base import (
    Detector,
    Finding,
    fingerprint,
    fold,
    normalise,
    token_count,
)
from mnemovault.pii.detect.card import CardDetector, luhn_valid
from mnemovault.pii.detect.email import EmailDetector
from mnemovault.pii.detect.iban import IbanDetector
from mnemovault.pii.detect.ip import IpDetector
from mnemovault.pii.detect.known import KnownEntity, KnownEntityDetector, KnownEntityIndex
from mnemovault.pii.detect.ner import DEFAULT_NER_KINDS as DEFAULT_NER_KINDS
from mnemovault.pii.detect.ner import NER_EXTRA as NER_EXTRA
from mnemovault.pii.detect.ner import NerUnavailableError, OptionalNerDetector
from mnemovault.pii.detect.phone import PhoneDetector
from mnemovault.pii.detect.resolve import detect_all

__all__ = [
    "CardDetector",
    "Detector",
    "EmailDetector",
    "Finding",
    "IbanDetector",
    "IpDetector",
    "KnownEntity",
    "KnownEntityDetector",
    "KnownEntityIndex",
    "NerUnavailableError",
    "OptionalNerDetector",
    "PhoneDetector",
    "default_detectors",
    "detect_all",
    "fingerprint",
    "fold",
    "luhn_valid",
    "normalise",
    "token_count",
]


# ---------------------------------------------------------------------------------------
# Convenience
# ---------------------------------------------------------------------------------------


def default_detectors(
    default_region: str | None = None,
    known: KnownEntityIndex | None = None,
    *,
    fallback_regions: Sequence[str] = (),
) -> list[Detector]:
    """The built-in model-free detectors in precedence order for ties: known entities
    (if given), IBAN, card, email, IP, phone."""
    out: list[Detector] = [] if known is None else [known]
    out += [
        IbanDetector(),
        CardDetector(),
        EmailDetector(),
        IpDetector(),
        PhoneDetector(default_region, fallback_regions=fallback_regions),
    ]
    return out
