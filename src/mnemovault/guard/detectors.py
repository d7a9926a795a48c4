"""Detectors of the capture guard (SPEC section 8): the interface and the built-ins.

A detector has a ``name`` and a ``scan(fields)`` that returns :class:`Finding` s, each with
a :class:`Severity`; :func:`mnemovault.guard.capture.check_capture` refuses a capture with
a finding at or above ``BLOCK_AT_SEVERITY``. A finding names the detector, the kind of
thing found, the field it was found in and, optionally, where (``start``, ``end``: offsets
into the text it was given), never the matched text (nothing a detector returns may carry
it). The guard hands every detector the shared normalised views of each field
(:func:`mnemovault.guard.normalise.views`: width, zero-width characters, homoglyphs, line
breaks inside a token undone), so the rules below are written for plain text, and maps a
finding's offsets back to the original text.

Built-ins, none needing a model (their kinds and severities are the tables below):

``secrets`` (:class:`SecretsDetector`), credentials that give access to something:

====================  ========  ===========================================================
kind                  severity  what
====================  ========  ===========================================================
private_key           Critical  a PEM private key block (RSA, EC, DSA, OpenSSH, PGP, PKCS#8)
aws_access_key        Critical  an AWS access key id (``AKIA``/``ASIA``… + 16)
aws_secret_key        Critical  ``aws_secret_access_key = <40 characters>``
github_token          Critical  ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36, ``github_pat_…``
openai_api_key        Critical  ``sk-…``/``sk-proj-…`` with a random-looking body of 20+
anthropic_api_key     Critical  ``sk-ant-api03-…``
stripe_live_key       Critical  ``sk_live_…``/``rk_live_…``
mnemovault_api_key    Critical  this service's own ``mvk_<tenant>_<id>_<secret>`` tokens
slack_token           High      ``xoxb-``/``xoxp-``/… tokens and Slack webhook URLs
google_api_key        High      ``AIza`` + 35
jwt                   High      a JSON Web Token (three base64url parts, header ``eyJ``)
bearer_token          High      ``Authorization: Bearer <20+ characters>``
url_credentials       High      ``scheme://user:password@host``
password_assignment   High      ``password=…``, ``api_key: …``, ``client_secret=…`` (a value
                                after ``:`` must contain a digit or a symbol; placeholders
                                such as ``***``, ``<redacted>``, ``${VAR}`` do not count)
password_mention      Medium    prose such as ``my password is …`` (below the default
                                threshold: passes unless ``BLOCK_AT_SEVERITY=Medium``)
====================  ========  ===========================================================

``government_ids`` (:class:`GovernmentIdDetector`), national identity numbers the PII vault
does not pseudonymise (it handles emails, phones, IBANs, cards, IPs and named entities),
each checksum-validated with python-stdnum where the number has a check digit; all High.
Formatted numbers need no context; bare digit runs count only near a keyword naming the
number (within 40 characters before it):

====================  =============================================  =====================
kind                  format                                         validation
====================  =============================================  =====================
us_ssn                ``123-45-6789``; 9 digits after "SSN"           ``stdnum.us.ssn``
uk_nino               ``AB 12 34 56 C``                              prefix rules
br_cpf                ``123.456.789-09``; 11 digits after "CPF"       ``stdnum.br.cpf``
ca_sin                9 digits (3-3-3) after "SIN"/"social insurance" ``stdnum.ca.sin``
es_dni                8 digits and a letter after "DNI"/"NIF"        ``stdnum.es.dni``
es_nie                ``X1234567L``                                  ``stdnum.es.nie``
it_codice_fiscale     ``RSSMRA85T10A562S``                           ``stdnum.it.codicefiscale``
fr_nir                ``2 95 10 99 126 111 93``; 15 digits after     ``stdnum.fr.nir``
                      "NIR"/"INSEE"/"sécurité sociale"
in_aadhaar            ``2345 6789 0124`` (4-4-4)                     ``stdnum.in_.aadhaar``
se_personnummer       ``YYMMDD-NNNN`` after "personnummer"           ``stdnum.se.personnummer``
fi_hetu               ``DDMMYY-NNNC`` (the ``-`` is a century sign)   ``stdnum.fi.hetu``
kr_rrn                ``YYMMDD-NNNNNNN``                             ``stdnum.kr.rrn``
de_idnr               11 digits after "Steuer-ID"/"IdNr"             ``stdnum.de.idnr``
nl_bsn                9 digits after "BSN"/"burgerservicenummer"     ``stdnum.nl.bsn``
pl_pesel              11 digits after "PESEL"                        ``stdnum.pl.pesel``
====================  =============================================  =====================

A number written with dots where it has dashes (``536.90.4399``, ``971013.9019902``,
``390.533.447.05``, ``X.1234567.L``), with the same separator throughout, is the same
number (the Finnish century sign is not a separator and stays as written).

Every rule has *hints*: lower-case substrings of which the (lower-cased) text must contain
one before its regex runs, so a typical text is searched by few regexes. The regexes use
bounded repetition only, no nested quantifiers (bench/guard.py times 10,000-character
texts).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, runtime_checkable


class Severity(IntEnum):
    """How bad a finding is; ordered, so ``finding.severity >= threshold`` works."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        """``Low``, ``Medium``, ``High`` or ``Critical`` (as ``BLOCK_AT_SEVERITY`` spells
        them)."""
        return self.name.capitalize()

    @classmethod
    def parse(cls, value: str | Severity) -> Severity:
        """``"high"``/``"High"``/``Severity.HIGH`` -> ``Severity.HIGH``.

        Raises:
            ValueError: not one of Low, Medium, High, Critical.
        """
        if isinstance(value, Severity):
            return value
        try:
            return cls[str(value).strip().upper()]
        except KeyError:
            raise ValueError("must be one of Low, Medium, High, Critical") from None


@dataclass(frozen=True)
class Finding:
    """One thing a detector found: which detector, what kind, how bad, in which field,
    and optionally where (``start``/``end``: offsets into the field's text, both or
    neither; the guard maps them to the original text). Never the matched text."""

    detector: str
    kind: str
    severity: Severity
    field: str
    start: int | None = None
    end: int | None = None

    def to_dict(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {"detector": self.detector, "kind": self.kind,
                                     "severity": self.severity.label, "field": self.field}
        if self.start is not None and self.end is not None:
            out.update(start=self.start, end=self.end)
        return out


@runtime_checkable
class CaptureDetector(Protocol):
    """A capture-guard detector: ``scan`` gets the capture's named texts (``content``,
    ``key``, ``intent``, ``name``, ``tags``… as given by the capture path; never None), each
    in the shared normalised view (:func:`mnemovault.guard.normalise.views`; a field with
    a line break inside a token is scanned a second time in its joined view), and returns a
    list of its findings (empty: nothing found), each naming one of the fields it was given,
    its offsets (if any) within that field's text. It may raise: the guard then refuses the
    capture as ``Unavailable`` (fail closed), as it does for anything but a list of such
    findings. It must be safe to call from several threads at once."""

    name: str

    def scan(self, fields: Mapping[str, str]) -> list[Finding]: ...


@dataclass(frozen=True)
class Rule:
    """One pattern of a regex detector: the ``kind`` it reports, its ``severity``, the
    ``regex``, the ``hints`` that gate it (module docstring) and an optional ``valid``
    check of the matched text (a checksum; False: not a finding)."""

    kind: str
    severity: Severity
    regex: re.Pattern[str]
    hints: tuple[str, ...]
    valid: Callable[[re.Match[str]], bool] | None = None


class RegexDetector:
    """A detector made of :class:`Rule` s; a field has at most one finding per kind."""

    name = "regex"
    rules: tuple[Rule, ...] = ()

    def scan(self, fields: Mapping[str, str]) -> list[Finding]:
        out: list[Finding] = []
        for field_name, text in fields.items():
            if not text:
                continue
            low = text.lower()
            for rule in self.rules:
                if not any(h in low for h in rule.hints):
                    continue
                for m in rule.regex.finditer(text):
                    if rule.valid is None or rule.valid(m):
                        out.append(Finding(self.name, rule.kind, rule.severity, field_name,
                                           *m.span()))
                        break
        return out


# -- secrets -------------------------------------------------------------------------------
C, H, M = Severity.CRITICAL, Severity.HIGH, Severity.MEDIUM

_PLACEHOLDER_VALUE = re.compile(
    r"""^(?:[*x•.#_-]+|<[^>]*>|\[[^\]]*\]|\$\{?[\w.]+\}?|\{\{?[^}]*\}?\}|%\(?\w*\)?s|"""
    r"""null|none|nil|true|false|redacted|hidden|secret|password|required|optional|empty|"""
    r"""changeme|unset|undefined|example|os\.environ.*|process\.env.*|env\(.*|getenv.*)$""",
    re.IGNORECASE)


def _real_value(group: str) -> Callable[[re.Match[str]], bool]:
    def check(m: re.Match[str]) -> bool:
        value = m.group(group).strip("\"'`")
        return len(value) >= 4 and not _PLACEHOLDER_VALUE.match(value)
    return check


def _password_value(m: re.Match[str]) -> bool:
    """``name = value`` counts for any real value; ``name: value`` (prose-like) only when
    the value has a digit or a symbol (``Password: forgotten`` is not a password)."""
    if not _real_value("value")(m):
        return False
    value = m.group("value").strip("\"'`")
    if m.group("sep") == "=" or m.group("quote"):
        return True
    return len(value) >= 6 and bool(re.search(r"[\d\W_]", value))


def _random_looking(group: str) -> Callable[[re.Match[str]], bool]:
    """A token body with upper case, lower case and digits (not a word such as
    ``sk-learn-tutorial-notes``)."""
    def check(m: re.Match[str]) -> bool:
        body = m.group(group)
        return (any(c.isdigit() for c in body) and any(c.isupper() for c in body)
                and any(c.islower() for c in body))
    return check


def _url_password(m: re.Match[str]) -> bool:
    return not _PLACEHOLDER_VALUE.match(m.group("pw")) and m.group("pw").lower() != "pass"


_NAMES = (r"password|passwd|passphrase|pwd|secret|secret[_-]?key|api[_-]?key|apikey|"
          r"access[_-]?token|auth[_-]?token|refresh[_-]?token|client[_-]?secret|"
          r"private[_-]?key|db[_-]?pass(?:word)?")

SECRET_RULES: tuple[Rule, ...] = (
    Rule("private_key", C, re.compile(
        r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----"),
        ("private key",)),
    Rule("aws_access_key", C, re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"
                                         r"(?![A-Z0-9])"), ("akia", "asia", "abia", "acca")),
    Rule("aws_secret_key", C, re.compile(
        r"(?i)aws_?secret_?(?:access_?)?key\W{0,5}(?:[=:]|\bis\b)\W{0,5}[A-Za-z0-9/+]{40}"
        r"(?![A-Za-z0-9/+])"), ("secret",)),
    Rule("github_token", C, re.compile(
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59})\b"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Rule("anthropic_api_key", C, re.compile(r"\bsk-ant-[a-z]{3,8}\d{2}-[A-Za-z0-9_-]{32,}"),
         ("sk-ant-",)),
    Rule("openai_api_key", C, re.compile(
        r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?(?P<body>[A-Za-z0-9_-]{20,})"),
        ("sk-",), _random_looking("body")),
    Rule("stripe_live_key", C, re.compile(r"\b[rs]k_live_[A-Za-z0-9]{20,}"), ("k_live_",)),
    Rule("mnemovault_api_key", C, re.compile(
        r"\bmvk_[a-z0-9][a-z0-9-]{0,62}_[0-9a-f]{32}_[0-9a-f]{64}\b"), ("mvk_",)),
    Rule("slack_token", H, re.compile(
        r"\bxox[abposr]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/"
        r"T[A-Za-z0-9]{6,}/B[A-Za-z0-9]{6,}/[A-Za-z0-9]{16,}"), ("xox", "hooks.slack.com")),
    Rule("google_api_key", H, re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
         ("aiza",)),
    Rule("jwt", H, re.compile(
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}"), ("eyj",)),
    Rule("bearer_token", H, re.compile(
        r"(?i)\bauthorization\W{0,3}bearer\s+(?P<tok>[A-Za-z0-9._~+/-]{20,}=*)"),
        ("bearer",), _real_value("tok")),
    Rule("url_credentials", H, re.compile(
        r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^/\s:@\"'<>]{1,64}:(?P<pw>[^/\s:@\"'<>]{3,128})@"
        r"[A-Za-z0-9.-]+"), ("://",), _url_password),
    Rule("password_assignment", H, re.compile(
        rf"(?i)(?<![\w-])(?:{_NAMES})(?P<quote>[\"'`]?)\s{{0,3}}(?P<sep>[=:])\s{{0,3}}"
        r"(?P<value>\"[^\"\n]{4,200}\"|'[^'\n]{4,200}'|`[^`\n]{4,200}`|[^\s\"'`,;]{4,200})"),
        ("pass", "pwd", "secret", "key", "token"), _password_value),
    Rule("password_mention", M, re.compile(
        r"(?i)\b(?:password|passcode|passphrase|pin code)\s+(?:is|was|=)\s+"
        r"(?P<value>[\"'`]?[^\s\"'`]{4,})"), ("pass", "pin code"), _real_value("value")),
)


class SecretsDetector(RegexDetector):
    """Credentials and keys (kinds and severities: the module docstring)."""

    name = "secrets"
    rules = SECRET_RULES


# -- government ids ------------------------------------------------------------------------
def _stdnum(module: str, group: int = 0) -> Callable[[re.Match[str]], bool]:
    """The python-stdnum check of ``stdnum.<module>`` on ``group`` of the match, dots read
    as the dashes the number is written with (module docstring)."""
    import importlib

    is_valid: list[Callable[[str], bool]] = []  # imported on the first match, not at start

    def check(m: re.Match[str]) -> bool:
        if not is_valid:
            is_valid.append(importlib.import_module(f"stdnum.{module}").is_valid)
        try:
            return bool(is_valid[0](m.group(group).replace(".", "-")))
        except Exception:  # a validator must never break the guard on odd input
            return False
    return check


def _nino(m: re.Match[str]) -> bool:
    prefix = m.group(0)[:2].upper()
    return prefix not in {"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"}


def _near(words: str) -> str:
    """A keyword (case-insensitive) followed, within 40 characters, by the number."""
    return rf"(?i:\b(?:{words})\b)[^\n\d]{{0,40}}?"


DIGITS = tuple("0123456789")
_D = r"(?<![\d.,/-])"  # no digit (or a number's separator) right before the number
_E = r"(?![\d]|[.,/-]\d)"  # and none right after

GOVERNMENT_RULES: tuple[Rule, ...] = (
    Rule("us_ssn", H, re.compile(rf"{_D}(\d{{3}}([-.])\d{{2}}\2\d{{4}}){_E}"), DIGITS,
         _stdnum("us.ssn", 1)),
    Rule("us_ssn", H, re.compile(
        _near(r"ssn|social security(?: number| no)?") + rf"{_D}(\d{{9}}|\d{{3}} \d{{2}} \d{{4}})"
        + _E), ("ssn", "social security"), _stdnum("us.ssn", 1)),
    Rule("uk_nino", H, re.compile(
        r"\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"),
        DIGITS, _nino),
    Rule("br_cpf", H, re.compile(rf"{_D}(\d{{3}}\.\d{{3}}\.\d{{3}}[-.]\d{{2}}){_E}"), DIGITS,
         _stdnum("br.cpf", 1)),
    Rule("br_cpf", H, re.compile(_near("cpf") + rf"{_D}(\d{{11}}){_E}"), ("cpf",),
         _stdnum("br.cpf", 1)),
    Rule("ca_sin", H, re.compile(
        _near(r"sin|social insurance(?: number| no)?") + rf"{_D}(\d{{3}}([-. ]?)\d{{3}}\2\d{{3}})"
        + _E), ("sin", "social insurance"), _stdnum("ca.sin", 1)),
    Rule("es_dni", H, re.compile(_near(r"dni|nif|documento nacional(?: de identidad)?")
                                 + r"\b(\d{8}[-.]?[A-HJ-NP-TV-Z])\b"), ("dni", "nif", "documento"),
         _stdnum("es.dni", 1)),
    Rule("es_nie", H, re.compile(r"\b[XYZ]([-.]?)\d{7}\1[A-HJ-NP-TV-Z]\b"), DIGITS,
         _stdnum("es.nie")),
    Rule("it_codice_fiscale", H, re.compile(
        r"\b[A-Z]{6}[0-9LMNPQRSTUV]{2}[ABCDEHLMPRST][0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{3}"
        r"[A-Z]\b"), DIGITS, _stdnum("it.codicefiscale")),
    Rule("fr_nir", H, re.compile(
        rf"{_D}([12] \d{{2}} (?:0[1-9]|1[0-2]|[2-9]\d) (?:\d{{2}}|2[AB]) \d{{3}} \d{{3}} "
        rf"\d{{2}}){_E}"), DIGITS, _stdnum("fr.nir", 1)),
    Rule("fr_nir", H, re.compile(
        _near(r"nir|insee|s[ée]curit[ée] sociale|social security")
        + rf"{_D}([12]\d{{2}}(?:0[1-9]|1[0-2]|[2-9]\d)(?:\d{{2}}|2[AB])\d{{8}}){_E}"),
        ("nir", "insee", "curit", "social security"), _stdnum("fr.nir", 1)),
    Rule("in_aadhaar", H, re.compile(rf"{_D}(?<!\d )([2-9]\d{{3}}(?:[ -]\d{{4}}[ -]|\.\d{{4}}\.)"
                                     rf"\d{{4}})"
                                     rf"(?![ -]?\d){_E}"),
         DIGITS, _stdnum("in_.aadhaar", 1)),
    Rule("se_personnummer", H, re.compile(
        _near(r"personnummer|personal identity number|samordningsnummer")
        + rf"{_D}((?:19|20)?\d{{6}}[-+.]?\d{{4}}){_E}"),
        ("personnummer", "personal identity", "samordningsnummer"),
        _stdnum("se.personnummer", 1)),
    Rule("fi_hetu", H, re.compile(rf"{_D}(\d{{6}}[-+A-FYXWVU]\d{{3}}[0-9A-Y]){_E}\b"),
         DIGITS, _stdnum("fi.hetu", 1)),
    Rule("kr_rrn", H, re.compile(rf"{_D}(\d{{6}}[-.]\d{{7}}){_E}"), DIGITS, _stdnum("kr.rrn", 1)),
    Rule("de_idnr", H, re.compile(
        _near(r"steuer-?id(?:entifikationsnummer)?|steuerliche identifikationsnummer|idnr|"
              r"tax id") + rf"{_D}(\d{{2}} ?\d{{3}} ?\d{{3}} ?\d{{3}}){_E}"),
        ("steuer", "idnr", "tax id"), _stdnum("de.idnr", 1)),
    Rule("nl_bsn", H, re.compile(
        _near(r"bsn|burgerservicenummer|sofinummer") + rf"{_D}(\d{{4}}\.?\d{{2}}\.?\d{{3}}|"
        rf"\d{{9}}){_E}"), ("bsn", "burgerservicenummer", "sofinummer"),
        _stdnum("nl.bsn", 1)),
    Rule("pl_pesel", H, re.compile(_near("pesel") + rf"{_D}(\d{{11}}){_E}"), ("pesel",),
         _stdnum("pl.pesel", 1)),
)


class GovernmentIdDetector(RegexDetector):
    """National identity numbers the PII vault does not pseudonymise (module docstring)."""

    name = "government_ids"
    rules = GOVERNMENT_RULES


BUILTIN: dict[str, Callable[[], CaptureDetector]] = {
    "secrets": SecretsDetector,
    "government_ids": GovernmentIdDetector,
}
"""The built-in detectors by the name ``MNEMOVAULT_CAPTURE_DETECTORS`` lists them under."""
