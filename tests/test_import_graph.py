"""The package's imports point one way: no circles, and nothing imports up the layers.

The graph is read from the source (every ``import`` statement, those inside functions too),
not from what happens to be loaded, so a circle hidden behind a function-level import counts.
``from package import name`` is an import of the submodule when ``name`` is one, else of the
package's ``__init__``. docs/architecture.md describes the layers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "agenttrace"

#: Top to bottom; a module may import its own layer (without a circle) and any layer below.
LAYERS: list[tuple[str, ...]] = [
    ("agenttrace.__main__", "agenttrace.cli"),
    ("agenttrace.view",),  # the viewer: reads through agenttrace.reading, serves on collect's stack
    ("agenttrace.gateway",),  # the capture gateway: records through the public API
    ("agenttrace",),  # the public API (agenttrace/__init__.py)
    ("agenttrace.instrument",),
    ("agenttrace.pipeline", "agenttrace.process_end", "agenttrace.exit_line"),
    ("agenttrace.collect",),  # the service: receivers, span log, the assembler and sinks
    ("agenttrace.config", "agenttrace.config_values"),
    ("agenttrace.processing",),
    ("agenttrace.reading",),
    ("agenttrace.sinks", "agenttrace.storage"),
    ("agenttrace.export_queue",),  # sending batches over OTLP: span export and the log sink
    ("agenttrace.trajectory",),
    (
        "agenttrace.semconv",
        "agenttrace._secrets",
        "agenttrace._logging",
        "agenttrace._threads",
        "agenttrace._version",
    ),
]

#: Packages of one layer that must not import each other (writers and span readers apart).
SIBLINGS = {("agenttrace.sinks", "agenttrace.storage"), ("agenttrace.storage", "agenttrace.sinks")}


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path, modules: Iterable[str]) -> Iterable[str]:
    """Dotted names of the modules imported by the file (relative imports resolved)."""
    known = set(modules)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:  # a submodule, else a name from the module itself
                name = f"{base}.{alias.name}"
                yield name if name in known else base


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in imported_names(name, path, modules):
            while target and target not in modules:  # `import a.b.c` of a name: its module
                target = target.rpartition(".")[0]
            if target.startswith("agenttrace") and target != name:
                graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def layer_of(module: str) -> tuple[int, str]:
    """(rank, top package) of the module: rank 0 is the top layer."""
    best: tuple[int, str] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            nested = prefix != "agenttrace" and module.startswith(prefix + ".")
            inside = module == prefix or nested
            if inside and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and the architecture)")
    return best


def test_the_checker_finds_a_circle_and_an_upward_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert layer_of("agenttrace.trajectory.assembler") > layer_of("agenttrace.processing.writer")
    assert layer_of("agenttrace")[0] == 3 and layer_of("agenttrace.semconv")[0] == len(LAYERS) - 1


def test_the_checker_reads_relative_and_function_level_imports(tmp_path):
    folder = tmp_path / "agenttrace" / "pkg"
    folder.mkdir(parents=True)
    source = "def late():\n    from ..semconv import EPISODE\n    from . import other\n"
    (folder / "mod.py").write_text(source)
    modules = ["agenttrace.semconv", "agenttrace.pkg.mod", "agenttrace.pkg.other"]
    names = set(imported_names("agenttrace.pkg.mod", folder / "mod.py", modules))
    assert names == {"agenttrace.semconv", "agenttrace.pkg.other"}


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("module", sorted(module_files()))
def test_imports_run_down_the_layers(module):
    rank, package = layer_of(module)
    upward = []
    for target in sorted(import_graph_cached()[module]):
        target_rank, target_package = layer_of(target)
        if target_rank < rank or (package, target_package) in SIBLINGS:
            upward.append(f"{target} ({LAYERS[target_rank][0]} layer)")
    assert not upward, f"{module} imports up the layers: {', '.join(upward)}"


_GRAPH: dict[str, set[str]] = {}


def import_graph_cached() -> dict[str, set[str]]:
    if not _GRAPH:
        _GRAPH.update(import_graph())
    return _GRAPH


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_no_module_passes_800_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= 800, f"{path.relative_to(PACKAGE.parent)} has {lines} lines: split it"
