"""The kernel-backend and attention tables are the single source of their names.

Every backend or attention name that notebooks, recommend, widgets and the benchmark scripts spell out is
a table entry, and no library module outside the tables tests a name by equality or substring (an AST
scan), so adding a backend is one table entry plus its own function.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS, ATTENTION_TABLE, attention_status
from nbhelpers.kernels.liger import DEFAULT_LIGER_KERNELS, LIGER_KERNELS
from nbhelpers.kernels.registry import (
    BASELINE_BACKEND,
    COMPILED_CACHES,
    ELEMENTARY_BACKENDS,
    KERNEL_BACKEND_TABLE,
    KERNEL_BACKENDS,
    REPORT_KEYS,
    compose,
    kernel_backend,
    liger_switches_for,
    requested_kernels,
    training_kwargs,
)
from nbhelpers.kernels.spec import BackendUnavailable
from nbhelpers.measure.config import RunConfig
from nbhelpers.planning.device import AUTO_KERNELS  # "auto": a per-device list of table entries, not an entry
from nbhelpers.validation import ConfigError

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "nbhelpers"
TABLES = {LIBRARY / "kernels" / "registry.py", LIBRARY / "kernels" / "attention.py"}
SCANNED_SOURCES = [
    LIBRARY / "analysis" / "recommend.py",
    LIBRARY / "views" / "widgets.py",
    *sorted((LIBRARY / "bench").glob("*.py")),  # the benchmark suites' table
    *sorted((ROOT / "benchmarks").glob("*.py")),
]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAGIC = re.compile(r"^\s*[%!]")
COMPOSITE = re.compile(r"\b[a-z][a-z0-9_]*(?:\+[a-z][a-z0-9_]*)+\b")  # "liger+compile"-shaped words
BACKEND_FIELDS = ("kernels",)
ATTENTION_FIELDS = ("attn_implementation", "attention")
NAME_PARAMETERS = {"KERNELS": "backend", "ATTENTION": "attention"}  # notebook parameters that list names
ALL_NAMES = set(KERNEL_BACKENDS) | set(ATTENTION_IMPLEMENTATIONS)


# -- finding the names a source spells out --------------------------------------------------------------


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a constant, or of a tuple/list/set of them (else none)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def _loop_values(tree: ast.AST) -> dict[str, set[str]]:
    """Loop variable -> the string constants it takes in ``for x in ("a", "b")`` or ``for x, y in [(..), ..]``."""
    values: dict[str, set[str]] = {}
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.comprehension))]
    for loop in loops:
        if not isinstance(loop.iter, (ast.Tuple, ast.List, ast.Set)):
            continue
        targets = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
        for item in loop.iter.elts:
            parts = item.elts if isinstance(item, ast.Tuple) and len(targets) > 1 else [item]
            for target, part in zip(targets, parts):
                if isinstance(target, ast.Name):
                    values.setdefault(target.id, set()).update(_strings(part))
    return values


def _values(node: ast.AST, loops: dict[str, set[str]]) -> set[str]:
    if isinstance(node, ast.Name):
        return loops.get(node.id, set())
    return set(_strings(node))


def names_in_source(source: str) -> dict[str, set[str]]:
    """{"backend": names, "attention": names} a piece of Python passes as a config field, or spells as a
    composite ("a+b"), anywhere: keyword arguments, dict entries, loop values and comments."""
    tree = ast.parse(source)
    loops = _loop_values(tree)
    found: dict[str, set[str]] = {"backend": set(COMPOSITE.findall(source)), "attention": set()}
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.AST]] = []
        if isinstance(node, ast.keyword) and node.arg:
            pairs.append((node.arg, node.value))
        elif isinstance(node, ast.Dict):
            pairs += [(k.value, v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)]
        for field, value in pairs:
            if field in BACKEND_FIELDS:
                found["backend"] |= _values(value, loops)
            elif field in ATTENTION_FIELDS:
                found["attention"] |= _values(value, loops)
    return found


def names_in_notebook(path: Path) -> dict[str, set[str]]:
    """The names of :func:`names_in_source` in every code cell, plus the items (and the name-like words of
    the comment) of the KERNELS and ATTENTION parameters."""
    found: dict[str, set[str]] = {"backend": set(), "attention": set()}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join("# " + ln if MAGIC.match(ln) else ln for ln in cell.source.splitlines())
        for kind, names in names_in_source(source).items():
            found[kind] |= names
        for line in source.splitlines():
            match = re.match(r"\s*([A-Z_]+)\s*:\s*str\s*=\s*\"([^\"]*)\"\s*(?:#(.*))?$", line)
            if match and match.group(1) in NAME_PARAMETERS:
                kind = NAME_PARAMETERS[match.group(1)]
                found[kind] |= {n.strip() for n in match.group(2).split(",") if n.strip()} - {AUTO_KERNELS}
                words = re.findall(r"[a-z][a-z0-9_+]*", match.group(3) or "")
                found[kind] |= {w for w in words if "_" in w or "+" in w or w in ALL_NAMES}
    return found


def test_the_scanner_finds_names_in_each_place_they_hide():
    source = (
        'a = base.replace(kernels="turbo", attn_implementation="warp_attention")\n'
        'b = [base.replace(kernels=k) for k in ("fast", "faster")]\n'
        'c = [base.replace(attn_implementation=a) for s, a in [("static", "ring_attention")]]\n'
        'd = {"kernels": "x+y"}  # also z+w\n'
    )
    found = names_in_source(source)
    assert found["backend"] == {"turbo", "fast", "faster", "x+y", "z+w"}
    assert found["attention"] == {"warp_attention", "ring_attention"}


@pytest.mark.parametrize("path", SCANNED_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_a_source_spells_is_a_table_entry(path):
    found = names_in_source(path.read_text(encoding="utf-8"))
    assert found["backend"] <= set(KERNEL_BACKENDS), sorted(found["backend"] - set(KERNEL_BACKENDS))
    assert found["attention"] <= set(ATTENTION_IMPLEMENTATIONS), sorted(
        found["attention"] - set(ATTENTION_IMPLEMENTATIONS)
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_name_a_notebook_spells_is_a_table_entry(path):
    found = names_in_notebook(path)
    assert found["backend"] <= set(KERNEL_BACKENDS), sorted(found["backend"] - set(KERNEL_BACKENDS))
    assert found["attention"] <= set(ATTENTION_IMPLEMENTATIONS), sorted(
        found["attention"] - set(ATTENTION_IMPLEMENTATIONS)
    )


def test_the_notebook_parameters_are_read():
    found = {p.name: names_in_notebook(p) for p in NOTEBOOKS}
    assert {"eager", "liger", "compile", "liger+compile"} <= found["02_kernel_swap_in.ipynb"]["backend"]
    assert {"sdpa", "flex_attention", "flash_attention_2", "torch_varlen"} <= found["03_dynamic_padding.ipynb"][
        "attention"
    ]


# -- no name tests outside the tables ---------------------------------------------------------------------


def name_tests(source: str) -> list[str]:
    """Comparisons (==, !=, in, not in) and str-method calls (startswith, ...) against a backend or
    attention name written out as a string."""
    found = []
    for node in ast.walk(ast.parse(source)):
        operands: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith", "find", "index", "count", "split", "partition"):
                operands = list(node.args)
        names = [s for operand in operands for s in _strings(operand) if s in ALL_NAMES]
        if names:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_name_test_scan_catches_equality_and_substring_tests():
    source = 'if "liger" in kernels or kernels == "eager" or name.startswith("flex_attention"):\n    pass\n'
    assert len(name_tests(source)) == 3
    assert name_tests('if padding == "static" and kernels == BASELINE:\n    pass\n') == []


@pytest.mark.parametrize(
    "path",
    sorted(p for p in LIBRARY.rglob("*.py") if p not in TABLES),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_library_module_outside_the_tables_tests_a_name(path):
    assert name_tests(path.read_text(encoding="utf-8")) == []


# -- the tables themselves -------------------------------------------------------------------------------


def test_composites_are_made_of_entries_that_combine():
    for backend in KERNEL_BACKEND_TABLE.values():
        assert backend.name == "+".join(backend.components)
        assert all(part in KERNEL_BACKEND_TABLE for part in backend.components)
        assert set(backend.caches) <= set(COMPILED_CACHES), backend.name
        # 1e-4: the loosest fp32 CPU class, Liger in Triton's interpreter (registry.INTERPRETED_TRITON_CPU); every
        # tolerance names its basis
        assert 0 < backend.cpu_tolerance.rel <= 1e-4 and backend.cpu_tolerance.basis, backend.name
    both = kernel_backend("liger+compile")
    assert both.composite and both.components == ("liger", "compile")
    assert both.cpu_env == {"TRITON_INTERPRET": "1"} and both.uses_liger_switches
    assert both.cpu_tolerance == kernel_backend("liger").cpu_tolerance and set(both.caches) == {"triton", "inductor"}
    assert requested_kernels("liger+compile", ("rope",)) == ("rope", "compile")
    with pytest.raises(ValueError, match="does not combine"):
        compose(kernel_backend(BASELINE_BACKEND), kernel_backend("liger"))
    with pytest.raises(BackendUnavailable, match="backends are eager, liger"):
        kernel_backend("turbo")


def test_a_composite_takes_the_loosest_cpu_tolerance_of_its_parts():
    both = kernel_backend("liger+compile")
    assert both.cpu_tolerance.rel == max(kernel_backend(p).cpu_tolerance.rel for p in both.components) == 1e-4
    assert kernel_backend(BASELINE_BACKEND).cpu_tolerance.rel == 1e-5


def test_every_requested_key_is_reported():
    for name in KERNEL_BACKENDS:
        assert set(requested_kernels(name, LIGER_KERNELS)) <= set(REPORT_KEYS), name
    assert REPORT_KEYS == tuple(k for b in ELEMENTARY_BACKENDS for k in b.checks)


def test_run_config_allows_exactly_the_table():
    for name in KERNEL_BACKENDS:  # with the Liger switches the entry runs (none of Liger's loss beside CCE)
        switches = liger_switches_for(name, DEFAULT_LIGER_KERNELS) or DEFAULT_LIGER_KERNELS
        assert RunConfig(kernels=name, liger_kernels=switches).kernels == name
    for name in ATTENTION_IMPLEMENTATIONS:
        assert RunConfig(attn_implementation=name).attn_implementation == name
    with pytest.raises(ConfigError, match="'liger\\+compile'"):
        RunConfig(kernels="turbo")
    assert RunConfig().kernels == BASELINE_BACKEND


def test_exported_flags_are_training_arguments_fields():
    transformers = pytest.importorskip("transformers")
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    for name in KERNEL_BACKENDS:
        kwargs, comments = training_kwargs(name, LIGER_KERNELS[:2])
        assert set(kwargs) <= fields and set(comments) == set(kwargs), name
        on = {flag for flag, value in kwargs.items() if value is True}
        parts = kernel_backend(name).components
        assert on == {b.training_flag for b in ELEMENTARY_BACKENDS if b.training_flag and b.name in parts}
    assert training_kwargs("unknown", ())[0] == {"use_liger_kernel": False, "torch_compile": False}


def test_every_attention_entry_answers_on_a_cpu():
    for name, entry in ATTENTION_TABLE.items():
        assert isinstance(attention_status(name, "cpu"), str), name
        assert not entry.setup_code or entry.register is not None, name  # exported setup mirrors a register hook


def test_the_tables_import_without_torch():
    code = (
        "import sys; import nbhelpers.measure.config, nbhelpers.kernels.registry, nbhelpers.kernels.attention; "
        "heavy = [m for m in ('torch', 'transformers', 'liger_kernel', 'pandas') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=900)
