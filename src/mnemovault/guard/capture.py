"""The capture guard (SPEC section 8, step 2 of the write path): pluggable detectors scan
every capture before the injection sanitiser and the pseudonymiser see it, on the original
text (the guard must see the secrets the vault would otherwise hide).

Every capture path calls it: remember, remember_many (batch, HTTP, MCP, import) through
:func:`mnemovault.memories.write.guard`; chat once more on the message before it answers
(:mod:`mnemovault.chat.service`); procedures and runs through :func:`check_capture`::

    check_capture(rt, path="procedure", fields={"name": name, "intent": intent})

The rules:

* Each detector (:class:`~mnemovault.guard.detectors.CaptureDetector`; the built-ins and
  their severities are in :mod:`mnemovault.guard.detectors`) returns findings with a
  severity. One at or above ``BLOCK_AT_SEVERITY`` (default High) refuses the capture with
  :class:`~mnemovault.errors.Refused`, whose message and ``details`` name the detector,
  the kind, the severity and the field, never the matched text. Below it, the capture
  passes.
* Every detector reads the shared normalised views of each field
  (:func:`mnemovault.guard.normalise.views`: width, zero-width and soft hyphens, control
  characters, homoglyphs, line breaks inside a token), the same normalisation the injection
  sanitiser matches through; a field whose views differ is scanned in each, and a finding
  in any counts. Offsets a finding gives are mapped back to the original text.
* A detector that raises, that does not answer within ``capture_detector_timeout_ms``
  per item scanned, or whose answer is not a list of well-formed findings (each a
  :class:`~mnemovault.guard.detectors.Finding` with string ``detector`` and ``kind``, a
  :class:`~mnemovault.guard.detectors.Severity`, a ``field`` it was given, and either no
  offsets or ``0 <= start <= end <= len(text)``) refuses the capture with
  :class:`~mnemovault.errors.Unavailable` naming the detector (fail closed): nothing is
  stored. Nothing a detector returns is ever dropped silently. Detectors run on a small
  thread pool so a hung one cannot hang the capture; its thread is abandoned (a pool
  filled with hung detectors makes every capture fail closed until they return, which the
  hook reports).
* The operator hook (``MNEMOVAULT_CAPTURE_HOOK="pkg.module:fn"``, or :func:`set_hook`)
  gets a :class:`GuardEvent` for every refusal and every detector failure: ids, names and
  counts only. The default logs one warning line. A hook that raises is logged and
  ignored (it never changes the outcome).
* Detectors are named in ``MNEMOVAULT_CAPTURE_DETECTORS`` (a JSON list; default
  ``["secrets", "government_ids"]``): a built-in name, a name given to
  :func:`register_detector`, or a dotted path ``pkg.module:attr`` to a detector instance,
  class or factory. ``[]`` turns the guard off.

The review gate's default status for new memories, procedures and versions is
:func:`initial_status` (``REQUIRE_REVIEW``; the queue is :mod:`mnemovault.governance.review`).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from mnemovault.errors import ConfigError, Refused, Unavailable
from mnemovault.guard.detectors import BUILTIN, CaptureDetector, Finding, Severity
from mnemovault.guard.normalise import View, views
from mnemovault.runtime import Runtime

log = logging.getLogger(__name__)

PATHS = ("remember", "batch", "import", "chat", "procedure", "run", "mcp", "tool")
"""The capture paths callers name (any other name is accepted too; it only labels events)."""

MAX_LISTED = 10
"""At most this many findings are listed in a refusal's ``details``."""


@dataclass(frozen=True)
class GuardEvent:
    """What the operator hook gets: ``outcome`` is ``refused`` (a finding at or above the
    threshold), ``error`` (a detector raised: ``error`` is the exception's type name, never
    its message), ``malformed`` (its answer was not a list of well-formed findings:
    ``error`` says what was wrong, in words that never quote it) or ``timeout``.
    ``findings`` (refusals) carries kinds, fields and offsets only."""

    outcome: str
    path: str
    tenant: str | None
    detector: str
    severity: str | None = None
    error: str | None = None
    findings: tuple[Finding, ...] = ()
    request_id: str | None = None


Hook = Callable[[GuardEvent], None]


def log_hook(event: GuardEvent) -> None:
    """The default hook: one warning line with ids and names only."""
    log.warning("capture guard: %s on path %s (tenant %s, detector %s, severity %s, "
                "error %s, request %s)", event.outcome, event.path, event.tenant,
                event.detector, event.severity, event.error, event.request_id)


# -- registry ------------------------------------------------------------------------------
_registry: dict[str, Callable[[], CaptureDetector]] = dict(BUILTIN)
_hook: Hook | None = None
_lock = threading.Lock()
_cache: dict[tuple[str, ...], tuple[CaptureDetector, ...]] = {}
_hook_cache: dict[str, Hook] = {}


def register_detector(name: str, factory: Callable[[], CaptureDetector]) -> None:
    """Make ``name`` usable in ``MNEMOVAULT_CAPTURE_DETECTORS`` (replacing an earlier
    registration of that name): ``factory()`` makes the detector (once per list of
    names)."""
    with _lock:
        _registry[name] = factory
        _cache.clear()


def unregister_detector(name: str) -> None:
    """Undo :func:`register_detector` (a built-in name goes back to the built-in)."""
    with _lock:
        _registry.pop(name, None)
        if name in BUILTIN:
            _registry[name] = BUILTIN[name]
        _cache.clear()


def set_hook(hook: Hook | None) -> None:
    """Use ``hook`` instead of ``MNEMOVAULT_CAPTURE_HOOK`` (None: back to the setting)."""
    global _hook
    _hook = hook


def _load(path: str) -> object:
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"capture_detectors: cannot load {path!r} "
                          f"({type(exc).__name__})", field="capture_detectors") from None


def _make(name: str) -> CaptureDetector:
    factory = _registry.get(name)
    obj: object = factory() if factory is not None else _load(name)
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, CaptureDetector)):
        obj = obj()
    if not isinstance(obj, CaptureDetector):
        raise ConfigError(f"capture_detectors: {name!r} is not a detector (it needs a name "
                          "and scan(fields))", field="capture_detectors")
    return obj


def detectors(rt: Runtime) -> tuple[CaptureDetector, ...]:
    """The detectors ``rt.settings.capture_detectors`` names, made once per list.

    Raises:
        ConfigError: a name is neither registered nor a loadable dotted path.
    """
    names = tuple(rt.settings.capture_detectors)
    with _lock:
        found = _cache.get(names)
        if found is None:
            found = _cache[names] = tuple(_make(n) for n in names)
    return found


def _current_hook(rt: Runtime) -> Hook:
    if _hook is not None:
        return _hook
    path = rt.settings.capture_hook
    if not path:
        return log_hook
    hook = _hook_cache.get(path)
    if hook is None:
        loaded = _load(path)
        if not callable(loaded):
            raise ConfigError(f"capture_hook: {path!r} is not callable", field="capture_hook")
        hook = _hook_cache[path] = loaded
    return hook


def _notify(hook: Hook, event: GuardEvent) -> None:
    try:
        hook(event)
    except Exception as exc:  # the hook must never change the outcome
        log.error("capture guard: the hook failed (%s)", type(exc).__name__)


# -- the check -----------------------------------------------------------------------------
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mv-capture-guard")
        return _pool


Scan = tuple[dict[str, str], dict[str, View]]
"""One call of a detector: the texts it is given by field name, and the view each came
from (to check and map back the offsets of its findings)."""


def _scans(texts: Sequence[Mapping[str, str]]) -> list[Scan]:
    """The calls each detector gets: per item, its fields' first views; then, for an item
    with fields that have more views (line breaks inside a token joined, a space-split key
    unsplit), each of those fields' further views, one call per view."""
    out: list[Scan] = []
    for fields in texts:
        by_field = {k: views(v) for k, v in fields.items()}
        out.append(({k: vs[0].text for k, vs in by_field.items()},
                    {k: vs[0] for k, vs in by_field.items()}))
        for n in range(1, max((len(vs) for vs in by_field.values()), default=1)):
            more = {k: vs[n] for k, vs in by_field.items() if len(vs) > n}
            if more:
                out.append(({k: v.text for k, v in more.items()}, more))
    return out


def _scan_all(detector: CaptureDetector, scans: Sequence[Scan]) -> list[object]:
    """Each scan's raw answer (checked by :func:`_checked` in the caller)."""
    return [detector.scan(fields) for fields, _ in scans]


class Malformed(Exception):
    """A detector's answer is not a list of well-formed findings (the message says what is
    wrong without quoting any of it)."""


def _is_offset(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _checked(answers: Sequence[object], scans: Sequence[Scan]) -> list[Finding]:
    """The findings of one detector's answers, checked (module docstring) and with their
    offsets mapped back to the original text; one per (detector, kind, field).

    Raises:
        Malformed: an answer is not a list, or holds something that is not a well-formed
            finding for the fields it was given.
    """
    out: dict[tuple[str, str, str], Finding] = {}
    for answer, (fields, view_of) in zip(answers, scans, strict=True):
        if not isinstance(answer, list):
            raise Malformed(f"scan returned {type(answer).__name__}, not a list of findings")
        for n, f in enumerate(answer):
            if not isinstance(f, Finding):
                raise Malformed(f"finding {n} is a {type(f).__name__}, not a Finding")
            if not (isinstance(f.detector, str) and f.detector and isinstance(f.kind, str)
                    and f.kind):
                raise Malformed(f"finding {n} has no detector or kind name")
            if not isinstance(f.severity, Severity):
                raise Malformed(f"finding {n} has a severity that is not a Severity")
            if not isinstance(f.field, str) or f.field not in fields:
                raise Malformed(f"finding {n} names a field it was not given")
            start, end = f.start, f.end
            if start is None and end is None:
                mapped = f
            elif not (_is_offset(start) and _is_offset(end)
                      and 0 <= start <= end <= len(fields[f.field])):  # type: ignore[operator]
                raise Malformed(f"finding {n} has offsets outside its field's text")
            else:
                s, e = view_of[f.field].origin(start, end)  # type: ignore[arg-type]
                mapped = dataclasses.replace(f, start=s, end=e)
            out.setdefault((f.detector, f.kind, f.field), mapped)
    return list(out.values())


def _clean(items: Sequence[Mapping[str, str | None]]) -> list[dict[str, str]]:
    """The named texts, None and empty ones dropped, field names prefixed
    ``items.<i>.`` in a batch of more than one."""
    many = len(items) > 1
    return [{(f"items.{i}.{k}" if many else k): v for k, v in fields.items()
             if isinstance(v, str) and v}
            for i, fields in enumerate(items)]


def check_capture(rt: Runtime, *, path: str, fields: Mapping[str, str | None],
                  tenant: str | None = None, request_id: str | None = None) -> None:
    """Scan one capture: ``fields`` are its named texts (``{"content": …, "intent": …,
    "name": …}``; None values are skipped). ``path`` names the capture path
    (:data:`PATHS`) for the hook. ``tenant`` and ``request_id`` only label events.

    Raises:
        Refused: a finding at or above ``BLOCK_AT_SEVERITY`` (``details``: ``detector``,
            ``kind``, ``severity``, ``field``, ``findings``; never the matched text).
        Unavailable: a detector raised, timed out or answered with something other than a
            list of well-formed findings (fail closed; nothing may be stored;
            ``details``: ``detector``, ``reason`` ``error``, ``timeout`` or ``malformed``).
        ConfigError: a configured detector or the hook cannot be loaded.
    """
    check_items(rt, path=path, items=[fields], tenant=tenant, request_id=request_id)


def check_items(rt: Runtime, *, path: str, items: Sequence[Mapping[str, str | None]],
                tenant: str | None = None, request_id: str | None = None) -> None:
    """:func:`check_capture` for a batch (one capture per item; fields named
    ``items.<i>.<field>`` when there is more than one). Each detector scans the whole batch
    in one task, within ``capture_detector_timeout_ms`` times the number of items."""
    found = detectors(rt)
    hook = _current_hook(rt)  # a misconfigured hook fails every capture, not only refusals
    texts = _clean(items)
    if not found or not any(texts):
        return
    threshold = Severity.parse(rt.settings.block_at_severity)
    budget = rt.settings.capture_detector_timeout_ms / 1000.0 * max(len(texts), 1)
    scans = _scans(texts)
    pool = _executor()
    futures: list[tuple[CaptureDetector, Future[list[object]]]] = [
        (d, pool.submit(_scan_all, d, scans)) for d in found]
    deadline = time.monotonic() + budget
    findings: list[Finding] = []
    for detector, future in futures:
        name = str(getattr(detector, "name", type(detector).__name__))
        try:
            answers = future.result(timeout=max(deadline - time.monotonic(), 0.0))
            findings.extend(_checked(answers, scans))
        except FutureTimeout:
            future.cancel()
            _notify(hook, GuardEvent("timeout", path, tenant, name, request_id=request_id))
            raise Unavailable(
                f"capture guard: detector {name!r} did not answer within "
                f"{rt.settings.capture_detector_timeout_ms:g} ms; nothing was stored "
                "(fail closed)", detector=name, reason="timeout") from None
        except Malformed as exc:
            _notify(hook, GuardEvent("malformed", path, tenant, name, error=str(exc),
                                   request_id=request_id))
            raise Unavailable(
                f"capture guard: detector {name!r} answered with something other than a "
                f"list of findings ({exc}); nothing was stored (fail closed)",
                detector=name, reason="malformed") from None
        except Exception as exc:
            _notify(hook, GuardEvent("error", path, tenant, name, error=type(exc).__name__,
                                   request_id=request_id))
            raise Unavailable(
                f"capture guard: detector {name!r} failed ({type(exc).__name__}); nothing "
                "was stored (fail closed)", detector=name, reason="error") from None
    blocking = sorted((f for f in findings if f.severity >= threshold),
                      key=lambda f: -f.severity)
    if not blocking:
        return
    top = blocking[0]
    _notify(hook, GuardEvent("refused", path, tenant, top.detector, severity=top.severity.label,
                           findings=tuple(blocking), request_id=request_id))
    raise Refused(
        f"{top.field}: refused by the capture guard: detector {top.detector!r} found "
        f"{top.kind} (severity {top.severity.label}, BLOCK_AT_SEVERITY="
        f"{threshold.label}); nothing was stored", field=top.field,
        detector=top.detector, kind=top.kind, severity=top.severity.label,
        findings=[f.to_dict() for f in blocking[:MAX_LISTED]])


def initial_status(rt: Runtime) -> str:
    """The status of a new memory, procedure or version: ``pending_review`` while the
    review gate is on (``REQUIRE_REVIEW=true``), else ``active``."""
    return "pending_review" if rt.settings.require_review else "active"
