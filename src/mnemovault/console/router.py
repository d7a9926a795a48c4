"""The console's pages (issue 25). Each handler settles the session, authenticates its key
afresh (:meth:`MemoryVault.authenticate`, as every HTTP request does), checks the CSRF token
of a form, calls the same facade method as the HTTP route of that action, and renders the
answer. What a page shows is what the facade returns for that key: nothing is filtered or
decided here. The navigation only hides links to pages whose first call would be refused
(a member's session has no review link; ``/console/review`` still answers 403 from the
facade's own check).

Responses carry the Content-Security-Policy :data:`CSP` (no inline script or style, nothing
from another origin), ``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer``,
``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store``. The session cookie is
``HttpOnly``, ``SameSite=Strict``, path ``/console``, and ``Secure`` when the request came
over TLS. Forms post back with a CSRF token (the session's; the sign-in form's is a
double-submitted cookie, since there is no session yet).

A subject never goes into a URL: lookups, exports, rectifications and erasures are POSTs.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import secrets
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Annotated, Any

import jinja2
from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import Markup, escape

from mnemovault import __version__
from mnemovault.audit.service import deployment_public_key
from mnemovault.auth import ALL_PERMISSIONS, Principal
from mnemovault.console.sessions import Session, SessionStore
from mnemovault.errors import (
    ConfigError,
    Forbidden,
    MnemoError,
    NotFound,
    Unauthenticated,
    ValidationError,
)
from mnemovault.guard.sanitise import REDACTION, flag_list
from mnemovault.pii.vault import PLACEHOLDER_RE
from mnemovault.vault import MemoryVault

log = logging.getLogger(__name__)

COOKIE = "mv_console"
PRE_COOKIE = "mv_console_signin"  # the sign-in form's double-submitted CSRF token
PREFIX = "/console"
PAGE = 25  # items per page of the review queue and the flagged list

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
"""The console's Content-Security-Policy: its own script and stylesheet only."""

STATIC = {"console.css": "text/css; charset=utf-8",
          "console.js": "text/javascript; charset=utf-8"}

# the pages, in the order of the navigation, with the permission their first call needs
PAGES = (("review", "Review queue", "review:approve"),
         ("flagged", "Flagged imports", "memory:read"),
         ("subjects", "Subject requests", "subject:erase"),
         ("audit", "Audit", "audit:read"),
         ("tenants", "Tenant", "admin:export"),
         ("keys", "Keys", "keys:manage"))

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("mnemovault.console", "templates"),
    autoescape=True, trim_blocks=True, lstrip_blocks=True)


def _marked(text: str | None, can_reveal: bool, csrf: str) -> Markup:
    """``text`` escaped, each placeholder in a ``<span class="ph">`` (with a reveal form
    for a key holding ``pii:reveal``) and each injection redaction in ``<mark>``."""
    if text is None:
        return Markup("")
    out: list[str] = []
    pos = 0
    pattern = re.compile(PLACEHOLDER_RE.pattern + "|" + re.escape(REDACTION))
    for m in pattern.finditer(text):
        out.append(str(escape(text[pos:m.start()])))
        token = m.group(0)
        if token == REDACTION:
            out.append(f'<mark class="redacted" title="removed by the injection sanitiser">'
                       f"{escape(token)}</mark>")
        elif can_reveal:
            out.append(f'<span class="ph">{escape(token)}<form class="reveal" method="post" '
                       f'action="{PREFIX}/reveal"><input type="hidden" name="csrf" '
                       f'value="{escape(csrf)}"><input type="hidden" name="placeholder" '
                       f'value="{escape(token)}"><button type="submit" '
                       f'aria-label="reveal {escape(token)}">reveal</button></form></span>')
        else:
            out.append(f'<span class="ph">{escape(token)}</span>')
        pos = m.end()
    out.append(str(escape(text[pos:])))
    return Markup("".join(out))


def _diff(old: str, new: str) -> Markup:
    """A word diff of ``old`` -> ``new``: ``<del>`` and ``<ins>`` spans (difflib)."""
    a, b = old.split(), new.split()
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(str(escape(" ".join(a[i1:i2]))))
            continue
        if op in ("delete", "replace"):
            out.append(f"<del>{escape(' '.join(a[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{escape(' '.join(b[j1:j2]))}</ins>")
    return Markup(" ".join(out))


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


_env.filters["flags"] = flag_list  # the sanitiser's label: a list, or (older records) a string
_env.filters["when"] = _when
_env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False,
                                                     default=str, sort_keys=True)


def _form(max_length: int = 200, default: str = "") -> Any:
    """A form field (its own FieldInfo: one shared by two parameters would take one
    name)."""
    return Form(default, max_length=max_length)


def _headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def console_router(vault: MemoryVault, sessions: SessionStore | None = None) -> APIRouter:
    """The console's routes under ``/console``, bound to ``vault``; ``sessions`` defaults
    to a new in-memory store with the settings' timeouts."""
    settings = vault.settings
    store = sessions or SessionStore(
        idle_seconds=settings.console_idle_minutes * 60,
        absolute_seconds=settings.console_absolute_hours * 3600)
    router = APIRouter(prefix=PREFIX, include_in_schema=False)
    router.sessions = store  # type: ignore[attr-defined]  # for tests and the bench

    # -- rendering ------------------------------------------------------------------------
    def page(name: str, request: Request, session: Session | None, who: Principal | None,
             status: int = 200, **ctx: Any) -> HTMLResponse:
        csrf = session.csrf if session else ""
        can_reveal = who is not None and "pii:reveal" in who.permissions
        flash = list(session.flash) if session else []
        if session:
            session.flash.clear()
        nav = ([(slug, title) for slug, title, perm in PAGES if perm in who.permissions]
               if who is not None else [])
        html = _env.get_template(name).render(
            prefix=PREFIX, csrf=csrf, who=who, nav=nav, flash=flash, version=__version__,
            marked=lambda t: _marked(t, can_reveal, csrf), diff=_diff,
            can_reveal=can_reveal, current=name.removesuffix(".html"), **ctx)
        return _headers(HTMLResponse(html, status_code=status))  # type: ignore[return-value]

    def refused(request: Request, session: Session | None, who: Principal | None,
                exc: MnemoError) -> HTMLResponse:
        return page("error.html", request, session, who, status=exc.status,
                    message=str(exc), code=exc.code)

    def to(path: str) -> Response:
        return _headers(RedirectResponse(PREFIX + path, status_code=303))

    def signin_redirect() -> Response:
        r = to("/signin")
        r.delete_cookie(COOKIE, path=PREFIX)
        return r

    def rid(request: Request) -> str:
        return str(getattr(request.state, "request_id", None) or uuid.uuid4())

    class _Out(Exception):
        """A response that ends the handler early (no session, bad CSRF token)."""

        def __init__(self, response: Response) -> None:
            self.response = response

    def current(request: Request, *, csrf: str | None = None, form: bool = False,
                allow_deleted: bool = False) -> tuple[Session, Principal]:
        """The request's session and its key's principal, authenticated afresh; a form's
        CSRF token checked. Raises :class:`_Out` with the answer otherwise."""
        session = store.get(request.cookies.get(COOKIE))
        if session is None:
            raise _Out(signin_redirect())
        if form and not session.csrf_ok(csrf):
            raise _Out(page("error.html", request, session, None, status=403,
                            code="csrf", message="csrf: the form's token is missing or "
                            "wrong; reload the page and try again"))
        try:
            who = (vault.tenants.authenticate(session.token, allow_deleted=True)
                   if allow_deleted else vault.authenticate(session.token))
        except Unauthenticated:
            try:  # a soft-deleted tenant's owner: only the tenant page (to cancel) works
                vault.tenants.authenticate(session.token, allow_deleted=True)
            except Unauthenticated:
                store.revoke(request.cookies.get(COOKIE))
                raise _Out(signin_redirect()) from None
            session.flash.append({"kind": "error", "text": "this tenant is deleted: only "
                                  "cancelling the deletion is possible"})
            raise _Out(to("/tenants")) from None
        return session, who

    def guarded(fn: Callable[..., Response]) -> Callable[..., Response]:
        """Run a handler; an early answer or a refusal from the facade becomes the page."""
        import functools

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Response:
            try:
                return fn(*args, **kwargs)
            except _Out as out:
                return out.response
        return run

    def act(request: Request, session: Session, who: Principal, back: str,
            action: Callable[[], Any], ok: Callable[[Any], dict[str, Any]]) -> Response:
        """A form's action: call the facade; flash its outcome (or its refusal) and go back
        to ``back`` (post/redirect/get)."""
        try:
            result = action()
        except MnemoError as exc:
            session.flash.append({"kind": "error", "text": str(exc), "code": exc.code})
        else:
            session.flash.append({"kind": "ok", **ok(result)})
        return to(back)

    # -- static files and sign-in ---------------------------------------------------------
    @router.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC:
            return _headers(Response("not found", status_code=404, media_type="text/plain"))
        body = resources.files("mnemovault.console").joinpath("static", name).read_bytes()
        r = Response(body, media_type=STATIC[name])
        r.headers["Cache-Control"] = "public, max-age=3600"
        return _headers(r)

    @router.get("")
    @guarded
    def home(request: Request) -> Response:
        session, who = current(request)
        return page("home.html", request, session, who)

    @router.get("/signin")
    def signin_form(request: Request) -> Response:
        if store.get(request.cookies.get(COOKIE)) is not None:
            return to("")
        pre = secrets.token_urlsafe(32)
        r = page("signin.html", request, None, None, signin_csrf=pre, error=None)
        r.set_cookie(PRE_COOKIE, pre, path=PREFIX, httponly=True, samesite="strict",
                     secure=_secure(request), max_age=3600)
        return r

    @router.post("/signin")
    def signin(request: Request, token: str = _form(300),
               csrf: str = _form()) -> Response:
        pre = request.cookies.get(PRE_COOKIE)
        if not pre or not secrets.compare_digest(pre.encode(), csrf.encode()):
            return page("error.html", request, None, None, status=403, code="csrf",
                        message="csrf: the sign-in form's token is missing or wrong; "
                        "reload the page and try again")
        try:
            who = vault.authenticate(token.strip())
        except Unauthenticated as exc:
            deleted: Principal | None
            try:  # a soft-deleted tenant's admin:delete key may sign in to cancel
                deleted = vault.tenants.authenticate(token.strip(), allow_deleted=True)
            except Unauthenticated:
                deleted = None
            if deleted is not None:
                sid, _ = store.create(token.strip(), deleted.tenant, deleted.key_id)
                r = to("/tenants")
                r.set_cookie(COOKIE, sid, path=PREFIX, httponly=True, samesite="strict",
                             secure=_secure(request))
                return r
            fresh = secrets.token_urlsafe(32)
            r = page("signin.html", request, None, None, status=401, signin_csrf=fresh,
                     error=str(exc))
            r.set_cookie(PRE_COOKIE, fresh, path=PREFIX, httponly=True, samesite="strict",
                         secure=_secure(request), max_age=3600)
            return r
        sid, _ = store.create(token.strip(), who.tenant, who.key_id)
        first = next((slug for slug, _, perm in PAGES if perm in who.permissions), "")
        r = to("/" + first if first else "")
        r.set_cookie(COOKIE, sid, path=PREFIX, httponly=True, samesite="strict",
                     secure=_secure(request))
        r.delete_cookie(PRE_COOKIE, path=PREFIX)
        return r

    @router.post("/signout")
    def signout(request: Request, csrf: str = _form()) -> Response:
        sid = request.cookies.get(COOKIE)
        session = store.get(sid)
        if session is not None and not session.csrf_ok(csrf):
            return page("error.html", request, session, None, status=403, code="csrf",
                        message="csrf: the form's token is missing or wrong")
        store.revoke(sid)
        return signin_redirect()

    @router.post("/reveal")
    @guarded
    def reveal(request: Request, placeholder: str = _form(64),
               csrf: str = _form()) -> Response:
        """One placeholder's value for a key with ``pii:reveal``: the facade's audited
        reveal (:meth:`MemoryVault.vault_entry`)."""
        session, who = current(request, csrf=csrf, form=True)
        wants_json = "application/json" in request.headers.get("accept", "")
        try:
            entry = vault.vault_entry(placeholder, reveal=True, principal=who,
                                      request_id=rid(request))
        except MnemoError as exc:
            if wants_json:
                return _headers(JSONResponse({"error": str(exc)}, status_code=exc.status))
            return refused(request, session, who, exc)
        value = entry.get("value")
        if wants_json:
            return _headers(JSONResponse({"placeholder": placeholder, "value": value}))
        return page("reveal.html", request, session, who, placeholder=placeholder,
                    value=value)

    # -- 2. review queue ------------------------------------------------------------------
    @router.get("/review")
    @guarded
    def review(request: Request, cursor: uuid.UUID | None = None,
               scope: Annotated[str | None, Query(min_length=1, max_length=200)] = None
               ) -> Response:
        session, who = current(request)
        try:
            queue = vault.review.list(scope=scope, limit=PAGE, cursor=cursor, principal=who)
        except MnemoError as exc:
            return refused(request, session, who, exc)
        items = []
        for m in queue.items:
            parent = None
            if m.parent_id is not None:
                try:
                    parent = vault.get(m.parent_id, principal=who)
                except MnemoError:
                    parent = None
            prov = dict(m.provenance)
            items.append({"m": m, "parent": parent,
                          "flags": flag_list(prov.get("injection_flags")),
                          "guard": prov.get("guard_findings") or prov.get("guard"),
                          "captured_by": prov.get("captured_by"),
                          "provenance": {k: v for k, v in sorted(prov.items())
                                         if k not in ("injection_flags", "review", "captured_by")}})
        return page("review.html", request, session, who, items=items,
                    next_cursor=queue.next_cursor, first=cursor is None, scope=scope)

    def decide(kind: str) -> Callable[..., Response]:
        @guarded
        def handler(request: Request, memory_id: uuid.UUID,
                    comment: str = _form(2000),
                    csrf: str = _form()) -> Response:
            session, who = current(request, csrf=csrf, form=True)
            call = vault.review.approve if kind == "approve" else vault.review.reject
            return act(request, session, who, "/review",
                       lambda: call(memory_id, comment=comment.strip() or None,
                                    principal=who, request_id=rid(request)),
                       lambda d: {"text": f"{d.decision} {d.id} (now {d.status}); "
                                  f"reviewer {d.reviewer}, audit row {d.audit_seq}"})
        return handler

    router.add_api_route("/review/{memory_id}/approve", decide("approve"), methods=["POST"])
    router.add_api_route("/review/{memory_id}/reject", decide("reject"), methods=["POST"])

    # -- 3. flagged imports ---------------------------------------------------------------
    @router.get("/flagged")
    @guarded
    def flagged(request: Request, cursor: uuid.UUID | None = None,
                scope: Annotated[str | None, Query(min_length=1, max_length=200)] = None
                ) -> Response:
        session, who = current(request)
        try:
            got = vault.list(scope=scope, limit=PAGE, cursor=cursor, flagged=True,
                             principal=who)
        except MnemoError as exc:
            return refused(request, session, who, exc)
        return page("flagged.html", request, session, who, items=got.items,
                    next_cursor=got.next_cursor, first=cursor is None, scope=scope)

    @router.post("/flagged/{memory_id}/{action}")
    @guarded
    def flagged_action(request: Request, memory_id: uuid.UUID, action: str,
                       csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        if action == "forget":
            return act(request, session, who, "/flagged",
                       lambda: vault.delete([memory_id], principal=who, trigger="console",
                                            request_id=rid(request)),
                       lambda r: {"text": f"forgot {len(r.deleted)} memories "
                                  f"(audit row {r.audit_seq})"})
        if action in ("keep", "review"):
            return act(request, session, who, "/flagged",
                       lambda: vault.review.flag(memory_id, action, principal=who,
                                                 request_id=rid(request)),
                       lambda r: {"text": f"{memory_id}: {r['outcome']} "
                                  f"(audit row {r['audit_seq']})"})
        return refused(request, session, who,
                       ValidationError("action: one of keep, forget, review",
                                                   field="action"))

    # -- 4. subject requests --------------------------------------------------------------
    def subject_page(request: Request, session: Session, who: Principal,
                     subject: str = "", scope: str = "", *, erasure: Any = None,
                     error: str | None = None, notice: str | None = None,
                     status: int = 200) -> HTMLResponse:
        found: dict[str, Any] | None = None
        if subject and scope and error is None:
            try:
                doc = vault.subjects.export(subject, scope=scope, principal=who,
                                            request_id=rid(request))
                first = vault.subjects.list(subject, scope=scope, limit=20, principal=who)
                counts = Counter(f"memories ({m['type']})" for m in doc["memories"])
                counts["procedures"] = len(doc["procedures"])
                counts["runs"] = len(doc["runs"])
                counts["vault entries"] = len(doc["vault_entries"])
                found = {"counts": dict(counts), "items": first.items,
                         "more": first.next_cursor is not None,
                         "fingerprint": doc["subject_fingerprint"]}
            except MnemoError as exc:
                error, status = str(exc), exc.status
        try:
            ledger = vault.subjects.erasures(limit=20, principal=who)
        except MnemoError as exc:
            ledger = {"items": [], "next_before": None, "error": str(exc)}
        for item in ledger["items"]:
            item["has_receipt"] = store.receipt(who.tenant, item["audit_seq"]) is not None
        return page("subjects.html", request, session, who, subject=subject, scope=scope,
                    found=found, erasure=erasure, error=error, notice=notice,
                    ledger=ledger, status=status)

    @router.get("/subjects")
    @guarded
    def subjects(request: Request) -> Response:
        session, who = current(request)
        try:  # the page's first call: the facade's own permission check
            vault.subjects.erasures(limit=1, principal=who)
        except MnemoError as exc:
            return refused(request, session, who, exc)
        return subject_page(request, session, who)


    @router.post("/subjects/lookup")
    @guarded
    def subject_lookup(request: Request, subject: str = _form(), scope: str = _form(),
                       csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        return subject_page(request, session, who, subject.strip(), scope.strip())

    @router.post("/subjects/export")
    @guarded
    def subject_export(request: Request, subject: str = _form(), scope: str = _form(),
                       csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        try:
            doc = vault.subjects.export(subject.strip(), scope=scope.strip(), principal=who,
                                        request_id=rid(request))
        except MnemoError as exc:
            return refused(request, session, who, exc)
        body = json.dumps(doc, indent=2, ensure_ascii=False, default=str)
        r = Response(body, media_type="application/json")
        r.headers["Content-Disposition"] = 'attachment; filename="subject-export.json"'
        return _headers(r)

    @router.post("/subjects/rectify")
    @guarded
    def subject_rectify(request: Request, memory_id: str = _form(64),
                        content: str = _form(100_000),
                        subject: str = _form(), scope: str = _form(),
                        csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        try:
            done = vault.subjects.rectify(memory_id, content, principal=who,
                                          trigger="console", request_id=rid(request))
        except MnemoError as exc:
            return subject_page(request, session, who, subject, scope,
                                notice=f"rectify refused: {exc}", status=exc.status)
        return subject_page(request, session, who, subject, scope,
                            notice=f"rectified {done.id}: version {done.version} "
                                   f"({done.status}), audit row {done.audit_seq}")

    @router.post("/subjects/erase")
    @guarded
    def subject_erase(request: Request, subject: str = _form(), scope: str = _form(),
                      confirm: str = _form(), csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        subject, scope = subject.strip(), scope.strip()
        if confirm.strip() != subject or not subject:
            return subject_page(request, session, who, subject, scope, status=409,
                                notice="erase refused: type the subject exactly as "
                                       "written to confirm")
        try:
            done = vault.subjects.erase(subject, scope=scope, principal=who,
                                        trigger="console", request_id=rid(request))
        except MnemoError as exc:
            return subject_page(request, session, who, subject, scope,
                                notice=f"erase refused: {exc}", status=exc.status)
        store.keep_receipt(who.tenant, done.receipt)
        return subject_page(request, session, who, erasure=done)

    @router.get("/subjects/receipts/{audit_seq}")
    @guarded
    def receipt_download(request: Request, audit_seq: int) -> Response:
        session, who = current(request)
        try:  # who may read the ledger may download its receipts
            vault.subjects.erasures(limit=1, principal=who)
        except MnemoError as exc:
            return refused(request, session, who, exc)
        doc = store.receipt(who.tenant, audit_seq)
        if doc is None:
            return refused(request, session, who, NotFound(
                "receipt: not issued by this server process (keep the downloaded file)",
                field="audit_seq"))
        r = Response(json.dumps(doc, indent=2, sort_keys=True), media_type="application/json")
        r.headers["Content-Disposition"] = (f'attachment; filename="erasure-receipt-'
                                            f'{audit_seq}.json"')
        return _headers(r)

    # -- 5. audit -------------------------------------------------------------------------
    def _pubkey() -> Any:
        try:
            found = deployment_public_key(settings)
        except ConfigError:
            return None
        return found[0] if found else None

    def audit_page(request: Request, session: Session, who: Principal, *,
                   since: str | None = None, until: str | None = None,
                   before: int | None = None, seq: int | None = None,
                   verified: Any = None) -> HTMLResponse:
        try:
            status = vault.audit.checkpoint_status(who, _pubkey())
        except MnemoError as exc:
            return refused(request, session, who, exc)
        error = None

        def parsed(v: str | None, name: str) -> datetime | None:
            if not v:
                return None
            try:
                t = datetime.fromisoformat(v)
            except ValueError:
                raise ValidationError(f"{name}: not a date and time (YYYY-MM-DDTHH:MM)",
                                      field=name) from None
            return t if t.tzinfo else t.replace(tzinfo=UTC)

        rows: dict[str, Any] = {"items": [], "next_before": None}
        proof = None
        try:
            rows = vault.audit.rows(who, since=parsed(since, "since"),
                                    until=parsed(until, "until"), before=before, limit=50)
            if seq is not None:
                proof = vault.audit.inclusion_checked(who, seq)
        except MnemoError as exc:
            error = str(exc)
        return page("audit.html", request, session, who, status_=status, rows=rows,
                    since=since or "", until=until or "", seq=seq, proof=proof,
                    verified=verified, error=error)

    @router.get("/audit")
    @guarded
    def audit(request: Request,
              since: Annotated[str | None, Query(max_length=40)] = None,
              until: Annotated[str | None, Query(max_length=40)] = None,
              before: Annotated[int | None, Query(ge=1)] = None,
              seq: Annotated[int | None, Query(ge=1)] = None) -> Response:
        session, who = current(request)
        return audit_page(request, session, who, since=since, until=until, before=before,
                          seq=seq)

    @router.post("/audit/verify")
    @guarded
    def audit_verify(request: Request, csrf: str = _form()) -> Response:
        """The full walk (:meth:`AuditService.verify`, as ``mnemovault audit verify``):
        every link and row hash, and the latest checkpoint's root and signature."""
        session, who = current(request, csrf=csrf, form=True)
        try:
            note = vault.audit.checkpoint(who)["note"]
        except MnemoError:
            note = None
        key = _pubkey()
        try:
            result = vault.audit.verify(who, checkpoint=note, public_key=key,
                                        allow_unsigned=key is None)
            verified = {"ok": result.ok, "summary": result.summary(), "rows": result.rows,
                        "error_line": result.error_line}
        except MnemoError as exc:
            return refused(request, session, who, exc)
        except ValueError as exc:  # a checkpoint that cannot be read
            verified = {"ok": False, "summary": str(exc), "rows": 0, "error_line": None}
        return audit_page(request, session, who, verified=verified)

    @router.post("/audit/checkpoint")
    @guarded
    def audit_checkpoint(request: Request, csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        return act(request, session, who, "/audit",
                   lambda: vault.audit.checkpoint(who, sign_now=True),
                   lambda c: {"text": f"signed a checkpoint at size {c['size']}"})

    # -- 6. tenant ------------------------------------------------------------------------
    def tenant_page(request: Request, session: Session, who: Principal,
                    job: dict[str, Any] | None = None) -> HTMLResponse:
        state = None
        if "admin:delete" in who.permissions:
            try:
                state = vault.tenants.status(who.tenant, principal=who)
            except MnemoError:
                state = None
        return page("tenants.html", request, session, who, state=state, job=job,
                    confirm_text=f"DELETE-{who.tenant}")

    @router.get("/tenants")
    @guarded
    def tenants(request: Request) -> Response:
        session, who = current(request, allow_deleted=True)
        if not {"admin:export", "admin:delete"} & who.permissions:
            return refused(request, session, who, Forbidden(
                "missing permission 'admin:export'", permission="admin:export"))
        return tenant_page(request, session, who)

    @router.post("/tenants/export")
    @guarded
    def tenant_export(request: Request, confirm: str = _form(), csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        try:
            job = vault.tenants.export(who.tenant, confirm=confirm.strip() or None,
                                       principal=who, request_id=rid(request))
        except MnemoError as exc:
            session.flash.append({"kind": "error", "text": str(exc)})
            return to("/tenants")
        return to(f"/tenants/export/{job['job_id']}")

    @router.get("/tenants/export/{job_id}")
    @guarded
    def tenant_export_status(request: Request, job_id: uuid.UUID,
                             format: Annotated[str | None, Query(max_length=8)] = None
                             ) -> Response:
        session, who = current(request)
        try:
            job = vault.tenants.export_status(who.tenant, job_id, principal=who)
        except MnemoError as exc:
            return refused(request, session, who, exc)
        if format == "json":
            return _headers(JSONResponse(json.loads(json.dumps(job, default=str))))
        return tenant_page(request, session, who, job=job)

    @router.post("/tenants/delete")
    @guarded
    def tenant_delete(request: Request, confirm: str = _form(), csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)
        return act(request, session, who, "/tenants",
                   lambda: vault.tenants.delete(who.tenant, confirm=confirm.strip() or None,
                                                principal=who, request_id=rid(request)),
                   lambda s: {"text": f"tenant {s['tenant']} deleted; purged after "
                              f"{_when(s.get('delete_after'))} unless cancelled"})

    @router.post("/tenants/cancel")
    @guarded
    def tenant_cancel(request: Request, csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True, allow_deleted=True)
        return act(request, session, who, "/tenants",
                   lambda: vault.tenants.cancel_delete(who.tenant, principal=who,
                                                       request_id=rid(request)),
                   lambda s: {"text": "deletion cancelled" if s.get("cancelled")
                              else "the tenant was not deleted"})

    # -- 7. keys --------------------------------------------------------------------------
    @router.get("/keys")
    @guarded
    def keys(request: Request, cursor: uuid.UUID | None = None) -> Response:
        session, who = current(request)
        try:
            got = vault.list_keys(limit=50, cursor=cursor, principal=who)
        except MnemoError as exc:
            return refused(request, session, who, exc)
        return page("keys.html", request, session, who, items=got["items"],
                    next_cursor=got["next_cursor"], first=cursor is None,
                    permissions=ALL_PERMISSIONS, roles=("owner", "admin", "member", "service"))

    @router.post("/keys")
    @guarded
    def key_create(request: Request, role: str = _form(20, "member"),
                   name: str = _form(), scope: str = _form(), subject: str = _form(),
                   permissions: Annotated[list[str] | None, Form()] = None,
                   csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)

        def create() -> dict[str, Any]:
            token, key_id = vault.create_key(
                who.tenant, role, name=name.strip() or None,  # type: ignore[arg-type]
                principal=who, scope=scope.strip() or None, subject=subject.strip() or None,
                permissions=permissions or None)
            return {"token": token, "key_id": str(key_id)}

        return act(request, session, who, "/keys", create,
                   lambda k: {"text": f"created key {k['key_id']}; copy its token now, it "
                              "is not shown again", "token": k["token"]})

    @router.post("/keys/{key_id}/revoke")
    @guarded
    def key_revoke(request: Request, key_id: uuid.UUID, csrf: str = _form()) -> Response:
        session, who = current(request, csrf=csrf, form=True)

        def revoke() -> dict[str, Any]:
            out = vault.revoke_key(key_id, principal=who, request_id=rid(request))
            store.revoke_key(who.tenant, str(key_id))  # its sessions end with it
            return out

        back = "/keys" if str(key_id) != who.key_id else "/signin"
        return act(request, session, who, back, revoke,
                   lambda r: {"text": f"revoked key {r['key_id']}"
                              + (" (already revoked)" if r.get("already_revoked") else "")})

    return router


def remaining(delete_after: datetime | None, now: datetime | None = None) -> timedelta | None:
    """Time left in a grace period (for the countdown); None without one."""
    if delete_after is None:
        return None
    return delete_after - (now or datetime.now(UTC))
