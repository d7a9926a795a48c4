"""A subject's episodes -> topical facts (issue 23, item 1).

Grouping: a subject's episodes that hold at least one *statement* (below) are taken in
remembered order and each joins the open group whose centroid (the mean of its members'
stored embeddings) is nearest, if its cosine similarity to it is at least
``librarian_topic_similarity`` and the group has fewer than ``librarian_max_sources``
members; else it opens a new group (single-pass leader clustering, deterministic for a
given order: Hartigan, *Clustering Algorithms*, 1975, ch. 3). Groups of two or more become
facts. The cap keeps a fact about one topic, not a digest of a subject's life.

Statements: the sentences of an episode that say something about its subject: a first
person sentence (``I``, ``my``, ``me``, ``we``…) or one naming the subject, that is not a
question and has 5 to 60 words, placeholders not counted (greetings and short replies say
nothing to keep).

Text, extractive (the default, offline and deterministic): ``<subject>, from 8 May 2023 to
9 June 2023: 8 May 2023: <statement> 9 June 2023: <statement>``: each statement keeps the
date of the episode it came from. With a chat model configured (``MNEMOVAULT_CHAT_PROVIDER``
and ``librarian_use_model``), the model writes the summary from the same statements and
dates, fenced as data (the chat rule, :data:`mnemovault.chat.context.RULE`); its answer is
kept only if it uses no placeholder the sources lack (a model cannot invent a person), and
the span and dates are prefixed by the librarian, so the text keeps its dates whatever the
model wrote. A model that fails or answers unusably falls back to the extractive text.
Stored text holds placeholders only, so that is all a model ever sees.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from mnemovault.chat.context import RULE, context_pack, new_nonce
from mnemovault.errors import MnemoError
from mnemovault.librarian.common import Draft, Episode, day, unit
from mnemovault.llm.base import ChatPrompt, ChatProvider, ContextRecord
from mnemovault.pii.vault import PLACEHOLDER_RE

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|myself|we|our|us)\b", re.I)
_WORD = re.compile(r"[^\W_]+")
MAX_STATEMENTS = 2  # per episode
MIN_WORDS = 5  # placeholders not counted: "Thanks, {person:p_…}!" says nothing to keep
MAX_CHARS = 1500  # of a fact's extractive text
INSTRUCTIONS = (
    "You are a librarian consolidating an agent's memory. The records below are what was "
    "said about one subject, each with its date. Write one to three short sentences that "
    "state the lasting facts they contain about {subject}, keeping the date of each fact. "
    "Copy any token of the form {{kind:p_xxxxxxxxxx}} exactly as written; never invent "
    "names or values. Answer with the sentences only.")


def statements(text: str, subject: str | None) -> list[str]:
    """The sentences of ``text`` about its subject (module docstring), at most
    :data:`MAX_STATEMENTS`, in order. A leading speaker label (``<subject>: ``, as the
    LoCoMo and chat importers write a turn) is not a mention of the subject."""
    if subject and text.lstrip().startswith(subject + ":"):
        text = text.lstrip()[len(subject) + 1:]
    name = subject.lower() if subject else None
    out = []
    for m in _SENTENCE.finditer(text):
        s = m.group(0).strip()
        words = _WORD.findall(PLACEHOLDER_RE.sub(" ", s))
        if s.endswith("?") or not MIN_WORDS <= len(words) <= 60:
            continue
        if _FIRST_PERSON.search(s) or (name and name in s.lower()):
            out.append(s)
            if len(out) == MAX_STATEMENTS:
                break
    return out


def groups(episodes: list[Episode], *, similarity: float,
           max_sources: int) -> list[list[tuple[Episode, list[str]]]]:
    """The topical groups (two members or more) of each subject's episodes with their
    statements (module docstring); episodes without a subject are left alone."""
    out: list[list[tuple[Episode, list[str]]]] = []
    by_subject: dict[str, list[tuple[Episode, list[str]]]] = {}
    for e in episodes:
        if e.subject is None:
            continue
        said = statements(e.content, e.subject)
        if said:
            by_subject.setdefault(e.subject, []).append((e, said))
    for members in by_subject.values():
        open_: list[list[tuple[Episode, list[str]]]] = []
        sums: list[np.ndarray[Any, Any]] = []
        for e, said in members:
            best, best_sim = -1, similarity
            if sums:
                cents = unit(np.stack(sums))
                sims = cents @ e.vector
                for i in np.argsort(-sims, kind="stable").tolist():
                    if len(open_[i]) < max_sources:
                        if float(sims[i]) >= best_sim:
                            best = i
                        break
            if best < 0:
                open_.append([(e, said)])
                sums.append(e.vector.astype(np.float64).copy())
            else:
                open_[best].append((e, said))
                sums[best] = sums[best] + e.vector
        out.extend(g for g in open_ if len(g) > 1)
    out.sort(key=lambda g: (g[0][0].created_at, g[0][0].id))
    return out


def extractive(subject: str, group: list[tuple[Episode, list[str]]]) -> str:
    """The extractive text of a group (module docstring), at most :data:`MAX_CHARS`."""
    first, last = group[0][0].created_at, group[-1][0].created_at
    head = (f"{subject}, on {day(first)}:" if day(first) == day(last)
            else f"{subject}, from {day(first)} to {day(last)}:")
    parts = [head]
    last_day = None
    for e, said in group:
        d = day(e.created_at)  # a date once for the statements of one day
        piece = " ".join(said) if d == last_day else f"{d}: {' '.join(said)}"
        last_day = d
        if sum(len(p) + 1 for p in parts) + len(piece) > MAX_CHARS:
            break
        parts.append(piece if piece.endswith((".", "!")) else piece + ".")
    return " ".join(parts)


def with_model(llm: ChatProvider, subject: str,
               group: list[tuple[Episode, list[str]]]) -> str | None:
    """The model's summary of a group (module docstring), prefixed with the span; None when
    the model failed or its answer is unusable (empty, too long, or naming a placeholder
    no source holds)."""
    records = [ContextRecord(id=e.id, type="episode", date=e.created_at.date().isoformat(),
                             content=f"{day(e.created_at)}: {' '.join(said)}")
               for e, said in group]
    system = "\n\n".join([INSTRUCTIONS.format(subject=subject), RULE,
                          context_pack(records, new_nonce())])
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": f"What do these records say about {subject}?"}]
    try:
        answer = "".join(llm.stream(ChatPrompt(messages=messages, question=messages[-1]
                                               ["content"], records=records))).strip()
    except MnemoError:
        return None
    allowed = {m.group(0) for e, _ in group for m in PLACEHOLDER_RE.finditer(e.content)}
    allowed |= {m.group(0) for m in PLACEHOLDER_RE.finditer(subject)}
    used = {m.group(0) for m in PLACEHOLDER_RE.finditer(answer)}
    if not answer or len(answer) > MAX_CHARS or used - allowed or "{" in PLACEHOLDER_RE.sub(
            "", answer):
        return None
    first, last = group[0][0].created_at, group[-1][0].created_at
    span = day(first) if day(first) == day(last) else f"{day(first)} to {day(last)}"
    return f"{subject} ({span}): {answer}"


def drafts(episodes: list[Episode], *, similarity: float, max_sources: int,
           llm: ChatProvider | None = None) -> list[Draft]:
    """One ``distil`` draft per topical group (module docstring); with ``llm`` its text is
    the model's when usable (``via = "model"``), else the extractive one."""
    out = []
    for g in groups(episodes, similarity=similarity, max_sources=max_sources):
        subject = g[0][0].subject
        assert subject is not None
        text, via = None, "extractive"
        if llm is not None:
            text = with_model(llm, subject, g)
            via = "model" if text is not None else "model_fallback"
        out.append(Draft(kind="distil", content=text or extractive(subject, g),
                         sources=[e for e, _ in g], subject=subject, via=via))
    return out

