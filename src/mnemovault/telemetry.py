"""Telemetry, opt-in (SPEC section 12): OpenTelemetry traces and metrics that carry opaque
ids, counts, durations and status only.

Nothing is recorded or sent unless configured with the standard variables:
``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER`` (``console``, or ``otlp`` with the
``opentelemetry-exporter-otlp`` package installed; unset or ``none``: off; unlike the SDK's
own default, unset means off), ``OTEL_SERVICE_NAME`` (default ``mnemovault``),
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_*``, ``OTEL_BSP_*``,
``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SDK_DISABLED``. The SDK is the extra
``mnemovault[otel]``; without it (or unconfigured) every helper here is a no-op of the
OpenTelemetry API, which costs a function call.

What is recorded:

* a span per HTTP request (``mnemovault.request``: method, route *template*, status), by
  :class:`mnemovault.api.edge.Edge`, and the metrics ``mnemovault.http.requests``,
  ``mnemovault.http.duration`` (ms) and ``mnemovault.edge.refusals`` (413, 429, 401);
* a span per governed operation of the facade (:data:`OPERATIONS`: remember, recall,
  forget, delete, erase, rectify, shred, chat, ...) with ``mnemovault.operation``,
  ``mnemovault.outcome`` (``ok`` or the error code), ``mnemovault.count`` (items in and
  out) and the key id, and the metrics ``mnemovault.operations`` and
  ``mnemovault.operation.duration`` (ms);
* child spans for the write path's steps and recall's stages (:data:`STEPS`), and scrub;
* ``mnemovault.guard.refusals`` (captures the guard refused) and
  ``mnemovault.imports.flagged`` (items the injection sanitiser flagged).

Only mnemovault's own spans and metrics are exported: the providers made here are not the
global ones, so FastAPI's native request telemetry and the MCP SDK's spans (raw paths and
query strings, client-chosen JSON-RPC ids, exception messages) stay no-ops; the app
factory also turns FastAPI's off explicitly, for a deployment that sets global providers
itself.

**No user data in any attribute**: :func:`clean` keeps numbers and booleans, and strings
only under the keys of :data:`SAFE_STRINGS` and of an id's or a route template's shape;
exceptions are never recorded on spans (their messages can name a field a caller wrote);
an error span's status carries the error's code only. No text, subject, scope name,
placeholder, tenant name or key secret is ever an attribute.

The step functions are wrapped by name where they live (:func:`instrument`, called by the
app factory and the CLI's serve), so the capability modules carry no telemetry code; a
renamed step fails ``tests/test_edge.py`` rather than losing its span silently.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace

log = logging.getLogger(__name__)

NAME = "mnemovault"

SAFE_STRINGS = frozenset({
    "http.request.method", "http.route", "mnemovault.operation", "mnemovault.outcome",
    "mnemovault.key_id", "mnemovault.step", "mnemovault.budget", "mnemovault.reason",
    "mnemovault.trigger", "error.type"})
"""Attribute keys whose string values are kept (each still of :data:`_SAFE_VALUE`'s shape)."""

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:/{}\-()]{1,128}$")

OPERATIONS: dict[str, tuple[str, ...]] = {
    "mnemovault.vault:MemoryVault": (
        "remember", "remember_many", "recall", "get", "list", "wake", "timeline",
        "forget_preview", "forget", "delete", "pin", "unpin", "run_retention", "chat_stream",
        "redact", "vault_entry", "vault_export", "shred", "create_key", "revoke_key",
        "list_keys", "register_agent"),
    "mnemovault.facade.subjects:SubjectsSection": (
        "erase", "erase_scope", "list", "export", "rectify"),
    "mnemovault.facade.review:ReviewSection": ("approve", "reject"),
}
"""The governed operations that get a span and the operation metrics, by facade class."""

STEPS: dict[str, tuple[str, ...]] = {
    "mnemovault.memories.write": ("guard", "sanitise", "pseudonymise", "embed", "store"),
    "mnemovault.recall.service": ("vector_candidates", "text_candidates", "fuse", "rerank"),
    "mnemovault.governance.scrub": ("scrub",),
}
"""Module-level step functions wrapped in a child span (``mnemovault.<module>.<name>``)."""


class _Instruments:
    def __init__(self, meter: metrics.Meter) -> None:
        self.requests = meter.create_counter("mnemovault.http.requests", unit="1",
                                             description="HTTP requests answered")
        self.request_ms = meter.create_histogram("mnemovault.http.duration", unit="ms",
                                                 description="HTTP request duration")
        self.refusals = meter.create_counter(
            "mnemovault.edge.refusals", unit="1",
            description="requests the edge refused (too large, rate limited, no key)")
        self.operations = meter.create_counter("mnemovault.operations", unit="1",
                                               description="governed operations")
        self.operation_ms = meter.create_histogram("mnemovault.operation.duration",
                                                   unit="ms",
                                                   description="governed operation duration")
        self.guard_refusals = meter.create_counter(
            "mnemovault.guard.refusals", unit="1",
            description="captures the capture guard refused")
        self.flagged = meter.create_counter(
            "mnemovault.imports.flagged", unit="1",
            description="items the injection sanitiser flagged")


_tracer: trace.Tracer = trace.get_tracer(NAME)
_meter: metrics.Meter = metrics.get_meter(NAME)
_instruments = _Instruments(_meter)
_configured = False
_instrumented = False


def use(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Record into these providers (tests: in-memory ones) instead of the global ones;
    ``None``: the global providers again."""
    global _tracer, _meter, _instruments
    _tracer = (tracer_provider.get_tracer(NAME) if tracer_provider is not None
               else trace.get_tracer(NAME))
    _meter = (meter_provider.get_meter(NAME) if meter_provider is not None
              else metrics.get_meter(NAME))
    _instruments = _Instruments(_meter)


def clean(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes that may be recorded (module docstring): numbers, booleans, and the
    strings of :data:`SAFE_STRINGS` that look like an id, a word or a route template."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        kept = isinstance(value, bool | int | float) or (
            isinstance(value, str) and key in SAFE_STRINGS and bool(_SAFE_VALUE.match(value)))
        if kept:
            out[key] = value
    return out


@contextmanager
def span(name: str, **attrs: Any) -> Iterator[trace.Span]:
    """A span named ``name`` with :func:`clean` attributes; an exception sets its status to
    error with the exception's code (never its message) and propagates."""
    with _tracer.start_as_current_span(name, attributes=clean(attrs), record_exception=False,
                                       set_status_on_exception=False) as s:
        try:
            yield s
        except BaseException as exc:
            s.set_status(trace.Status(trace.StatusCode.ERROR, _code(exc)))
            s.set_attribute("error.type", _code(exc))
            raise


def request_done(method: str, route: str, status: int, ms: float) -> None:
    """The HTTP metrics of one answered request."""
    attrs = clean({"http.request.method": method, "http.route": route,
                   "http.response.status_code": status})
    _instruments.requests.add(1, attrs)
    _instruments.request_ms.record(ms, attrs)


def refused(reason: str, route: str, budget: str | None = None) -> None:
    """One request the edge refused (``too_large``, ``rate_limited``, ``unauthenticated``)."""
    _instruments.refusals.add(1, clean({"mnemovault.reason": reason, "http.route": route,
                                        "mnemovault.budget": budget}))


def _code(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and _SAFE_VALUE.match(code) else type(exc).__name__


def _count(value: Any) -> int | None:
    if isinstance(value, list | tuple | set | frozenset):
        return len(value)
    for attr in ("items", "hits", "records", "deleted"):
        inner = getattr(value, attr, None)
        if isinstance(inner, list):
            return len(inner)
    return None


def _operation(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        who = kwargs.get("principal")
        attrs = {"mnemovault.operation": name,
                 "mnemovault.key_id": getattr(who, "key_id", None)}
        started = time.perf_counter()
        outcome = "ok"
        with span(f"mnemovault.{name}", **attrs) as s:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                outcome = _code(exc)
                raise
            finally:
                ms = (time.perf_counter() - started) * 1000
                tags = clean({"mnemovault.operation": name, "mnemovault.outcome": outcome})
                _instruments.operations.add(1, tags)
                _instruments.operation_ms.record(ms, tags)
                s.set_attribute("mnemovault.outcome", outcome)
            n = _count(result)
            if n is not None:
                s.set_attribute("mnemovault.count", n)
            return result
    call.__mnemovault_telemetry__ = True  # type: ignore[attr-defined]
    return call


def _step(module: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    span_name = f"{module}.{name}"

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with span(span_name, **{"mnemovault.step": name}) as s:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                if name == "guard" and _code(exc) == "refused":
                    _instruments.guard_refusals.add(1)
                raise
            n = _count(result)
            if n is not None:
                s.set_attribute("mnemovault.count", n)
            if name == "sanitise" and isinstance(result, list):
                flagged = sum(1 for item in result if _flags(item))
                if flagged:
                    _instruments.flagged.add(flagged)
                    s.set_attribute("mnemovault.flagged", flagged)
            return result
    call.__mnemovault_telemetry__ = True  # type: ignore[attr-defined]
    return call


def _flags(item: Any) -> bool:
    prov = getattr(item, "provenance", None)
    extra = getattr(prov, "model_extra", None) or {}
    return bool(getattr(prov, "injection_flags", None) or extra.get("injection_flags"))


def instrument() -> list[str]:
    """Wrap the facade's operations and the step functions (:data:`OPERATIONS`,
    :data:`STEPS`) once per process (idempotent); returns the names wrapped. Each wrapper
    is a no-op span until a provider is configured (:func:`configure`)."""
    global _instrumented
    import importlib

    done: list[str] = []
    for target, names in OPERATIONS.items():
        module, cls_name = target.split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        for name in names:
            fn = cls.__dict__.get(name)
            if fn is None or not callable(fn):
                continue
            if not getattr(fn, "__mnemovault_telemetry__", False):
                setattr(cls, name, _operation(name, fn))
            done.append(f"{cls_name}.{name}")
    for module_name, names in STEPS.items():
        mod = importlib.import_module(module_name)
        short = module_name.removeprefix("mnemovault.")
        for name in names:
            fn = getattr(mod, name, None)
            if fn is None:
                continue
            if not getattr(fn, "__mnemovault_telemetry__", False):
                setattr(mod, name, _step(f"mnemovault.{short}", name, fn))
            done.append(f"{short}.{name}")
    _instrumented = True
    return done


def configure(env: Mapping[str, str] | None = None) -> bool:
    """Make mnemovault's tracer and meter providers from the ``OTEL_*`` variables (module
    docstring), once per process; whether anything is exported. They are not made the
    global providers, so other libraries' instrumentation (FastAPI's, the MCP SDK's, which
    record raw URLs and client-chosen ids) stays a no-op. Without the SDK installed a
    configured exporter is reported in a warning and nothing is recorded."""
    global _configured
    env = os.environ if env is None else env
    if _configured:
        return True
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    traces = _exporters(env.get("OTEL_TRACES_EXPORTER"))
    metric_exporters = _exporters(env.get("OTEL_METRICS_EXPORTER"))
    if not traces and not metric_exporters:
        return False
    try:
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        log.warning("OTEL_*_EXPORTER is set but the OpenTelemetry SDK is not installed "
                    "(pip install 'mnemovault[otel]'): no telemetry")
        return False
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or NAME})
    provider: Any = None
    meter_provider: Any = None
    if traces:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        provider = TracerProvider(resource=resource)
        for kind in traces:
            exporter = _span_exporter(kind, env)
            if exporter is not None:
                # console is for looking: each span printed when it ends
                provider.add_span_processor(SimpleSpanProcessor(exporter) if kind == "console"
                                            else BatchSpanProcessor(exporter))
    if metric_exporters:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers = [PeriodicExportingMetricReader(e) for e in
                   (_metric_exporter(kind, env) for kind in metric_exporters) if e is not None]
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    # ours alone, never the global providers: FastAPI's own request spans and the MCP SDK's
    # record raw paths, query strings, JSON-RPC ids and exception messages, and they only
    # record when a global provider is set
    use(provider if traces else None, meter_provider if metric_exporters else None)
    _configured = True
    return True


def _exporters(value: str | None) -> list[str]:
    return [v.strip().lower() for v in (value or "").split(",")
            if v.strip() and v.strip().lower() != "none"]


def _span_exporter(kind: str, env: Mapping[str, str]) -> Any:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout)  # the stdout of now, not of import
    if kind == "otlp":
        try:
            if env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").startswith("grpc"):
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter,
                )
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
        except ImportError:
            log.warning("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp: no "
                        "traces exported")
            return None
        return OTLPSpanExporter()
    log.warning("OTEL_TRACES_EXPORTER: unknown exporter %r (console, otlp, none)",
                kind if _SAFE_VALUE.match(kind) else "?")
    return None


def _metric_exporter(kind: str, env: Mapping[str, str]) -> Any:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stdout)
    if kind == "otlp":
        try:
            if env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").startswith("grpc"):
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                    OTLPMetricExporter,
                )
            else:
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                    OTLPMetricExporter,
                )
        except ImportError:
            log.warning("OTEL_METRICS_EXPORTER=otlp needs opentelemetry-exporter-otlp: no "
                        "metrics exported")
            return None
        return OTLPMetricExporter()
    log.warning("OTEL_METRICS_EXPORTER: unknown exporter %r (console, otlp, none)",
                kind if _SAFE_VALUE.match(kind) else "?")
    return None
