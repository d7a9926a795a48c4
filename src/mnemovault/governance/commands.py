"""In-band chat commands (SPEC section 4): one parser and one function, :func:`handle`, that
every chat interface calls (``POST /v1/chat``, ``POST /v1/chat/stream``, the CLI ``chat``,
later the MCP tools), so a command behaves the same everywhere.

A command is a prefix at the start of the message, after any leading whitespace, matched
case-sensitively (``forget:`` is ordinary text):

==================  =========================================================================
``DO_NOT_STORE:``   answer the rest with full retrieval and write nothing
``FORGET_PREVIEW:`` list what a forget of the ids (or of what the query matches) would
                    delete: id, type, archived flag, the first 180 characters; deletes nothing
``FORGET_CONFIRM:`` delete exactly the given ids; with none, refuse
``FORGET:``         ids: delete them; a query: refused unless ``ALLOW_SEMANTIC_FORGET=true``,
                    and the refusal lists the top candidate ids to confirm
``PIN:``            exempt memories from retention
``UNPIN:``          return them to normal decay
==================  =========================================================================

Commands are handled before recall or storage and are never stored themselves. Ids are
separated by whitespace, commas or semicolons; a token that looks like a UUID but is not
one is reported by its position (never echoed: error text carries no request text), and
nothing is changed. Ids of another tenant or scope are "not found", never revealed.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from mnemovault.auth import Principal
from mnemovault.errors import Refused
from mnemovault.governance import service
from mnemovault.models import ForgetResult
from mnemovault.runtime import Runtime

PREFIXES: tuple[str, ...] = ("DO_NOT_STORE:", "FORGET_PREVIEW:", "FORGET_CONFIRM:", "FORGET:",
                             "PIN:", "UNPIN:")
NOTHING_STORED = "Nothing from this exchange was stored."
MAX_LISTED = 50

_SPLIT = re.compile(r"[\s,;]+")
_UUID_LIKE = re.compile(r"(?:urn:uuid:)?\{?[0-9a-fA-F]{8}-\S*|[0-9a-fA-F]{32}")

OutcomeStatus = Literal["answered", "done", "refused", "invalid"]


@dataclass(frozen=True)
class Command:
    """A parsed command: its name (the prefix without the colon) and its argument (the
    rest of the message, stripped)."""

    name: str
    argument: str


@dataclass
class CommandOutcome:
    """What a command did. ``reply`` is the text shown to the caller (placeholders, not
    values: the chat layer reveals them for callers who may see them); ``result`` its data.
    For ``DO_NOT_STORE`` the chat goes on: ``text`` is the message to answer and ``store``
    is false."""

    command: str
    status: OutcomeStatus
    reply: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    store: bool = False
    note: str | None = None

    @property
    def continues_chat(self) -> bool:
        return self.text is not None


@dataclass(frozen=True)
class ParsedIds:
    """Tokens of an argument: valid ids (in order, deduplicated), 1-based positions of
    tokens that look like UUIDs but are not, and positions of other words."""

    ids: list[uuid.UUID]
    malformed: list[int]
    words: list[int]

    @property
    def empty(self) -> bool:
        return not (self.ids or self.malformed or self.words)


def parse(message: str) -> Command | None:
    """The command at the start of ``message`` (after leading whitespace), or None."""
    body = message.lstrip()
    for prefix in PREFIXES:
        if body.startswith(prefix):
            return Command(prefix[:-1], body[len(prefix):].strip())
    return None


def parse_ids(argument: str) -> ParsedIds:
    """Split ``argument`` on whitespace, commas and semicolons and classify each token."""
    ids: list[uuid.UUID] = []
    malformed: list[int] = []
    words: list[int] = []
    for n, token in enumerate((t for t in _SPLIT.split(argument) if t), 1):
        if _UUID_LIKE.fullmatch(token):
            try:
                ids.append(uuid.UUID(token))
            except ValueError:
                malformed.append(n)
        else:
            words.append(n)
    return ParsedIds(list(dict.fromkeys(ids)), malformed, words)


def handle(rt: Runtime, message: str, *, scope: str, principal: Principal,
           request_id: str | None = None) -> CommandOutcome | None:
    """THE in-band command function. Returns None when ``message`` is not a command;
    otherwise runs it in ``scope`` for ``principal`` and returns its outcome.

    Raises:
        Forbidden: the command needs a permission the caller lacks (``memory:forget`` for
            FORGET, FORGET_CONFIRM, PIN and UNPIN), named in the error.
    """
    cmd = parse(message)
    if cmd is None:
        return None
    if cmd.name == "DO_NOT_STORE":
        return CommandOutcome("DO_NOT_STORE", "answered", text=cmd.argument, store=False,
                              note=NOTHING_STORED)
    ctx = _Ctx(rt, scope, principal, request_id)
    if cmd.name == "FORGET_PREVIEW":
        return ctx.preview(cmd.argument)
    if cmd.name == "FORGET_CONFIRM":
        principal.require("memory:forget")
        return ctx.forget_ids("FORGET_CONFIRM", cmd.argument, allow_query=False)
    if cmd.name == "FORGET":
        principal.require("memory:forget")
        return ctx.forget_ids("FORGET", cmd.argument, allow_query=True)
    principal.require("memory:forget")
    return ctx.pin(cmd.name, cmd.argument)


def _invalid(command: str, why: str) -> CommandOutcome:
    return CommandOutcome(command, "invalid", reply=f"{command}: {why}; nothing was changed.",
                          result={"error": why})


def _bad_tokens(command: str, parsed: ParsedIds, *, words_ok: bool) -> CommandOutcome | None:
    if parsed.malformed:
        n = parsed.malformed[0]
        return _invalid(command, f"argument {n} is not a valid memory id (a UUID)")
    if parsed.words and not words_ok:
        return _invalid(command, f"argument {parsed.words[0]} is not a memory id (a UUID)")
    if parsed.words and parsed.ids:
        return _invalid(command, "give either memory ids or a query, not both")
    return None


def _line(row: dict[str, Any]) -> str:
    flags = [row["type"]]
    if row["archived"]:
        flags.append("archived")
    if row["reason"] != "named":
        flags.append(row["reason"])
    text = (" ".join(str(row["excerpt"]).split()) if row.get("excerpt") is not None
            else f"(text withheld: {row.get('withheld')})")
    return f"- {row['id']} ({', '.join(flags)}): {text}"


def _listing(rows: list[dict[str, Any]]) -> list[str]:
    lines = [_line(r) for r in rows[:MAX_LISTED]]
    if len(rows) > MAX_LISTED:
        lines.append(f"… and {len(rows) - MAX_LISTED} more (see the result data)")
    return lines


def _preview_item(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(row["id"]), "type": row["type"], "archived": row["archived"],
            "status": row["status"], "reason": row["reason"], "excerpt": row["excerpt"],
            "withheld": row.get("withheld")}


def _forget_reply(res: ForgetResult) -> str:
    if not res.deleted:
        return ("Nothing was deleted: none of these ids was found in this scope (they may "
                "not exist, or not be visible to you).")
    parts = [f"Forgot {len(res.deleted)} memor{'y' if len(res.deleted) == 1 else 'ies'}"]
    if res.derived:
        parts.append(f"{len(res.derived)} of them derived from the ones named")
    if res.shredded:
        parts.append(f"{len(res.shredded)} vault value(s) shredded")
    if res.not_found:
        parts.append(f"{len(res.not_found)} id(s) not found in this scope")
    return "; ".join(parts) + "."


@dataclass
class _Ctx:
    rt: Runtime
    scope: str
    principal: Principal
    request_id: str | None

    def preview(self, argument: str) -> CommandOutcome:
        name = "FORGET_PREVIEW"
        if not argument:
            return _invalid(name, "give memory ids or a query")
        parsed = parse_ids(argument)
        bad = _bad_tokens(name, parsed, words_ok=True)
        if bad is not None:
            return bad
        if parsed.ids:
            rows = service.forget_preview(self.rt, self.principal, parsed.ids,
                                          scope=self.scope)
            named = {r["id"] for r in rows if r["reason"] == "named"}
            not_found = [i for i in parsed.ids if i not in named]
            mode = "ids"
        else:
            rows = service.forget_preview(self.rt, self.principal, query=argument,
                                          scope=self.scope)
            not_found, mode = [], "query"
        result = {"mode": mode, "items": [_preview_item(r) for r in rows],
                  "not_found": [str(i) for i in not_found]}
        if not rows:
            what = ("none of these ids was found in this scope" if mode == "ids"
                    else "nothing in this scope matches the query")
            return CommandOutcome(name, "done", reply=f"Forget preview: {what}. Nothing was "
                                  "deleted.", result=result)
        head = (f"Forget preview: {len(rows)} memor{'y' if len(rows) == 1 else 'ies'} would "
                "be forgotten (nothing was deleted):")
        lines = [head, *_listing(rows)]
        if not_found:
            lines.append(f"{len(not_found)} id(s) not found in this scope.")
        named_ids = [str(r["id"]) for r in rows if r["reason"] == "named"]
        lines.append("To forget them, send: FORGET_CONFIRM: " + " ".join(named_ids))
        return CommandOutcome(name, "done", reply="\n".join(lines), result=result)

    def forget_ids(self, name: str, argument: str, *, allow_query: bool) -> CommandOutcome:
        if not argument:
            if name == "FORGET_CONFIRM":
                return CommandOutcome(
                    name, "refused", result={"error": "no ids"},
                    reply="FORGET_CONFIRM needs the ids to delete (FORGET_CONFIRM: <id> …); "
                          "nothing was deleted.")
            return _invalid(name, "give memory ids or a query")
        parsed = parse_ids(argument)
        bad = _bad_tokens(name, parsed, words_ok=allow_query)
        if bad is not None:
            return bad
        if parsed.ids:
            res = service.forget(self.rt, self.principal, parsed.ids, scope=self.scope,
                                 trigger="chat", request_id=self.request_id)
            return CommandOutcome(name, "done", reply=_forget_reply(res),
                                  result=res.model_dump(mode="json"))
        try:
            res = service.forget(self.rt, self.principal, query=argument, scope=self.scope,
                                 trigger="chat", request_id=self.request_id)
        except Refused as exc:
            return self._refused(name, [uuid.UUID(c) for c in exc.details.get("candidates",
                                                                             [])])
        if not res.deleted:
            return CommandOutcome(name, "done", result=res.model_dump(mode="json"),
                                  reply="Nothing in this scope matches the query; nothing "
                                        "was deleted.")
        return CommandOutcome(name, "done", reply=_forget_reply(res),
                              result=res.model_dump(mode="json"))

    def _refused(self, name: str, candidates: list[uuid.UUID]) -> CommandOutcome:
        lines = [f"{name} with a query is turned off here (ALLOW_SEMANTIC_FORGET=false), so "
                 "nothing was deleted."]
        if candidates:
            rows = [r for r in service.forget_preview(self.rt, self.principal, candidates,
                                                      scope=self.scope)
                    if r["reason"] == "named"]
            lines.append("Top candidates:")
            lines += _listing(rows)
            lines.append("To forget them, send: FORGET_CONFIRM: "
                         + " ".join(str(c) for c in candidates))
        else:
            lines.append("Nothing in this scope matches the query.")
        return CommandOutcome(name, "refused", reply="\n".join(lines),
                              result={"candidates": [str(c) for c in candidates]})

    def pin(self, name: str, argument: str) -> CommandOutcome:
        if not argument:
            return _invalid(name, "give the id of the memory")
        parsed = parse_ids(argument)
        bad = _bad_tokens(name, parsed, words_ok=False)
        if bad is not None:
            return bad
        res = service.set_pinned(self.rt, self.principal, parsed.ids, name == "PIN",
                                 scope=self.scope, trigger="chat", request_id=self.request_id)
        verb = "Pinned" if name == "PIN" else "Unpinned"
        reply = f"{verb} {len(res.changed)} memor{'y' if len(res.changed) == 1 else 'ies'}"
        if res.not_found:
            reply += f"; {len(res.not_found)} id(s) not found in this scope"
        return CommandOutcome(name, "done", reply=reply + ".",
                              result=res.model_dump(mode="json"))
