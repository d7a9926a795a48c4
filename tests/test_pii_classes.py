"""Whole classes of PII detection misses (issue 9, fault 5), one section per class.

Each class has unit tests on ``detect_all`` and the detectors (positives and the look-alikes
that must stay text) and a disk test through the real service: the values are remembered,
the database is checkpointed and every file of the data directory is searched for each
written form of each value and for its identity (digits, compact IBAN...).

1. several values of one kind in a row, separated by single spaces;
2. one value written in several formats (one identity, one vault entry, one shred);
3. obfuscation inside a value (zero-width characters, soft hyphens, full-width forms,
   homoglyphs in names, line breaks inside a grouped number);
4. formats that were missed (dashed and national-check-failing IBANs, cards of unlisted
   issuers announced as cards, ``tel:``/``wa.me`` links, punycode e-mail domains);
5. false findings (digit groups of a malformed IBAN, a postal code swallowed by a phone
   number, ``1:2:3:4:5:6:7:8`` read as IPv6).

Values on disk are drawn at random per run (Luhn-valid cards, mod-97-valid IBANs, numbers
in Ofcom's drama range 020 7946 0xxx), so another test's clear text cannot match them.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from stdnum import iban as stdnum_iban

from mnemovault.config import Settings
from mnemovault.pii.detect import (
    CardDetector,
    Detector,
    EmailDetector,
    Finding,
    IbanDetector,
    IpDetector,
    KnownEntityDetector,
    KnownEntityIndex,
    PhoneDetector,
    default_detectors,
    detect_all,
    fold,
    luhn_valid,
    normalise,
)
from mnemovault.pii.vault import ERASED, PLACEHOLDER_RE, TenantKeys
from mnemovault.vault import MemoryVault

SECRET = b"s" * 32
ZW = "\u200b"  # zero-width space
SHY = "\u00ad"  # soft hyphen


def product_detectors(known: KnownEntityIndex | None = None) -> list[Detector]:
    """The detectors the service runs with its default settings."""
    fields = Settings.model_fields
    factory = fields["phone_fallback_regions"].default_factory
    fallback = list(factory()) if factory is not None else []
    return default_detectors(fields["phone_default_region"].default, known,
                             fallback_regions=fallback)


DETS = product_detectors()


def found(text: str, dets: list[Detector] | None = None) -> list[tuple[str, str]]:
    out = detect_all(text, DETS if dets is None else dets)
    for f in out:
        assert text[f.start : f.end] == f.value
    return [(f.kind, f.value) for f in out]


def only(text: str, dets: list[Detector] | None = None) -> Finding:
    out = detect_all(text, DETS if dets is None else dets)
    assert len(out) == 1, [(f.kind, f.value) for f in out]
    return out[0]


# =========================================================================================
# 1. Several values of one kind in a row
# =========================================================================================

IN_A_ROW = [
    ["4111111111111111", "5555555555554444", "378282246310005"],
    ["4111 1111 1111 1111", "5555 5555 5555 4444", "3782 822463 10005"],
    ["4111-1111-1111-1111", "5555-5555-5555-4444"],
    ["020 7946 0958", "020 7946 0959", "020 7946 0960"],
    ["(415) 555-2671", "(415) 555-2672"],
    ["415-555-2671", "415-555-2672"],
    ["+44 20 7946 0958", "020 7946 0959"],
    ["GB82 WEST 1234 5698 7654 32", "DE89 3704 0044 0532 0130 00"],
    ["BE71 0961 2345 6769", "BE68 5390 0754 7034"],  # groups of four to the end
    ["GB82WEST12345698765432", "DE89370400440532013000"],
    ["GB82-WEST-1234-5698-7654-32", "DE89-3704-0044-0532-0130-00"],
    ["a@example.com", "b.c@example.org", "d@example.net"],
    ["10.0.0.1", "10.0.0.2", "2001:db8::1", "2001:db8::2"],
]


@pytest.mark.parametrize("values", IN_A_ROW, ids=lambda v: v[0])
def test_every_value_of_a_row_is_found(values: list[str]) -> None:
    text = "list: " + " ".join(values) + " end"
    assert [v for _, v in found(text)] == values
    assert [v for _, v in found(" ".join(values))] == values  # nothing around them


def test_a_card_after_a_short_number_a_date_or_a_failed_card_is_found() -> None:
    assert found("pin 1234 4111111111111111") == [("card", "4111111111111111")]
    assert found("exp 12 27 4111 1111 1111 1111") == [("card", "4111 1111 1111 1111")]
    assert found("4111111111111111\n5555555555554444") == [
        ("card", "4111111111111111"), ("card", "5555555555554444")]
    assert found("4111 1111 1111 1112 5555 5555 5555 4444") == [("card", "5555 5555 5555 4444")]
    assert found("4111111111111111,5555555555554444") == [
        ("card", "4111111111111111"), ("card", "5555555555554444")]
    assert found("1,234,567,890,123,456,789 and 4,111111111111111") == []


@pytest.mark.parametrize("text", [
    "serial 1234 5678 9012 3456 7890",  # a grouped run with no card at its start
    "4111 1111 1111 1111 2027",  # a card and a year: the year stays text
    "1234 5678 9012 3456",
])
def test_a_grouped_run_is_not_cut_into_cards_or_phones(text: str) -> None:
    assert [v for _, v in found(text)] == (["4111 1111 1111 1111"] if "4111" in text else [])


def test_a_run_of_digit_groups_is_split_into_phones_only_when_all_of_it_is_phones() -> None:
    # one group left over that is no number (and no postal code in front): not phones
    assert found("ids 020 7946 0958 020 7946 0959 12") == []
    assert [v for _, v in found("020 7946 0958 020 7946 0959")] == ["020 7946 0958",
                                                                    "020 7946 0959"]


def test_known_entities_in_a_row() -> None:
    known = KnownEntityDetector([("person", "Ann Lee"), ("person", "Bob Ray")], secret=SECRET)
    assert found("Ann Lee Bob Ray Ann Lee", [known]) == [
        ("person", "Ann Lee"), ("person", "Bob Ray"), ("person", "Ann Lee")]


# =========================================================================================
# 2. One value written in several formats: one identity
# =========================================================================================

FORMS = [
    ("card", "4111111111111111", ["4111111111111111", "4111 1111 1111 1111",
                                  "4111-1111-1111-1111", "4111\u00a01111\u00a01111\u00a01111"]),
    ("phone", "+442079460958", ["+44 20 7946 0958", "020 7946 0958", "0044 20 7946 0958",
                                "+442079460958", "+44 (0)20 7946 0958", "+44-20-7946-0958",
                                "tel:+44-20-7946-0958", "wa.me/442079460958"]),
    ("iban", "GB82WEST12345698765432", ["GB82 WEST 1234 5698 7654 32", "GB82WEST12345698765432",
                                        "gb82west12345698765432", "GB82-WEST-1234-5698-7654-32",
                                        "gb82 west 1234 5698 7654 32"]),
    ("email", "zora.kim@example.org", ["zora.kim@example.org", "Zora.Kim@Example.ORG",
                                       "ZORA.KIM@EXAMPLE.ORG"]),
    ("email", "ann@bücher.de", ["ann@bücher.de", "ann@xn--bcher-kva.de", "Ann@XN--BCHER-KVA.de"]),
    ("ip", "2001:db8::8a2e:370:7334", ["2001:db8::8a2e:370:7334", "2001:DB8::8A2E:370:7334",
                                       "2001:0db8:0000:0000:0000:8a2e:0370:7334",
                                       "2001:db8:0:0:0:8a2e:370:7334"]),
]


@pytest.mark.parametrize(("kind", "identity", "forms"), FORMS, ids=[f[0] for f in FORMS])
def test_every_form_of_a_value_has_one_identity(kind: str, identity: str,
                                                forms: list[str]) -> None:
    keys = TenantKeys(b"p" * 32, b"f" * 32)
    index = KnownEntityIndex(b"f" * 32)
    placeholders, fingerprints = set(), set()
    for form in forms:
        f = only(f"value {form} here")
        assert (f.kind, f.identity) == (kind, identity), form
        placeholders.add(keys.candidate(f.kind, f.value, 0, identity=f.identity))
        fingerprints.add(keys.fingerprint(f.value, identity=f.identity))
        assert index.entity(f.kind, f.value, identity=f.identity).fingerprint in fingerprints
    assert len(placeholders) == 1 and len(fingerprints) == 1


def test_identities_keep_different_values_apart() -> None:
    a = only("call +1 415-555-2671 ext. 12").identity
    b = only("call +1 415-555-2671 ext. 13").identity
    c = only("call +1 415-555-2671").identity
    assert len({a, b, c}) == 3 and a == "+14155552671;ext=12" and c == "+14155552671"
    assert only("4111111111111111").identity != only("4012888888881881").identity
    assert only("_ann@example.org").identity != only("ann@example.org").identity


def test_known_entities_keep_their_normal_form_as_identity() -> None:
    known = KnownEntityDetector([("person", "José  O’Brien")], secret=SECRET)
    f = only("met JOSÉ\n o'brien today", [known])
    assert f.identity == normalise("José O’Brien") == "josé o'brien"
    assert known.fingerprint("José O'Brien") == known.fingerprint(f.value, identity=f.identity)


def test_without_an_identity_the_vault_keys_fall_back_to_the_normal_form() -> None:
    keys = TenantKeys(b"p" * 32, b"f" * 32)
    assert keys.candidate("person", "Ann  LEE", 0) == keys.candidate("person", "ann lee", 0)
    assert keys.candidate("person", "Ann Lee", 0) == keys.candidate(
        "person", "x", 0, identity="ann lee")


# =========================================================================================
# 3. Obfuscation inside a value
# =========================================================================================

OBFUSCATED = [
    ("card", "4111111111111111", f"4111{ZW}1111{ZW}1111{ZW}1111"),
    ("card", "4111111111111111", f"4111 1111 11{SHY}11 1111"),
    ("card", "4111111111111111", "4111\u20601111\ufeff1111\u200c1111"),
    ("card", "4111111111111111", "４１１１１１１１１１１１１１１１"),
    ("card", "4111111111111111", "４１１１\u3000１１１１\u3000１１１１\u3000１１１１"),
    ("card", "4111111111111111", "4111 1111\n1111 1111"),
    ("card", "4111111111111111", "4111-1111-\r\n1111-1111"),
    ("card", "4111111111111111", "4111 1111 \n   1111 1111"),
    ("card", "4111111111111111", "𝟒𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏𝟏"),  # mathematical bold digits
    ("phone", "+442079460958", f"+44{ZW}20 7946 0958"),
    ("phone", "+442079460958", f"020 79{ZW}46{ZW}0958"),
    ("phone", "+442079460958", "＋４４ ２０ ７９４６ ０９５８"),
    ("email", "ann@example.com", f"ann{ZW}@exam{SHY}ple.com"),
    ("email", "ann@example.com", "ann＠example．com"),
    ("email", "ann@example.com", "ａｎｎ＠ｅｘａｍｐｌｅ.ｃｏｍ"),
    ("iban", "GB82WEST12345698765432", f"GB82 WE{ZW}ST 1234 5698 7654 32"),
    ("iban", "GB82WEST12345698765432", "GB82 WEST 1234\n5698 7654 32"),
    ("iban", "GB82WEST12345698765432", "ＧＢ８２ＷＥＳＴ１２３４５６９８７６５４３２"),
    ("ip", "192.168.1.1", f"192.168.{ZW}1.1"),
    ("ip", "192.168.1.1", "１９２．１６８．１．１"),
]


@pytest.mark.parametrize(("kind", "identity", "written"), OBFUSCATED,
                         ids=[repr(o[2]) for o in OBFUSCATED])
def test_obfuscated_values_are_found_with_their_exact_original_span(
        kind: str, identity: str, written: str) -> None:
    text = f"see [{written}] ok"
    f = only(text)
    assert (f.kind, f.identity) == (kind, identity)
    # the span is the obfuscated text exactly: nothing of it left outside
    assert (f.start, f.end, f.value) == (5, 5 + len(written), written)


NAMES = [
    ("Maria Petrova", "Mаria Pеtrova"),  # Cyrillic а, е
    ("Maria Petrova", "MАRIА PETRОVА"),  # Cyrillic А, О
    ("Maria Petrova", "Μaria Ρetrova"),  # Greek Μ, Ρ
    ("Bartholomew Quist", f"Bartho{ZW}lomew Quist"),
    ("Bartholomew Quist", f"Bar{SHY}tholo{SHY}mew Qu\u200dist"),
    ("Bartholomew Quist", "Ｂａｒｔｈｏｌｏｍｅｗ Ｑｕｉｓｔ"),
    ("Bartholomew Quist", f"Bartholomew{ZW} Quist"),
    ("Bartholomew Quist", "Bartholomew\n  Quist"),
    ("Ольга Соколова", "ОЛЬГА  соколова"),  # a Cyrillic name still matches itself
]


@pytest.mark.parametrize(("name", "written"), NAMES, ids=[n[1] for n in NAMES])
def test_known_names_are_matched_through_homoglyphs_and_invisible_characters(
        name: str, written: str) -> None:
    known = KnownEntityDetector([("person", name)], secret=SECRET)
    text = f"Dear {written}, thanks"
    f = only(text, [known])
    assert (f.kind, f.start, f.value) == ("person", 5, written)
    assert f.identity == normalise(name)
    # and the vault recognises the registered value under that identity
    assert known.fingerprint(name) == known.fingerprint(f.value, identity=f.identity)


def test_a_word_wholly_in_another_script_is_not_folded() -> None:
    # "Сор" (Cyrillic) looks like "Cop" but is a Cyrillic word: only mixed words fold
    known = KnownEntityDetector([("person", "Cop")], secret=SECRET)
    assert found("Сор and Cор", [known]) == [("person", "Cор")]
    assert normalise("Сергей") == "сергей"


def test_the_folded_view_maps_back_to_the_original() -> None:
    assert fold("plain ascii") == ("plain ascii", None)
    assert fold("café ½ ²") == ("café ½ ²", None)  # nothing to fold: the same object
    view, offsets = fold(f"a{ZW}b{SHY}ｃ")
    assert view == "abc" and offsets == [0, 2, 4]
    assert fold("ｘ\u00a0y") == ("x\u00a0y", None)  # no-break space kept, same offsets


# =========================================================================================
# 4. Formats that were missed
# =========================================================================================

NATIONAL_CHECK_FAILS = ["ES29 2100 0418 4602 0005 1332", "BE23096123456760"]


@pytest.mark.parametrize(("kind", "text", "value"), [
    ("iban", "IBAN GB82-WEST-1234-5698-7654-32.", "GB82-WEST-1234-5698-7654-32"),
    ("iban", "IBAN: gb82-west-1234-5698-7654-32", "gb82-west-1234-5698-7654-32"),
    *[("iban", f"IBAN {v} ok", v) for v in NATIONAL_CHECK_FAILS],
    ("card", "card number 1234567812345670", "1234567812345670"),
    ("card", "Credit card: 1234 5678 1234 5670, exp 12/27", "1234 5678 1234 5670"),
    ("card", "CC 1234-5678-1234-5670", "1234-5678-1234-5670"),
    ("card", "my debit card is 9111111111111111115", "9111111111111111115"),
    ("card", "Visa prefix at 14 digits, card 41111111111114", "41111111111114"),
    ("phone", '<a href="tel:+442079460958">', "+442079460958"),
    ("phone", "tel:+1-415-555-2671;ext=7", "+1-415-555-2671"),
    ("phone", "sms:+442079460123", "+442079460123"),
    ("phone", "callto:020-7946-0958", "020-7946-0958"),
    ("phone", "https://wa.me/442079460958", "442079460958"),
    ("phone", "wa.me/14155552671?text=hi", "14155552671"),
    ("email", "to a@xn--80ak6aa92e.xn--p1ai today", "a@xn--80ak6aa92e.xn--p1ai"),
    ("email", "user@xn--bcher-kva.de", "user@xn--bcher-kva.de"),
    ("email", "x@mail.xn--fiqs8s.", "x@mail.xn--fiqs8s"),
])
def test_formats_that_were_missed(kind: str, text: str, value: str) -> None:
    assert found(text) == [(kind, value)]


def test_the_national_check_failing_ibans_are_mod97_valid_only() -> None:
    for v in NATIONAL_CHECK_FAILS:
        assert not stdnum_iban.is_valid(v) and stdnum_iban.is_valid(v, check_country=False)


@pytest.mark.parametrize("text", [
    "1234567812345670",  # Luhn-valid, no issuer, no card word: a number
    "id 1234 5678 1234 5670",
    "card number 1234567812345671",  # a card word, but the Luhn check fails
    "card 1234567890",  # too short for a card
    "ES00 2100 0418 4602 0005 1332",  # mod-97 fails
    "GB82-WEST 1234-5698 7654 32",  # dashes and spaces mixed
    "hotel:+442079460958",  # not a tel: link
    "x@xn--.com",
])
def test_formats_that_stay_text(text: str) -> None:
    assert found(text) == []


def test_detectors_alone_take_the_new_formats() -> None:
    assert [f.value for f in IbanDetector().detect("GB82-WEST-1234-5698-7654-32")] == [
        "GB82-WEST-1234-5698-7654-32"]
    assert [f.confidence for f in CardDetector().detect("card 1234567812345670")] == [
        CardDetector.cue_confidence]
    assert [f.value for f in PhoneDetector().detect("wa.me/442079460958")] == ["442079460958"]
    assert [f.value for f in EmailDetector().detect("a@b.xn--p1ai")] == ["a@b.xn--p1ai"]


# =========================================================================================
# 5. False findings
# =========================================================================================

@pytest.mark.parametrize("text", [
    "IBAN: GB56 HXDO 8816 7774 6561 1 thanks",  # one character short
    "IBAN: GB00 HXDO 8816 7774 6561 19 thanks",  # check digits wrong
    "IBAN: GB56 HXDO 8816 7774 6561 191 thanks",  # one character too many
    "IBAN: GB27 DAKD 5840 1036 7418 thanks",  # its tail would read as a Maestro card
    "IBAN: gb42 nawi 0445 4264 7886 1",
    "IBAN: NL91 ABNA 0417 1643 0",
    "IBAN: GB82-WEST-1234-5698-7654-3",
])
def test_digit_groups_of_a_malformed_iban_are_not_phones_or_cards(text: str) -> None:
    assert found(text) == []
    assert found(text, default_detectors("GB")) == []
    assert found(text, default_detectors("DE")) == []


@pytest.mark.parametrize(("text", "phone"), [
    ("London SW1A 1AA 020 7946 0958", "020 7946 0958"),
    ("90210 (310) 555-0100", "(310) 555-0100"),
    ("Beverly Hills, CA 90210 (310) 555-0100", "(310) 555-0100"),
    ("CA 90210 310-555-0100", "310-555-0100"),
    ("75008 Paris\nParis 75008 01 42 68 53 00", "01 42 68 53 00"),
    ("Dresden 01067 0351 4567890", "0351 4567890"),
])
def test_a_postal_code_is_not_part_of_the_phone_span(text: str, phone: str) -> None:
    assert found(text) == [("phone", phone)]


@pytest.mark.parametrize(("region", "number"), [
    ("GB", "07911 123456"),  # a five-digit trunk-0 area code stays part of the number
    ("GB", "01234 567890"),
    ("GB", "0800 123 4567"),
    (None, "0044 20 7946 0958"),
    (None, "+49 30 901820"),
])
def test_numbers_starting_with_a_group_of_four_or_five_are_kept_whole(
        region: str | None, number: str) -> None:
    det = PhoneDetector(region, fallback_regions=["US", "GB", "DE", "FR"])
    assert [f.value for f in detect_all(f"call {number}", [det])] == [number]


@pytest.mark.parametrize("text", [
    "1:2:3:4:5:6:7:8", "10:20:30:40:50:60:70:80", "step 1:2:3:4:5:6:7:8 of 9",
    "0:0:0:0:0:0:0:1",  # the loopback spelt out (not personal data)
])
def test_short_decimal_colon_lists_are_not_ipv6(text: str) -> None:
    assert found(text) == []
    assert IpDetector().detect(text) == []


@pytest.mark.parametrize("ip", [
    "1:2::8", "::1", "1::", "fe80:0:0:0:0:0:0:1", "2001:1234:5678:9012:3456:7890:1234:5678",
    "1:2:3:4:5:6:7:a", "100:2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4",
])
def test_real_ipv6_forms_are_still_found(ip: str) -> None:
    assert found(f"from {ip} now") == [("ip", ip)]


# =========================================================================================
# Through the service: nothing of any class on disk
# =========================================================================================


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def _card(rng: random.Random, prefix: str = "4", length: int = 16) -> str:
    body = prefix + _digits(rng, length - len(prefix) - 1)
    return next(body + d for d in "0123456789" if luhn_valid(body + d))


def _iban(rng: random.Random, cc: str = "GB", bban: str | None = None) -> str:
    bban = bban or "WEST" + _digits(rng, 14)
    return cc + stdnum_iban.calc_check_digits(cc + "00" + bban) + bban


def _grouped(compact: str, sep: str = " ") -> str:
    return sep.join(compact[i : i + 4] for i in range(0, len(compact), 4))


@dataclass
class Stored:
    """What the module remembered, per class: the texts, the values' forms and
    identities to look for on disk, and the receipts."""

    tenant: str
    needles: dict[str, list[str]] = field(default_factory=dict)
    hits: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    ids: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    multi: dict[str, list[str]] = field(default_factory=dict)


def _london(rng: random.Random) -> tuple[str, str]:
    """A number of the drama range 020 7946 0000-0999: national form and E.164 digits."""
    x = _digits(rng, 3)
    return f"020 7946 0{x}", f"2079460{x}"


@pytest.fixture(scope="module")
def stored(vault: MemoryVault, data_dir: Path) -> Stored:
    rng = random.Random(uuid.uuid4().int)
    u = uuid.uuid4().hex[:8]
    tenant = f"classes-{u}"
    vault.ensure_tenant(tenant)
    who = vault.principal(tenant)
    out = Stored(tenant)

    def remember(cls: str, text: str, needles: list[str], **kw: object) -> None:
        r = vault.remember(text, scope="classes", principal=who, **kw)  # type: ignore[arg-type]
        out.ids.setdefault(cls, []).append(r.id)
        out.needles.setdefault(cls, []).extend(needles)

    # 1. in a row
    cards = [_card(rng), _card(rng, "51"), _card(rng, "4", 19)]
    grouped = [_grouped(_card(rng)), _grouped(_card(rng, "52"))]
    phones = [_london(rng), _london(rng)]
    ibans = [_iban(rng), _iban(rng)]
    emails = [f"row1.{u}@example.org", f"row2.{u}@example.net"]
    names = [f"Ottoline Brisk{u}", f"Casimir Vell{u}"]
    remember("in_a_row",
             f"cards {' '.join(cards)} and {' '.join(grouped)}; "
             f"phones {' '.join(p for p, _ in phones)}; ibans {' '.join(ibans)} "
             f"{' '.join(_grouped(i) for i in ibans)}; mail {' '.join(emails)}; "
             f"people {' '.join(names)} {' '.join(names)}",
             [*cards, *grouped, *(g.replace(" ", "") for g in grouped),
              *(p for p, _ in phones), *(d for _, d in phones), *ibans, *emails, *names],
             entities=[{"kind": "person", "value": n} for n in names])

    # 2. several formats (three records, one form each); the shred test uses them
    card = _card(rng)
    phone, phone_digits = _london(rng)
    ib = _iban(rng)
    email = f"Multi.{u}@Example.org"
    forms = {
        "card": [card, _grouped(card), _grouped(card, "-")],
        "phone": [phone, "+44 " + phone[1:], "+44" + phone_digits],
        "iban": [_grouped(ib), ib, _grouped(ib, "-")],
        "email": [email, email.lower(), email.upper()],
    }
    for i in range(3):
        remember("multi_format",
                 f"paid with {forms['card'][i]}, call {forms['phone'][i]}, "
                 f"iban {forms['iban'][i]}, mail {forms['email'][i]}",
                 [f[i] for f in forms.values()])
    out.multi = forms
    out.needles["multi_format"] += [card, phone_digits, ib, email.lower()]

    # 3. obfuscation
    c1, c2, c3, c4 = _card(rng), _card(rng), _card(rng), _card(rng)
    p1, d1 = _london(rng)
    name = f"Bartholomew Quist{u}"
    obf = {
        "zw card": c1[:8] + ZW + c1[8:],
        "shy card": _grouped(c2)[:12] + SHY + _grouped(c2)[12:],
        "full-width card": c3.translate({ord(d): 0xFF10 + int(d) for d in "0123456789"}),
        "wrapped card": _grouped(c4)[:9] + "\n" + _grouped(c4)[10:],
        "zw phone": p1.replace(" ", ZW, 1),
        "full-width email": f"obf.{u}＠example．org",
        "zw email": f"obf2.{u[:4]}{ZW}{u[4:]}@example.org",
        "homoglyph name": name.replace("a", "а", 1),  # Cyrillic а
        "zw name": name[:6] + ZW + name[6:],
    }
    remember("obfuscation", "known: " + name, [name],
             entities=[{"kind": "person", "value": name}])
    remember("obfuscation", " | ".join(obf.values()),
             [*obf.values(), c1, c2, c3, c4, d1, p1, f"obf.{u}@example.org",
              f"obf2.{u}@example.org", c1[:8], c1[8:], name[6:], "rtholomew Quist" + u])

    # 4. formats that were missed
    es = _iban(rng, "ES", "2100" + "0418" + "00" + _digits(rng, 10))
    while stdnum_iban.is_valid(es):  # the national check must fail, mod 97 pass
        es = _iban(rng, "ES", "2100" + "0418" + "00" + _digits(rng, 10))
    gb = _iban(rng)
    cue = _card(rng, "19")
    _, d2 = _london(rng)
    _, d3 = _london(rng)
    puny = f"puny.{u}@xn--bcher-kva.de"
    remember("formats",
             f"IBAN {_grouped(gb, '-')} and {_grouped(es)}; card number {cue}; "
             f"<a href=\"tel:+44{d2}\">call</a> https://wa.me/44{d3} mail {puny}",
             [_grouped(gb, "-"), gb, _grouped(es), es, cue, d2, d3, puny, f"puny.{u}@"])

    # 5. false findings: the phone next to a postal code is found, the code stays text
    p4, d4 = _london(rng)
    x = _digits(rng, 2)
    remember("false_findings",
             f"Paris 75008 01 42 68 53 {x}; London SW1A 1AA {p4}; 90210 (310) 555-01{x}; "
             "steps 1:2:3:4:5:6:7:8",
             [f"01 42 68 53 {x}", f"1426853{x}", p4, d4, f"(310) 555-01{x}", f"31055501{x}"])

    with psycopg.connect(vault.db.url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    wanted = {cls: [n.encode() for n in ns] for cls, ns in out.needles.items()}
    out.hits = {cls: [] for cls in wanted}
    for path in (data_dir / "pg").rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            for cls, ns in wanted.items():
                out.hits[cls] += [(str(path), n.decode()) for n in ns if n in blob]
    return out


CLASSES = ["in_a_row", "multi_format", "obfuscation", "formats", "false_findings"]


@pytest.mark.parametrize("cls", CLASSES)
def test_no_value_of_the_class_is_on_disk(stored: Stored, cls: str) -> None:
    assert stored.needles[cls], cls
    assert stored.hits[cls] == []


@pytest.mark.parametrize("cls", CLASSES)
def test_no_value_of_the_class_is_in_the_stored_text(vault: MemoryVault, stored: Stored,
                                                     cls: str) -> None:
    who = vault.principal(stored.tenant)
    for mid in stored.ids[cls]:
        content = vault.get(mid, principal=who).content
        assert [n for n in stored.needles[cls] if n in content] == []


def test_the_false_findings_leave_the_look_alikes_as_text(vault: MemoryVault,
                                                          stored: Stored) -> None:
    (mid,) = stored.ids["false_findings"]
    content = vault.get(mid, principal=vault.principal(stored.tenant)).content
    assert "Paris 75008 {phone:p_" in content and "SW1A 1AA {phone:p_" in content
    assert "90210 {phone:p_" in content and "steps 1:2:3:4:5:6:7:8" in content
    assert len(PLACEHOLDER_RE.findall(content)) == 3


def test_several_formats_are_one_entry_and_one_shred(vault: MemoryVault,
                                                     stored: Stored) -> None:
    who = vault.principal(stored.tenant)
    ids = stored.ids["multi_format"]
    contents = [vault.get(mid, principal=who).content for mid in ids]
    per_record = [PLACEHOLDER_RE.findall(c) for c in contents]
    assert per_record[0] == per_record[1] == per_record[2]  # the same four placeholders
    placeholders = {kind: f"{{{kind}:p_{hexa}}}" for kind, hexa in per_record[0]}
    assert sorted(placeholders) == ["card", "email", "iban", "phone"]
    entries = vault.vault_entries(limit=100, principal=who)
    live = [e for e in entries if e["placeholder"] in placeholders.values()]
    assert len(live) == 4
    # reveal shows the form first seen, wherever the placeholder stands
    revealed = vault.get(ids[2], principal=who, reveal=True).content
    assert all(forms[0] in revealed for forms in stored.multi.values())

    card = placeholders["card"]
    assert vault.shred([card], principal=who) == [card]
    digits = stored.multi["card"][0]
    for mid in ids:
        for reveal in (True, False):
            content = vault.get(mid, principal=who, reveal=reveal).content
            assert content.startswith(f"paid with {ERASED},")
            assert all(form not in content for form in stored.multi["card"])
            assert digits[:8] not in content and digits[-8:] not in content
    rest = [placeholders[k] for k in ("phone", "iban", "email")]
    assert sorted(vault.shred(rest, principal=who)) == sorted(rest)
    for mid in ids:
        content = vault.get(mid, principal=who, reveal=True).content
        assert content.count(ERASED) == 4
        assert all(form not in content for forms in stored.multi.values() for form in forms)


def test_a_caller_named_value_that_is_a_card_shares_the_card_identity(
        vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    card = _card(random.Random(uuid.uuid4().int))
    first = vault.remember("account on file", scope="s", principal=who,
                           entities=[{"kind": "account", "value": _grouped(card)}])
    (ph,) = first.placeholders
    assert ph.startswith("{account:p_")
    later = vault.remember(f"charged {_grouped(card, '-')} and {card}", scope="s",
                           principal=who)
    assert later.placeholders == []  # no new entry: the same value
    assert vault.get(later.id, principal=who).content == f"charged {ph} and {ph}"
