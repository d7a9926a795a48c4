"""The shape of the package: no import circles, arrows pointing down, SQL only in
``store/``, a thin facade, and an explicit public surface (``mnemovault.__all__``).

Imports are read with :mod:`ast` from the source files, every import counted: module level,
inside functions and under ``TYPE_CHECKING`` alike (an import that only a type checker
follows is still an arrow a reader has to follow).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import mnemovault

SRC = Path(mnemovault.__file__).resolve().parent
ROOT = "mnemovault"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to (a module, or the package whose attribute it
    is), or None outside the project."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT or alias.name.startswith(ROOT + "."):
                    target = _resolve(alias.name)
                    if target:
                        yield target
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, node.module] if node.module else base_parts)
            else:
                base = node.module or ""
            if base != ROOT and not base.startswith(ROOT + "."):
                continue
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}")
                if target:
                    yield target


def _graph() -> dict[str, set[str]]:
    return {m: set(_imports(m, p)) - {m} for m, p in MODULES.items()}


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_import_reader_sees_imports() -> None:
    # guards the tests below against passing because the reader found nothing
    assert "mnemovault.store.db" in GRAPH["mnemovault.runtime"]
    assert "mnemovault.chat.service" in GRAPH["mnemovault.vault"]
    assert "mnemovault.pii.detect.base" in GRAPH["mnemovault.pii.detect.email"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    assert _cycles(GRAPH) == []


# ``mnemovault.__main__`` (``python -m mnemovault``) is the CLI's entry point: an interface
INTERFACES = ("mnemovault.api", "mnemovault.cli", "mnemovault.mcp", "mnemovault.integrations",
              "mnemovault.console",
              "mnemovault.__main__")


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_nothing_below_the_interfaces_imports_them() -> None:
    bad = sorted((m, t) for m, ts in GRAPH.items() for t in ts
                 if _under(t, INTERFACES) and not _under(m, INTERFACES))
    assert bad == []


def test_only_interfaces_and_the_package_import_the_facade() -> None:
    # the facade directly, or through the package's lazy names (``from mnemovault import
    # MemoryVault`` resolves to the package itself)
    # (mnemovault.aio, the async facade, wraps the facade: it is the facade, awaited)
    bad = sorted(m for m, ts in GRAPH.items() if ("mnemovault.vault" in ts or ROOT in ts)
                 and not _under(m, INTERFACES) and m not in (ROOT, "mnemovault.aio"))
    assert bad == []


# store/ is the bottom: it may use the settings, the errors, itself, and (in the audit
# backfill migration) the pure Merkle hashing functions.
STORE_MAY_IMPORT = ("mnemovault.store", "mnemovault.config", "mnemovault.errors",
                    "mnemovault.audit.merkle")


def test_store_imports_nothing_above_it() -> None:
    bad = sorted((m, t) for m, ts in GRAPH.items() if _under(m, ("mnemovault.store",))
                 for t in ts if not _under(t, STORE_MAY_IMPORT))
    assert bad == []


def _executes_sql(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr in {"execute", "executemany"} for n in ast.walk(tree))


def test_sql_runs_only_in_store() -> None:
    outside = sorted(m for m, p in MODULES.items()
                     if not _under(m, ("mnemovault.store",)) and _executes_sql(p))
    assert outside == []
    assert _executes_sql(MODULES["mnemovault.store.memories"])  # the check can fire


def test_the_facade_is_thin() -> None:
    # the facade and its sections (mnemovault.facade.*): tables of contents, no SQL
    for name in ["mnemovault.vault", *(m for m in MODULES if _under(m, (FACADE,)))]:
        path = MODULES[name]
        assert len(path.read_text(encoding="utf-8").splitlines()) < 400, name
        assert not _executes_sql(path), name


FACADE = "mnemovault.facade"


def test_only_the_facade_and_interfaces_import_its_sections() -> None:
    bad = sorted(m for m, ts in GRAPH.items() if any(_under(t, (FACADE,)) for t in ts)
                 and not _under(m, (*INTERFACES, FACADE)) and m != "mnemovault.vault")
    assert bad == []


PUBLIC = [
    "AsyncMemoryVault", "ChatEvent", "ChatResult", "ChatStream", "ConfigError", "Conflict",
    "Entity", "Forbidden",
    "ForgetResult", "Hit", "Memory", "MemoryInput", "MemoryVault", "MnemoError", "NotFound",
    "Page", "PinResult", "Principal", "Provenance", "RecallFilters", "Receipt", "Refused",
    "RetentionResult", "Settings", "Unauthenticated", "Unavailable", "ValidationError",
    "__version__",
]


def test_public_surface() -> None:
    assert sorted(mnemovault.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(mnemovault, name) is not None
    assert issubclass(mnemovault.ValidationError, mnemovault.MnemoError)
    with pytest.raises(AttributeError):
        _ = mnemovault.vault_internals  # type: ignore[attr-defined]


def test_import_is_light() -> None:
    code = ("import sys, mnemovault; "
            "print(sorted(m for m in ('psycopg', 'torch', 'fastapi', 'mnemovault.vault') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_error_hierarchy_is_drawn_in_one_docstring() -> None:
    import mnemovault.errors as errors

    doc = errors.__doc__ or ""
    kinds = [n for n, v in vars(errors).items()
             if isinstance(v, type) and issubclass(v, errors.MnemoError)]
    assert len(kinds) >= 9
    for name in kinds:
        assert name in doc, name
