"""The layout of docs/architecture.md holds in the code: no import circle, arrows one way.

Every module of ``dprivacy/`` and ``solvers/`` is parsed (never imported) and every import it
contains is an arrow: at module level, inside functions and under ``TYPE_CHECKING`` alike (a
function-level import that closes a circle is still a circle).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dprivacy", "solvers")

#: The layers of docs/architecture.md, top (imports the most) to bottom; longest prefix wins.
LAYERS = {
    "dprivacy.cli": 6, "dprivacy.__main__": 6, "dprivacy.local.__main__": 6,
    "dprivacy": 5, "dprivacy.config": 5, "dprivacy.audit": 5,
    "dprivacy.service": 5, "dprivacy.remote": 5,
    "dprivacy.mechanisms": 4, "dprivacy.accounting": 4, "dprivacy.tables": 4, "dprivacy.local": 4,
    "dprivacy.design": 3, "dprivacy.workload": 3, "dprivacy.implicit_workload": 3,
    "dprivacy.metrics": 3, "dprivacy.group": 3, "dprivacy.gaussian_design": 3,
    "dprivacy.data": 3, "dprivacy.plotting": 3, "dprivacy.local.cost": 3,
    "dprivacy.universe": 2, "dprivacy.noise": 2, "dprivacy.discrete_noise": 2,
    "dprivacy.gaussian_noise": 2, "dprivacy.solver_calls": 2, "dprivacy.zcdp": 2,
    "dprivacy.fingerprints": 2, "dprivacy._atomic": 2,
    "dprivacy.config_json": 2, "dprivacy._serving": 2,
    "dprivacy.errors": 1, "dprivacy._version": 1,
    "solvers": 0,
}


def _modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _target(name: str, modules: dict[str, tuple[Path, bool]] = MODULES) -> str | None:
    """The project module an imported name lives in (its longest known prefix), or None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, modules: dict[str, tuple[Path, bool]] = MODULES) -> Iterator[tuple[str, int]]:
    """(imported project module, line) for every import statement anywhere in ``module``."""
    path, is_pkg = modules[module]
    here = module if is_pkg else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (t := _target(alias.name, modules)) is not None:
                    yield t, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # `from pkg import mod` imports the module pkg.mod
                full = f"{base}.{alias.name}"
                if (t := _target(full if full in modules else base, modules)) is not None:
                    yield t, node.lineno


GRAPH = {m: {t: line for t, line in _imports(m) if t != m} for m in MODULES}


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
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


def _arrows(src: str, dst: str) -> Iterator[tuple[str, str, int]]:
    """Imports from modules under ``src`` into modules under ``dst`` (prefixes)."""
    for a, targets in sorted(GRAPH.items()):
        if a == src or a.startswith(src + "."):
            for b, line in sorted(targets.items()):
                if b == dst or b.startswith(dst + "."):
                    yield a, b, line


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_walker_sees_every_kind_of_import() -> None:
    # a function-level import (cmd_local loads the local model only when a command runs) and
    # a package re-export are arrows too
    assert "dprivacy.local.aggregator.server" in GRAPH["dprivacy.cli.cmd_local"]
    assert "dprivacy.local.device.agent" in GRAPH["dprivacy.local"]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert len(MODULES) > 100


def test_no_import_circle() -> None:
    cycles = _cycles(GRAPH)
    detail = [" <-> ".join(c) + ": " + "; ".join(
        f"{a} -> {b} (line {GRAPH[a][b]})" for a in c for b in c if b in GRAPH[a]) for c in cycles]
    assert not cycles, "import circles (move the shared piece into a module of its own):\n" + \
        "\n".join(detail)


def test_no_import_circle_anywhere_in_the_repository() -> None:
    """The experiments, the examples and the tests import each other without circles too."""
    everything = _modules(PACKAGES + tuple(
        d for d in ("experiments", "tests", "examples") if (ROOT / d / "__init__.py").is_file()))
    graph = {m: {t: line for t, line in _imports(m, everything) if t != m} for m in everything}
    assert any(m.startswith("experiments.") for m in graph) and any(m.startswith("tests.") for m in graph)
    cycles = _cycles(graph)
    assert not cycles, "import circles (move the shared piece into a module of its own):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)


def test_solvers_never_import_dprivacy() -> None:
    bad = list(_arrows("solvers", "dprivacy"))
    assert not bad, f"solvers is numerical only; these import dprivacy: {bad}"


def test_arrows_point_down_the_layers() -> None:
    def layer(m: str) -> int:
        key = max((p for p in LAYERS if _under(m, p)), key=len, default=None)
        assert key is not None, f"{m} is in no layer: add it to LAYERS and docs/architecture.md"
        return LAYERS[key]

    bad = [f"{a} (layer {layer(a)}) -> {b} (layer {layer(b)}), line {line}"
           for a, targets in sorted(GRAPH.items()) for b, line in sorted(targets.items())
           if layer(b) > layer(a)]
    assert not bad, "imports that point up a layer:\n" + "\n".join(bad)


def test_only_the_cli_and_entry_points_import_the_cli() -> None:
    bad = [(a, b, line) for a, b, line in _arrows("dprivacy", "dprivacy.cli")
           if not _under(a, "dprivacy.cli") and not a.endswith("__main__")]
    assert not bad, f"the command line is the top layer: {bad}"


@pytest.mark.parametrize("place, allowed", [
    ("dprivacy.tables.relations", ("dprivacy.tables.relations",)),
    ("dprivacy.tables.budgets", ("dprivacy.tables.budgets", "dprivacy.tables.relations",
                                 "dprivacy.tables.params")),
])
def test_tables_places_do_not_import_the_front_ends(place: str, allowed: tuple[str, ...]) -> None:
    bad = [(a, b, line) for a, b, line in _arrows(place, "dprivacy.tables")
           if not any(_under(b, p) for p in allowed)]
    assert not bad, f"{place} may import only {allowed} of the tables: {bad}"


def test_local_device_and_randomisers_do_not_import_the_aggregator() -> None:
    bad = list(_arrows("dprivacy.local.device", "dprivacy.local.aggregator"))
    top = [m for m in MODULES if m.startswith("dprivacy.local.") and m.count(".") == 2
           and not m.endswith("__main__") and m not in ("dprivacy.local.device", "dprivacy.local.aggregator")]
    for m in top:
        bad += [(m, b, line) for b, line in GRAPH[m].items()
                if _under(b, "dprivacy.local.device") or _under(b, "dprivacy.local.aggregator")]
    assert not bad, f"arrows must go aggregator -> device -> randomisers: {bad}"


def test_docs_architecture_lists_the_folders() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`((?:dprivacy|solvers)/(?:[\w]+/)*)`", text))
    packages = {p.parent.relative_to(ROOT).as_posix() + "/" for pkg in PACKAGES
                for p in (ROOT / pkg).rglob("__init__.py")}
    assert {"dprivacy/", "solvers/", "dprivacy/tables/budgets/", "solvers/channels/"} <= listed
    missing = sorted(f for f in listed if not (ROOT / f / "__init__.py").is_file())
    assert not missing, f"docs/architecture.md lists folders that are not packages: {missing}"
    unlisted = sorted(packages - listed)
    assert not unlisted, f"package folders missing from docs/architecture.md: {unlisted}"
