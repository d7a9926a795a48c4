"""Detection of personal values (``mnemovault.pii.detect``): per detector positives and
look-alikes that must not match, overlap resolution, known entities by fingerprint.

Pure Python: no database, no model. The card numbers are the networks' published test
PANs; phone numbers are from ranges set aside for drama/documentation where one exists.
"""

from __future__ import annotations

import importlib.util
import itertools
import pickle
import subprocess
import sys

import pytest

from mnemovault.pii.detect import (
    CardDetector,
    Detector,
    EmailDetector,
    Finding,
    IbanDetector,
    IpDetector,
    KnownEntityDetector,
    KnownEntityIndex,
    NerUnavailableError,
    OptionalNerDetector,
    PhoneDetector,
    default_detectors,
    detect_all,
    fingerprint,
    luhn_valid,
    normalise,
    token_count,
)

SECRET = b"s" * 32


def values(det: Detector, text: str) -> list[str]:
    found = det.detect(text)
    for f in found:
        assert text[f.start : f.end] == f.value
        assert f.detector == det.name
    return [f.value for f in found]


# Look-alikes no structured detector may report (brief + issue 3).
LOOK_ALIKES = [
    "Order #123456789012 has shipped",
    "order no. 4111111111111111 was refunded",
    "Invoice number: 2125550123",
    "on 2024-05-06 at noon",
    "on 06/05/2024 and 06.05.2024 and 06-05-2024",
    "version 1.2.3 and v10.0.19041 and build 10.0.19041.1",
    "at 12:30:45 exactly",
    "logged 2024-05-06T12:30:45Z and 2024-05-06 12:30:45",
    "request 123e4567-e89b-12d3-a456-426614174000 failed",
    "GUID {550e8400-e29b-41d4-a716-446655440000}",
    "the year 2024, the 1990s, 42 apples and 12345 points",
    "card 4111 1111 1111 1112 (bad Luhn)",
    "IBAN GB82 WEST 1234 5698 7654 33 (bad checksum)",
    "ids 1.2.3.4.5 and 300.1.1.1",
    "price 1,234,567.89 and 3.14159265",
    "ssn 123-45-6789 and zip 12345-6789",
    "icon@2x.png and sprite@3x.webp",
    "std::vector and dead::beef and Foo::bar()",
    "mac 00:1a:2b:3c:4d:5e",
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_are_not_detected(text: str) -> None:
    dets = default_detectors("US")
    assert detect_all(text, dets) == [], text


# -- Finding and the protocol ---------------------------------------------------------------


def test_finding_validates_itself() -> None:
    Finding(0, 3, "person", "Ann", 1.0, "known")
    with pytest.raises(ValueError):
        Finding(3, 3, "person", "", 1.0, "known")
    with pytest.raises(ValueError):
        Finding(0, 3, "Person", "Ann", 1.0, "known")
    with pytest.raises(ValueError):
        Finding(0, 3, "person", "Anne", 1.0, "known")
    with pytest.raises(ValueError):
        Finding(0, 3, "person", "Ann", 1.5, "known")


def test_builtin_detectors_satisfy_the_protocol() -> None:
    for det in [*default_detectors("GB"), KnownEntityIndex(SECRET)]:
        assert isinstance(det, Detector)


# -- Email ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to john.doe@example.com.", ["john.doe@example.com"]),
        ("<Jane_Roe+news@mail.example.co.uk>", ["Jane_Roe+news@mail.example.co.uk"]),
        ("mailto:ops-team@sub-domain.example.org?subject=x", ["ops-team@sub-domain.example.org"]),
        ("a@b.io, c.d@e-f.travel", ["a@b.io", "c.d@e-f.travel"]),
        ("José.Müller@bücher.de", ["José.Müller@bücher.de"]),
        ("email=me@example.com", ["me@example.com"]),
    ],
)
def test_email_positives(text: str, expected: list[str]) -> None:
    assert values(EmailDetector(), text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "user@localhost",
        "a..b@example.com",
        "trailing.@example.com",
        "x@-bad.com",
        "x@bad-.com",
        "x@under_score.com",
        "x@example.c0m",
        "x@example.c",
        "@example.com",
        "retina icon@2x.png",
        "x" * 65 + "@example.com",
        "@@@",
    ],
)
def test_email_negatives(text: str) -> None:
    assert values(EmailDetector(), text) == []


def test_email_is_linear_on_pathological_input() -> None:
    text = "a" * 200_000 + "@" + "b" * 200_000 + "." * 100_000
    assert EmailDetector().detect(text) == []


# -- Phone ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    [
        "+44 20 7946 0958",  # UK
        "+44 7911 123456",  # UK mobile
        "+49 30 901820",  # DE
        "+49 (0)30 90182012",  # DE with the trunk 0 in parentheses
        "+33 1 42 68 53 00",  # FR
        "+33 6 12 34 56 78",  # FR mobile
        "+91 98765 43210",  # IN
        "+91-22-2278-1234",  # IN landline
        "+55 11 98765-4321",  # BR
        "+55 (21) 2555-1234",  # BR
        "+81 3-1234-5678",  # JP
        "+81 90-1234-5678",  # JP mobile
        "+1 (415) 555-2671",  # US
        "+1-604-696-5272x565",  # CA with extension
        "0044 20 7946 0958",  # 00 international prefix
    ],
)
def test_phone_international(number: str) -> None:
    text = f"Reach me on {number}, thanks"
    assert values(PhoneDetector(), text) == [number]
    assert PhoneDetector().detect(text)[0].confidence == PhoneDetector.international_confidence


@pytest.mark.parametrize(
    ("region", "number"),
    [
        ("GB", "020 7946 0958"),
        ("GB", "07911 123456"),
        ("DE", "030 901820"),
        ("FR", "01 42 68 53 00"),
        ("IN", "098765 43210"),
        ("BR", "(11) 98765-4321"),
        ("JP", "03-1234-5678"),
        ("US", "(415) 555-2671"),
        ("US", "415.555.2671"),
        ("US", "415-555-2671 ext. 12"),
    ],
)
def test_phone_national_with_default_region(region: str, number: str) -> None:
    text = f"call {number} today"
    assert values(PhoneDetector(region), text) == [number]
    assert values(PhoneDetector(region.lower()), text) == [number]
    assert values(PhoneDetector(None), text) == []  # no country code, no default region


def test_phone_national_number_of_another_region_is_not_taken() -> None:
    assert values(PhoneDetector("US"), "call 020 7946 0958") == []


def test_phone_fallback_regions() -> None:
    text = "Phone:\n0490 75 40 81"
    assert values(PhoneDetector("US"), text) == []
    det = PhoneDetector("US", fallback_regions=["FR"])
    (f,) = det.detect(text)
    assert f.value == "0490 75 40 81"
    assert f.confidence == PhoneDetector.fallback_confidence
    # A weakly shaped fallback reading (two groups) needs a phone word before it ...
    assert values(PhoneDetector("US", fallback_regions=["DE"]), "lives at 17151 2450 Crown") == []
    assert values(PhoneDetector("US", fallback_regions=["DE"]), "call me on 467 3395") == [
        "467 3395"
    ]
    # ... and a bare digit run is read through a fallback region only after a phone word.
    assert values(PhoneDetector("US", fallback_regions=["DE"]), "id 3660170548") == []
    assert values(PhoneDetector("US", fallback_regions=["DE"]), "call 3660170548") == [
        "3660170548"
    ]


def test_phone_rejects_unknown_region() -> None:
    with pytest.raises(ValueError):
        PhoneDetector("XX")
    with pytest.raises(ValueError):
        PhoneDetector("US", fallback_regions=["UK"])  # GB is the code


@pytest.mark.parametrize(
    "text",
    [
        "+1 415 555 267",  # too short for the plan
        "+44 7700 900 12",
        "Order #2125550123",
        "ref: 4155552671",
        "12345678901234567890",  # more than 15 digits
        "id-4155552671",
        "4155552671abc",
        "http://x.test/4155552671/y",
        "2024-05-06",
        "2020-2024",
        "06.05.2024",
        "12.05.2024 - 19.05.2024",
        "1.2.3.4.5.6.7.8",
    ],
)
def test_phone_negatives(text: str) -> None:
    assert values(PhoneDetector("US"), text) == []
    assert values(PhoneDetector("DE"), text) == []


def test_phone_dates_are_not_numbers_even_where_the_plan_accepts_them() -> None:
    # German numbering accepts 20240506 as a number; as a date it must not be found.
    assert values(PhoneDetector("DE"), "am 2024-05-06 um 12:30:45") == []
    assert values(PhoneDetector("DE"), "am 2024.05.06") == []


# -- IBAN -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "iban",
    [
        "GB82 WEST 1234 5698 7654 32",
        "GB82WEST12345698765432",
        "DE89 3704 0044 0532 0130 00",
        "FR14 2004 1010 0505 0001 3M02 606",
        "NL91ABNA0417164300",
        "BE71 0961 2345 6769",
        "IT60 X054 2811 1010 0000 0123 456",
        "CH93 0076 2011 6238 5295 7",
    ],
)
def test_iban_positives(iban: str) -> None:
    text = f"IBAN: {iban}. Thanks"
    (f,) = IbanDetector().detect(text)
    assert f.value == iban and f.kind == "iban"
    assert f.confidence == IbanDetector.confidence


def test_iban_lowercase_and_run_on() -> None:
    (f,) = IbanDetector().detect("iban gb82west12345698765432 ok")
    assert f.value == "gb82west12345698765432"
    assert f.confidence == IbanDetector.lowercase_confidence
    text = "pay GB82 WEST 1234 5698 7654 32 EUR 10"
    assert values(IbanDetector(), text) == ["GB82 WEST 1234 5698 7654 32"]


@pytest.mark.parametrize(
    "text",
    [
        "GB82 WEST 1234 5698 7654 33",  # check digits wrong
        "GB82WEST12345698765433",
        "DE89 3704 0044 0532 0130 01",
        "XGB82WEST12345698765432",  # glued to a letter
        "GB82WEST1234569876543",  # one character short for GB
        "AB12 CDEF GHIJ KLMN",  # no such country
        "GB82 WE ST12 3456 9876 5432",  # groups not of four
    ],
)
def test_iban_negatives(text: str) -> None:
    assert values(IbanDetector(), text) == []


# -- Cards ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pan",
    [
        "4111111111111111",  # Visa 16
        "4222222222222",  # Visa 13
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "5555555555554444",  # Mastercard 51-55
        "2223000048400011",  # Mastercard 2-series
        "2720 9900 0000 0007",  # top of the 2-series (Luhn-valid)
        "378282246310005",  # Amex
        "3782 822463 10005",  # Amex grouping 4-6-5
        "6011111111111117",  # Discover
        "6500 0000 0000 0002",  # Discover 65
        "30569309025904",  # Diners 14
        "3530111333300000",  # JCB
        "6200000000000005",  # UnionPay
        "6759649826438453",  # Maestro UK
        "501864667909",  # Maestro, 12 digits
        "4131034282458809939",  # Visa, 19 digits
        "6762 1234 5678 9012 346",  # Maestro 19 in 4-4-4-4-3
    ],
)
def test_card_positives(pan: str) -> None:
    digits = pan.replace(" ", "").replace("-", "")
    assert luhn_valid(digits)
    assert values(CardDetector(), f"card: {pan}, exp 12/27") == [pan]


@pytest.mark.parametrize(
    "text",
    [
        "4111111111111112",  # Luhn fails
        "4111 1111 1111 1112",
        "1234567812345670",  # Luhn-valid, no issuer starts with 12
        "Order #123456789012",
        "order number 4111111111111111",
        "4111 1111-1111 1111",  # mixed separators
        "4111  1111  1111  1111",  # double spaces
        "41 11 11 11 11 11 11 11",  # groups not card-like
        "x4111111111111111",
        "4111111111111111y",
        "id-426614174000-4111111111111111",
        "3.4111111111111111",
        "55555555555544",  # Mastercard prefix at a wrong length
        "411111111111",  # Visa at 12 digits
    ],
)
def test_card_negatives(text: str) -> None:
    assert values(CardDetector(), text) == []


def test_card_run_on_number_is_cut_at_a_group() -> None:
    assert values(CardDetector(), "4111 1111 1111 1111 2027") == ["4111 1111 1111 1111"]


# -- IP -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ip",
    [
        "192.168.1.1",
        "8.8.8.8",
        "255.255.255.255",
        "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
        "2001:db8::8a2e:370:7334",  # RFC 5952 compressed
        "fe80::1",
        "::1",
        "::ffff:192.0.2.1",  # embedded IPv4
        "6e40:4041:c617:e898:c11:40d2:c669:2eb4",
    ],
)
def test_ip_positives(ip: str) -> None:
    text = f"from {ip}, again"
    assert [f.value for f in detect_all(text, [IpDetector()])] == [ip]


def test_ip_with_port_zone_and_cidr() -> None:
    assert values(IpDetector(), "host 10.0.0.7:8080 and 10.1.0.0/16") == ["10.0.0.7", "10.1.0.0"]
    assert values(IpDetector(), "link fe80::1%eth0 up") == ["fe80::1"]
    assert values(IpDetector(), "[2001:db8::1]:443") == ["2001:db8::1"]


@pytest.mark.parametrize(
    "text",
    [
        "1.2.3",
        "1.2.3.4.5",
        "256.1.1.1",
        "01.02.03.04",  # leading zeros are ambiguous (octal), ipaddress refuses them
        "version 1.2.3.4",
        "v1.2.3.4",
        "12:30:45",
        "2024-05-06T12:30:45Z",
        "00:1a:2b:3c:4d:5e",
        "1:2:3:4:5:6:7:8:9",
        "dead::beef",
        "a::b::c",
        "std::add",
    ],
)
def test_ip_negatives(text: str) -> None:
    assert values(IpDetector(), text) == []


# -- Overlaps -------------------------------------------------------------------------------


class Fixed:
    """A detector that returns given spans (the protocol is all it needs)."""

    def __init__(self, name: str, spans: list[tuple[int, int, str, float]]) -> None:
        self.name = name
        self.spans = spans

    def detect(self, text: str) -> list[Finding]:
        return [Finding(s, e, k, text[s:e], c, self.name) for s, e, k, c in self.spans]


def test_overlap_longest_wins_and_contained_findings_drop() -> None:
    text = "0123456789abcdef"
    a = Fixed("a", [(2, 6, "phone", 0.99)])
    b = Fixed("b", [(0, 10, "card", 0.5)])
    out = detect_all(text, [a, b])
    assert [(f.start, f.end, f.kind, f.detector) for f in out] == [(0, 10, "card", "b")]


def test_overlap_tie_on_length_goes_to_confidence_then_detector_order() -> None:
    text = "0123456789"
    hi = Fixed("hi", [(0, 8, "card", 0.95)])
    lo = Fixed("lo", [(0, 8, "phone", 0.75)])
    assert [f.kind for f in detect_all(text, [lo, hi])] == ["card"]
    first = Fixed("first", [(0, 8, "person", 0.9)])
    second = Fixed("second", [(0, 8, "account", 0.9)])
    assert [f.kind for f in detect_all(text, [first, second])] == ["person"]
    assert [f.kind for f in detect_all(text, [second, first])] == ["account"]


def test_partial_overlap_is_merged_so_nothing_is_half_replaced() -> None:
    text = "Alice Smith@example.com"
    a = Fixed("known", [(0, 11, "person", 1.0)])
    b = Fixed("email", [(6, 23, "email", 0.95)])
    (f,) = detect_all(text, [a, b])
    assert (f.start, f.end, f.kind, f.value) == (0, 23, "email", text)
    # Chains merge transitively; touching spans do not.
    c = Fixed("c", [(0, 3, "x", 0.5), (2, 5, "y", 0.5), (4, 7, "z", 0.6), (7, 9, "w", 0.5)])
    out = detect_all("abcdefghij", [c])
    assert [(f.start, f.end, f.kind) for f in out] == [(0, 7, "z"), (7, 9, "w")]


def test_detect_all_is_sorted_deterministic_and_disjoint() -> None:
    text = (
        "Mail a.b@example.com or +44 20 7946 0958; card 4111 1111 1111 1111; "
        "IBAN GB82 WEST 1234 5698 7654 32 from 192.168.0.1 and Ann Lee."
    )
    known = KnownEntityDetector([("person", "ann lee")])
    dets = default_detectors("GB", known)
    out = detect_all(text, dets)
    assert [f.kind for f in out] == ["email", "phone", "card", "iban", "ip", "person"]
    assert all(x.end <= y.start for x, y in itertools.pairwise(out))
    assert out == detect_all(text, dets)
    assert detect_all(text, list(reversed(dets))) == out  # no ties here: order-free


def test_detect_all_rejects_findings_not_in_the_text() -> None:
    class Liar:
        name = "liar"

        def detect(self, text: str) -> list[Finding]:
            return [Finding(0, 3, "person", "Bob", 1.0, self.name)]

    with pytest.raises(ValueError, match="liar"):
        detect_all("Ann is here", [Liar()])
    assert detect_all("", default_detectors()) == []


def test_card_beats_phone_on_the_same_digits() -> None:
    text = "pay 4111 1111 1111 1111 now"
    (f,) = detect_all(text, [PhoneDetector("US"), CardDetector()])
    assert f.kind == "card"


# -- Known entities -------------------------------------------------------------------------


def test_normalise() -> None:
    assert normalise("  Dr. JOHN\n  O’Brien, ") == "dr. john o'brien"
    assert normalise("ＪＯＨＮ") == "john"  # NFKC full-width
    assert normalise("Straße") == normalise("STRASSE")  # casefold
    assert normalise("Jose\u0301") == normalise("José")  # combining mark stays in the token
    assert normalise("...") == ""
    assert token_count("Ann-Marie  van der Berg") == 5
    assert token_count("!!") == 0


def test_known_entities_case_whitespace_and_line_breaks() -> None:
    idx = KnownEntityIndex(SECRET)
    idx.add("person", "John  Smith")
    idx.add("address", "12 Main St.")
    idx.add("account", "ACC-0042-77")
    text = "Hi JOHN\n  smith, you live at 12 MAIN st. (acc-0042-77)! john smithson is not you."
    found = idx.detect(text)
    got = [(f.kind, f.value, f.start, f.end) for f in found]
    s1 = text.index("JOHN")
    s2 = text.index("12 MAIN st")
    s3 = text.index("acc-0042-77")
    assert got == [
        ("person", "JOHN\n  smith", s1, s1 + len("JOHN\n  smith")),
        ("address", "12 MAIN st", s2, s2 + len("12 MAIN st")),
        ("account", "acc-0042-77", s3, s3 + len("acc-0042-77")),
    ]
    for f in found:
        assert text[f.start : f.end] == f.value
        assert f.detector == "known" and f.confidence == 1.0


def test_known_entities_match_whole_tokens_only() -> None:
    idx = KnownEntityDetector([("person", "Ann")], secret=SECRET)
    assert values(idx, "Anne and Joanna") == []
    assert values(idx, "Ann's car; ANN-Marie") == ["Ann", "ANN"]


def test_known_entities_typographic_variants_and_unicode() -> None:
    idx = KnownEntityDetector([("person", "O'Brien"), ("person", "José Núñez")], secret=SECRET)
    decomposed = "Jose\u0301 Nu\u0301n\u0303ez"
    assert values(idx, "Mr O’Brien met JOSÉ  NÚÑEZ and " + decomposed) == [
        "O’Brien",
        "JOSÉ  NÚÑEZ",
        decomposed,
    ]


def test_known_entities_overlap_resolved_to_the_longest() -> None:
    idx = KnownEntityDetector([("person", "Mary"), ("person", "Mary Ann Lee")], secret=SECRET)
    text = "Ask Mary Ann Lee, not Mary."
    out = detect_all(text, [idx])
    assert [f.value for f in out] == ["Mary Ann Lee", "Mary"]


def test_fingerprints_are_keyed_and_normalised() -> None:
    a = fingerprint("John Smith", b"a" * 32)
    assert a == fingerprint("  john\n SMITH. ", b"a" * 32)
    assert a != fingerprint("John Smith", b"b" * 32)
    assert len(a) == 32
    idx = KnownEntityIndex(b"a" * 32)
    assert idx.fingerprint("JOHN smith") == a
    assert idx.add("person", "John Smith").fingerprint == a
    assert "john  smith" in idx and "john smit" not in idx


def test_known_index_keeps_no_plaintext_and_reloads_from_fingerprints() -> None:
    secret = b"k" * 32
    idx = KnownEntityIndex(secret)
    names = ["Zebulon Quartermaine", "Xanthippe Oyelaran-Brightwater", "9 Quince Lane"]
    stored = [idx.add("person", n) for n in names]
    blob = pickle.dumps(idx.__dict__)
    for n in names:
        for token in normalise(n).split():
            assert token.encode() not in blob
            assert token.encode("utf-16-le") not in blob
    text = "Note: zebulon quartermaine and XANTHIPPE oyelaran-brightwater at 9 quince lane."
    expected = [f.value for f in idx.detect(text)]
    assert len(expected) == 3

    with_head = KnownEntityIndex(secret)
    without_head = KnownEntityIndex(secret)
    for e in stored:
        with_head.add_fingerprint(e.kind, e.fingerprint, e.n_tokens, e.head)
        without_head.add_fingerprint(e.kind, e.fingerprint, e.n_tokens)
    assert [f.value for f in with_head.detect(text)] == expected
    assert [f.value for f in without_head.detect(text)] == expected
    assert [f.value for f in KnownEntityIndex(b"other" * 8).detect(text)] == []
    other = KnownEntityIndex(b"other" * 8)
    for e in stored:  # fingerprints under another secret match nothing
        other.add_fingerprint(e.kind, e.fingerprint, e.n_tokens, e.head)
    assert other.detect(text) == []


def test_known_index_discard_and_kinds() -> None:
    idx = KnownEntityIndex(SECRET)
    e = idx.add("person", "Ann Lee")
    idx.add("account", "ann  lee")  # same fingerprint: smallest kind kept, one entry
    assert len(idx) == 1
    assert [f.kind for f in idx.detect("ann lee")] == ["account"]
    assert idx.discard(e.fingerprint) and not idx.discard(e.fingerprint)
    assert idx.detect("ann lee") == [] and len(idx) == 0


def test_known_index_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        KnownEntityIndex(b"short")
    idx = KnownEntityIndex(SECRET)
    with pytest.raises(ValueError):
        idx.add("person", " ,. ")
    with pytest.raises(ValueError):
        idx.add("Person", "Ann")
    with pytest.raises(ValueError):
        idx.add_fingerprint("person", b"x" * 31, 1)
    with pytest.raises(ValueError):
        idx.add_fingerprint("person", b"x" * 32, 0)


def test_known_entity_detector_from_pairs_draws_a_secret() -> None:
    a = KnownEntityDetector([("person", "Ann Lee")])
    b = KnownEntityDetector([("person", "Ann Lee")])
    assert values(a, "hello ann lee") == ["ann lee"] == values(b, "hello ann lee")
    assert a.fingerprint("Ann Lee") != b.fingerprint("Ann Lee")


def test_known_entities_on_a_long_text() -> None:
    idx = KnownEntityDetector(
        [("person", f"Person{i} Surname{i}") for i in range(1000)], secret=SECRET
    )
    text = ("lorem ipsum dolor sit amet, " * 2000) + "person999 SURNAME999."
    out = idx.detect(text)
    assert [f.value for f in out] == ["person999 SURNAME999"]


# -- Optional NER ---------------------------------------------------------------------------


@pytest.mark.skipif(
    importlib.util.find_spec("presidio_analyzer") is not None, reason="presidio is installed"
)
def test_ner_without_the_extra_raises_a_clear_import_error() -> None:
    with pytest.raises(ImportError, match=r"mnemovault\[ner\]") as info:
        OptionalNerDetector()
    assert isinstance(info.value, NerUnavailableError)


def test_ner_is_not_in_the_default_detectors() -> None:
    assert all(not isinstance(d, OptionalNerDetector) for d in default_detectors("US"))


def test_importing_the_package_pulls_no_detection_dependencies() -> None:
    code = (
        "import sys, mnemovault.pii; "
        "assert not {'phonenumbers', 'stdnum', 'presidio_analyzer', 'spacy'} & set(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
