"""The package's shape: no import circles, no private names taken across modules, no oversized module.

Imports are read from the source (module-level and inside functions alike), so a lazy import that closes a
circle fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nbhelpers"
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) for every ``import``/``from ... import`` of an nbhelpers module in a file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("nbhelpers")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("nbhelpers"):
                found.append((target, [a.name for a in node.names]))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the nbhelpers modules it imports (``from pkg import module`` counts as the module)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = set()
        for target, names in imported(path):
            submodules = {f"{target}.{n}" for n in names} & files.keys()
            edges |= submodules or ({target} & files.keys())
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_circle_and_accepts_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle():
    graph = import_graph()
    assert len(graph) > 30 and any(graph.values()), "the import graph was not read"
    assert cycles(graph) == []


def test_no_module_imports_another_modules_private_names():
    offences = []
    for path in PACKAGE.rglob("*.py"):
        for target, names in imported(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and target != module_name(path):
                offences.append(f"{module_name(path)} imports {', '.join(private)} from {target}")
    assert offences == []


def test_no_library_module_is_over_the_size_limit():
    sizes = {module_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


# The package order, bottom up: each package imports only packages of lower layers (and itself); packages of one
# layer do not import each other. The package face (nbhelpers/__init__.py) stands above all of them.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"validation", "formatting", "resources", "plotting", "nbparams", "machine", "notebook_engine"}),
    frozenset({"profiling"}),
    frozenset({"models"}),
    frozenset({"kernels"}),
    frozenset({"data"}),
    frozenset({"measure"}),
    frozenset({"planning"}),
    frozenset({"analysis"}),
    frozenset({"monitor"}),
    frozenset({"tuning", "views"}),
    frozenset({"workbook"}),  # the notebooks' facades
    frozenset({"sweep", "bench"}),  # batch runs of notebooks; benchmark suites through the runner
    frozenset({"warm_cache"}),  # the warm-cache command (its records go through the bench manifest)
    frozenset({"cli"}),
    frozenset({""}),  # the package face
)


def package_of(module: str) -> str:
    """The top-level part of nbhelpers a module belongs to ('' for the package face itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(package: str) -> int:
    for level, members in enumerate(LAYERS):
        if package in members:
            return level
    raise AssertionError(f"nbhelpers.{package} is in no layer of tests/project/test_architecture.py LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a imports b' for every import from a package to one of the same or a higher layer (another package)."""
    offences = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            here, there = package_of(source), package_of(target)
            if here != there and layer_of(there) >= layer_of(here):
                offences.append(f"{source} imports {target} ({there or 'the package face'} is not below {here})")
    return offences


def test_the_order_check_finds_an_upward_import_and_accepts_a_downward_one():
    assert upward_imports({"nbhelpers.models.a": {"nbhelpers.validation"}}) == []
    found = upward_imports({"nbhelpers.models.a": {"nbhelpers.measure.b"}, "nbhelpers.tuning.x": {"nbhelpers.views.y"}})
    assert found == [
        "nbhelpers.models.a imports nbhelpers.measure.b (measure is not below models)",
        "nbhelpers.tuning.x imports nbhelpers.views.y (views is not below tuning)",
    ]


def test_every_package_is_in_a_layer():
    packages = {package_of(name) for name in import_graph()}
    for package in packages:
        layer_of(package)


def test_each_package_imports_only_packages_below_it():
    assert upward_imports(import_graph()) == []
