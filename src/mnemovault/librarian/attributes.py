"""A subject's episodes -> one fact per attribute value, keyed by (subject, attribute), so a
later value supersedes an earlier one in valid time (issue 23, item 2: "the same attribute
found by the librarian").

An *attribute statement* is a first-person sentence of an episode (or one naming its
subject) that matches one of :data:`PATTERNS`: where the subject lives, where it works,
what its favourite *thing* is. Each becomes a ``attribute`` draft: the text ``<subject>
(<date>): lives in <value>.``, lineage to its episode, the episode's time as its valid time
(``valid_from``), and the upsert key ``librarian attribute <fingerprint of subject and
attribute>``. Two statements of one attribute then do what two keyed remembers do
(:mod:`mnemovault.memories.valid_time`): the later-dated one is current and the earlier
one's valid time ends where it begins, whatever order they were written or found in; a
recall returns the current value, and ``as_of`` the value of that time.

Rules, not a model: deterministic and offline, like the extractive distillation. What they
miss (a move told without "live", a value spread over two sentences) stays in the
episodes and the distilled facts, never superseded. Values are what the sentence holds
after pseudonymisation: a personal value is a placeholder.
"""

from __future__ import annotations

import hashlib
import re

from mnemovault.librarian.common import Draft, Episode, _letters, day

_SUBJECT = r"(?:i|we|{subject})"
PATTERNS: tuple[tuple[str, str, str], ...] = (
    # (attribute, regex over a sentence with {subject} filled in, rendered verb)
    ("home", _SUBJECT + r"(?:'ve| have)? (?:just |recently |finally )?(?:live|lives|living|"
     r"moved|move|relocated)(?: now)? (?:in|to) (?P<v>[^,.;!?]{2,60})", "lives in"),
    ("employer", _SUBJECT + r"(?:'ve| have)? (?:now |just )?(?:work|works|working|started "
     r"working|got a job) (?:at|for) (?P<v>[^,.;!?]{2,60})", "works at"),
    ("favourite {thing}", r"(?:my|{subject}'s) (?:new )?favou?rite (?P<thing>[a-z]{3,20}) "
     r"(?:is|now is|has become) (?P<v>[^,.;!?]{2,60})", "favourite {thing} is"),
)
_STOP = frozenset({"with", "for", "last", "because", "since", "after", "when", "and", "but",
                   "so", "to", "in", "on", "at", "this", "next", "about", "now", "these",
                   "those", "recently", "ago", "back"})
MAX_VALUE_WORDS = 5


def _value(raw: str) -> str:
    """The value a match captured, cut before the first word that starts what is said
    about it (``Oslo last month for a new job`` -> ``Oslo``), at most
    :data:`MAX_VALUE_WORDS` words."""
    words: list[str] = []
    for w in raw.strip().split():
        if words and w.lower() in _STOP:
            break
        words.append(w)
        if len(words) == MAX_VALUE_WORDS:
            break
    return " ".join(words)


def found(text: str, subject: str) -> list[tuple[str, str, str]]:
    """``(attribute, value, rendered)`` of each attribute statement in ``text`` (module
    docstring), first match per attribute."""
    name = re.escape(subject.lower())
    out: dict[str, tuple[str, str, str]] = {}
    for attribute, pattern, verb in PATTERNS:
        rx = re.compile(r"\b" + pattern.replace("{subject}", name), re.I)
        for m in rx.finditer(text):
            thing = m.groupdict().get("thing")
            attr = attribute.replace("{thing}", thing.lower()) if thing else attribute
            value = _value(m.group("v"))
            if attr not in out and value:
                out[attr] = (attr, value, verb.replace("{thing}", thing.lower())
                             if thing else verb)
    return list(out.values())


def key_of(subject: str, attribute: str) -> str:
    """The fact's upsert key: the same for every value of one subject's attribute."""
    h = hashlib.sha256(f"{subject}\x00{attribute}".encode()).digest()[:10]
    return f"librarian attribute {_letters(h)}"


def drafts(episodes: list[Episode]) -> list[Draft]:
    """One ``attribute`` draft per attribute statement of the subjects' episodes, in
    remembered order."""
    out = []
    for e in episodes:
        if e.subject is None:
            continue
        text = e.content
        if text.lstrip().startswith(e.subject + ":"):  # a speaker label, not a mention
            text = text.lstrip()[len(e.subject) + 1:]
        for attribute, value, verb in found(text, e.subject):
            out.append(Draft(kind="attribute", content=f"{e.subject} ({day(e.created_at)}): "
                                                       f"{verb} {value}.",
                             sources=[e], subject=e.subject,
                             notes={"attribute": attribute,
                                    "key": key_of(e.subject, attribute)}))
    return out
