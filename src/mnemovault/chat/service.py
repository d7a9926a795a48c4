"""One chat turn (SPEC sections 4 and 5), the same for every interface.

:func:`open_stream` runs, in order: the in-band command check
(:func:`mnemovault.governance.commands.handle`, before any recall or storage); recall in
the request's scope; the fenced context pack and system prompt
(:mod:`mnemovault.chat.context`); then returns a :class:`~mnemovault.chat.models.ChatStream`
whose iteration streams the model's answer (placeholders only reach the model),
de-anonymised on the fly for a caller with ``pii:reveal`` who asked (a placeholder split
across chunks is held back until complete), and finally stores the exchange as an episode,
derived from the records it was shown (forgetting any of them forgets the exchange too,
since the answer may quote them), unless storing is off or the message was
``DO_NOT_STORE:``.

``POST /v1/chat`` collects the very same events (:meth:`ChatStream.collect`), so every
command and answer is identical on both endpoints.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from mnemovault.auth import Principal
from mnemovault.chat.context import system_prompt
from mnemovault.chat.models import ChatEvent, ChatRequest, ChatStream, RecordRef
from mnemovault.errors import Conflict, ValidationError
from mnemovault.governance import commands
from mnemovault.governance.forget import excerpt
from mnemovault.guard import capture
from mnemovault.llm.base import ChatPrompt, ContextRecord
from mnemovault.memories.write import remember_many
from mnemovault.models import MAX_CONTENT_CHARS
from mnemovault.pii import service as pii
from mnemovault.pii.vault import PLACEHOLDER_RE, StreamRevealer
from mnemovault.recall.service import recall
from mnemovault.runtime import Runtime

NOT_STORED_RACE = ("The exchange was not stored: a memory it drew on was forgotten in the "
                   "meantime.")


def _placeholders(texts: Iterable[str]) -> set[str]:
    return {m.group(0) for t in texts for m in PLACEHOLDER_RE.finditer(t)}


def _tokens(rt: Runtime, who: Principal, req: ChatRequest, chunks: Iterable[str],
            known: set[str], request_id: str | None, raw: list[str]) -> Iterator[ChatEvent]:
    """``chunks`` as token events, placeholders resolved for this caller; the raw chunks
    (placeholders intact) are appended to ``raw``."""
    outputs = pii.placeholder_outputs(rt, who, known, reveal=req.reveal,
                                      request_id=request_id)
    revealer = StreamRevealer(lambda p: outputs.get(p, p))
    for chunk in chunks:
        raw.append(chunk)
        out = revealer.feed(chunk)
        if out:
            yield ChatEvent("token", {"text": out})
    tail = revealer.flush()
    if tail:
        yield ChatEvent("token", {"text": tail})


def open_stream(rt: Runtime, req: ChatRequest, who: Principal,
                request_id: str | None = None) -> ChatStream:
    """Prepare one turn (command, recall, prompt) and return its stream.

    Raises:
        Forbidden: missing ``memory:read``, ``pii:reveal`` (with ``reveal``),
            ``memory:write`` (when the exchange is to be stored) or ``memory:forget`` (for
            forget and pin commands); a scope the key is not limited to.
        ValidationError: names the field.
        Refused, Unavailable: the capture guard refused the message to be stored or a
            turn of the history (sent to the model whether or not anything is stored), or
            failed (:mod:`mnemovault.guard.capture`).
    """
    who.require("memory:read")
    who.check_scope(req.scope)
    if req.reveal:
        who.require("pii:reveal")
    outcome = commands.handle(rt, req.message, scope=req.scope, principal=who,
                              request_id=request_id)
    if outcome is not None and not outcome.continues_chat:
        done_cmd = outcome

        def command_events() -> Iterator[ChatEvent]:
            raw: list[str] = []
            yield from _tokens(rt, who, req, [done_cmd.reply],
                               _placeholders([done_cmd.reply]), request_id, raw)
            yield ChatEvent("done", {"command": done_cmd.command, "status": done_cmd.status,
                                     "result": done_cmd.result, "stored": None,
                                     "note": done_cmd.note})

        return ChatStream({"command": outcome.command, "status": outcome.status,
                           "records": [], "provider": None}, command_events)

    text = outcome.text if outcome is not None else req.message
    store = req.store and outcome is None
    command = outcome.command if outcome is not None else None
    note = None if store else commands.NOTHING_STORED
    if store:
        who.require("memory:write")
    # the capture guard before any answer (the stored exchange passes it again, with the
    # answer, in the write path): a refused message gets no reply. A DO_NOT_STORE message
    # is guarded too: nothing is stored, but it would reach the model
    if text:
        capture.check_capture(rt, path="chat", fields={"content": text}, tenant=who.tenant,
                              request_id=request_id)
    # the history reaches the model (stored or not): no secret leaves through it
    capture.check_capture(rt, path="chat", fields={
        f"history.{i}.content": t.content for i, t in enumerate(req.history)},
        tenant=who.tenant, request_id=request_id)
    if not text or not text.strip():
        reply = "There is nothing to answer after DO_NOT_STORE:."

        def empty_events() -> Iterator[ChatEvent]:
            yield ChatEvent("token", {"text": f"{reply}\n\n{note}"})
            yield ChatEvent("done", {"command": command, "status": "answered", "result": None,
                                     "stored": None, "note": note})

        return ChatStream({"command": command, "status": "answered", "records": [],
                           "provider": None}, empty_events)

    k = req.k or rt.settings.chat_k
    filters = {"subject": req.subject} if req.subject else None
    hits = recall(rt, who, text, scope=req.scope, k=k, filters=filters, touch=store,
                  request_id=request_id)
    records = [ContextRecord(id=h.memory.id, type=h.memory.type,
                             date=h.memory.created_at.date().isoformat(),
                             content=h.memory.content) for h in hits]
    redacted = pii.redact(rt, who, [text, *(t.content for t in req.history)])
    question, past = redacted[0], redacted[1:]
    messages = [{"role": "system", "content": system_prompt(records)},
                *({"role": t.role, "content": c} for t, c in zip(req.history, past,
                                                                 strict=True)),
                {"role": "user", "content": question}]
    prompt = ChatPrompt(messages=messages, question=question, records=records)
    provider = rt.llm
    refs = [RecordRef(id=r.id, type=r.type, date=r.date).model_dump(mode="json")
            for r in records]
    meta: dict[str, Any] = {"command": command, "status": "answered", "records": refs,
                            "provider": provider.name}

    def events() -> Iterator[ChatEvent]:
        raw: list[str] = []
        known = _placeholders(m["content"] for m in messages)
        yield from _tokens(rt, who, req, provider.stream(prompt), known, request_id, raw)
        stored = None
        final_note = note
        if store:
            stored = _store(rt, who, req, "".join(raw), records, request_id)
            if stored is None:
                final_note = NOT_STORED_RACE
        if final_note:
            yield ChatEvent("token", {"text": f"\n\n{final_note}"})
        yield ChatEvent("done", {"command": command, "status": "answered", "result": None,
                                 "stored": str(stored) if stored else None,
                                 "note": final_note})

    return ChatStream(meta, events)


def _store(rt: Runtime, who: Principal, req: ChatRequest, answer: str,
           records: list[ContextRecord], request_id: str | None) -> Any:
    """Store the exchange (the answer with its placeholders, the message as written: the
    write path pseudonymises it). Returns the episode id, or None when a record it drew on
    was forgotten meanwhile (storing it would bring that record's content back)."""
    head = f"User: {req.message}\nAssistant: "
    content = head + excerpt(answer, max(MAX_CONTENT_CHARS - len(head), 0))
    item = {"content": content, "scope": req.scope, "subject": req.subject, "type": "episode",
            "provenance": {"source": "chat"},
            "derived_from": [str(r.id) for r in records]}
    try:
        receipt = remember_many(rt, who, [item], request_id=request_id, trigger="chat")[0]
    except (ValidationError, Conflict) as exc:
        if exc.field and "derived_from" in exc.field:
            return None
        raise
    return receipt.id
