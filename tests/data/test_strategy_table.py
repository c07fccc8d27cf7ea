"""The padding-strategy table is the single source: every strategy named anywhere is an entry, nothing
outside the table branches on a strategy's name, and every entry carries everything the package reads."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from nbhelpers.data.strategies import (
    BASELINE_STRATEGY,
    PACKED_STRATEGIES,
    PADDING_STRATEGIES,
    SAME_FIRST_BATCH_STRATEGIES,
    STRATEGIES,
    PaddingSettings,
    collator_code,
    plan_batches,
    row_width,
    sft_config_settings,
)
from nbhelpers.validation import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nbhelpers"
TABLE_MODULE = PACKAGE / "data" / "strategies.py"
# The benchmark suites' tables: experiment definitions that spell strategies out, row by row (read, not branched on).
SUITE_TABLES = [PACKAGE / "bench" / f"{name}.py" for name in ("dense_grid", "dense_entries", "dense_peers", "hybrid",
                                                                    "host_allocators")]
PADDING_KEYS = {"padding", "strategy"}  # the keyword / field names that carry a strategy's name
# SFTConfig / TrainingArguments fields the table may set (TRL 1.x spelling).
SFT_FIELDS = {"per_device_train_batch_size", "max_length", "packing", "packing_strategy", "padding_free",
              "pad_to_multiple_of"}  # fmt: skip
LENGTHS = [5, 40, 7, 33, 12, 90, 3, 64, 18, 27, 51, 8, 200, 9]


# -- finding strategy names in source -------------------------------------------------------------------


def _strings(node: ast.AST | None) -> list[str]:
    """The string constants of a constant or a literal tuple / list / set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def _padding_variables(tree: ast.AST) -> set[str]:
    """Names passed as ``padding=NAME`` / ``strategy=NAME``: they hold a strategy's name."""
    found = set(PADDING_KEYS)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in PADDING_KEYS and isinstance(node.value, ast.Name):
            found.add(node.value.id)
    return found


def _is_padding_expression(node: ast.AST, variables: set[str]) -> bool:
    """``padding``, ``x.padding``, ``config["padding"]``, ``config.get("padding")`` or a padding variable."""
    if isinstance(node, ast.Name):
        return node.id in variables
    if isinstance(node, ast.Attribute):
        return node.attr in PADDING_KEYS
    if isinstance(node, ast.Subscript):
        return _strings(node.slice)[:1] == ["padding"]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return _strings(node.args[0] if node.args else None)[:1] == ["padding"]
    return False


def strategy_names_in(source: str) -> set[str]:
    """Strategy names a piece of Python source spells out, wherever a strategy's name goes."""
    tree = ast.parse(source)
    variables = _padding_variables(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in PADDING_KEYS:
            names.update(_strings(node.value))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if _strings(key)[:1] == ["padding"]:
                    names.update(_strings(value))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_padding_expression(side, variables) for side in sides):
                names.update(s for side in sides for s in _strings(side))
        elif isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = _strings(node.args[0] if node.args else None)[:1]
            if func == "PaddingSettings":
                names.update(first)
            elif func == "get" and first == ["padding"] and len(node.args) > 1:
                names.update(_strings(node.args[1]))  # the default strategy
            elif first == ["--padding"]:
                names.update(s for k in node.keywords if k.arg == "default" for s in _strings(k.value))
        elif isinstance(node, (ast.For, ast.comprehension)):
            names.update(_loop_strategies(node.target, node.iter, variables))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and re.fullmatch(r"PADDING|(\w+_)?STRATEGIES", t.id) for t in targets):
                names.update(n.strip() for s in _strings(node.value) for n in s.split(",") if n.strip())
    return names


def _loop_strategies(target: ast.AST, iterable: ast.AST, variables: set[str]) -> list[str]:
    """``for s in ("static", "packed")`` (or pairs) where ``s`` is later passed as a padding."""
    if not isinstance(iterable, (ast.Tuple, ast.List)):
        return []
    if isinstance(target, ast.Name):
        return [s for e in iterable.elts for s in _strings(e)] if target.id in variables else []
    if isinstance(target, ast.Tuple):
        positions = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Name) and t.id in variables]
        return [
            s for e in iterable.elts if isinstance(e, ast.Tuple) for i in positions
            if i < len(e.elts) for s in _strings(e.elts[i])
        ]  # fmt: skip
    return []


def notebook_sources() -> dict[str, str]:
    """Each notebook's code cells as one Python source (IPython magics commented out)."""
    sources = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        text = "\n\n".join(code)
        sources[path.name] = re.sub(r"^(\s*)([%!])", r"\1# \2", text, flags=re.M)
    return sources


def test_the_finder_sees_every_way_a_strategy_is_named():
    source = """
PADDING: str = "p_param"  # a parameters cell
STRATEGIES: str = "p_list1, p_list2"
config = RunConfig(padding="p_keyword")
record = {"padding": "p_dict"}
if record.config.get("padding") == "p_compare" or config.padding in ("p_tuple",):
    pass
for s in ("p_loop",):
    configs.append(base.replace(padding=s, profile=s == "p_loop_compare"))
for s, a in (("p_pair", "sdpa"),):
    base.replace(padding=s, attn_implementation=a)
settings = PaddingSettings("p_settings", batch_size=2)
padding = self.config.get("padding", "p_default")
parser.add_argument("--padding", default="p_cli")
"""
    expected = {"p_param", "p_list1", "p_list2", "p_keyword", "p_dict", "p_compare", "p_tuple", "p_loop",
                "p_loop_compare", "p_pair", "p_settings", "p_default", "p_cli"}  # fmt: skip
    assert strategy_names_in(source) == expected


# -- the table is the single source ---------------------------------------------------------------------


def test_every_strategy_named_in_notebooks_is_a_table_entry():
    named = {name: strategy_names_in(source) for name, source in notebook_sources().items()}
    assert named["03_dynamic_padding.ipynb"], "the finder found no strategy in notebook 03: it is broken"
    for notebook, names in named.items():
        assert names <= set(STRATEGIES), f"{notebook} names strategies the table lacks: {names - set(STRATEGIES)}"


@pytest.mark.parametrize(
    "path",
    ["nbhelpers/views/widgets.py", "nbhelpers/analysis/recommend.py",
     *sorted(str(p.relative_to(ROOT)) for p in [*SUITE_TABLES, *(ROOT / "benchmarks").glob("*.py")])],
)  # fmt: skip
def test_every_strategy_named_in_widgets_recommend_and_benchmarks_is_a_table_entry(path):
    names = strategy_names_in((ROOT / path).read_text(encoding="utf-8"))
    assert names <= set(STRATEGIES), f"{path} names strategies the table lacks: {names - set(STRATEGIES)}"


def test_the_benchmarks_are_seen_to_name_strategies():
    """Not vacuous: the suite tables spell strategies out (their experiment definitions) and the finder sees them."""
    assert all(path.is_file() for path in SUITE_TABLES)
    names = strategy_names_in(SUITE_TABLES[0].read_text(encoding="utf-8"))
    assert {BASELINE_STRATEGY, *PACKED_STRATEGIES} <= names


def _branches_on_a_strategy_name(tree: ast.AST) -> list[str]:
    """Comparisons with a strategy name literal, dicts keyed by several strategy names (a dispatch), and
    literal tuples / lists / sets of several strategy names (a copy of part of the table)."""
    known = set(STRATEGIES)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            literals = [s for side in (node.left, *node.comparators) for s in _strings(side)]
            if known & set(literals):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Dict):
            keys = [s for key in node.keys for s in _strings(key)]
            if len(known & set(keys)) > 1:
                found.append(f"line {node.lineno}: a dict keyed by strategy names")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if len(known & set(_strings(node))) > 1:
                found.append(f"line {node.lineno}: a list of strategy names: {ast.unparse(node)}")
    return found


def test_no_library_module_outside_the_table_branches_on_a_strategy_name():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == TABLE_MODULE or path in SUITE_TABLES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        problems += [f"{path.relative_to(ROOT)} {p}" for p in _branches_on_a_strategy_name(tree)]
    assert not problems, "read the strategy table instead:\n" + "\n".join(problems)


def test_the_branch_scan_catches_a_branch():
    source = 'if padding == "packed":\n    pass\nx = {"static": 1, "dynamic": 2}\nPACKED = ("packed", "token_budget")'
    tree = ast.parse(source)
    assert len(_branches_on_a_strategy_name(tree)) == 3


# -- every entry is complete ----------------------------------------------------------------------------


def test_derived_tuples_come_from_the_table():
    assert PADDING_STRATEGIES == tuple(STRATEGIES)
    assert PACKED_STRATEGIES == tuple(n for n, s in STRATEGIES.items() if s.width is None)
    assert SAME_FIRST_BATCH_STRATEGIES == tuple(n for n, s in STRATEGIES.items() if s.same_first_batch)
    assert BASELINE_STRATEGY in STRATEGIES and not STRATEGIES[BASELINE_STRATEGY].packed
    assert all(name == entry.name for name, entry in STRATEGIES.items())


@pytest.mark.parametrize("name", PADDING_STRATEGIES)
def test_each_entry_has_its_label_description_collator_and_sft_settings(name):
    entry = STRATEGIES[name]
    assert entry.label.strip() and entry.description.strip()
    settings = PaddingSettings(name, batch_size=4, max_length=256, pad_to_multiple_of=16, token_budget=2048)
    code = collator_code(settings)
    expression = code.split("  #")[0]
    call = ast.parse(expression, mode="eval").body
    assert isinstance(call, ast.Call) and call.func.id in ("DataCollatorForSeq2Seq", "DataCollatorWithFlattening")
    import transformers

    assert hasattr(transformers, call.func.id)
    assert ("DataCollatorWithFlattening" in code) == entry.packed
    kwargs, comments = sft_config_settings(settings)
    assert set(kwargs) <= SFT_FIELDS and set(comments) <= set(kwargs)
    assert kwargs["padding_free"] == entry.packed  # TRL batches a packed strategy padding-free
    padding_free_alone = kwargs["padding_free"] and not kwargs["packing"]  # TRL refuses a max_length then
    assert kwargs["max_length"] == (2048 if kwargs["packing"] else None if padding_free_alone else 256)
    expected_multiple = getattr(settings, entry.trl.pad_to_multiple_of) if entry.trl.pad_to_multiple_of else None
    assert kwargs["pad_to_multiple_of"] == expected_multiple  # written out: TRL's default is "auto"
    float8 = sft_config_settings(settings.replace(token_multiple=16))[0]["pad_to_multiple_of"]
    assert float8 == (expected_multiple or 16)  # the kernels' multiple where the strategy sets none


def test_sft_settings_are_real_sft_config_fields_where_trl_is_installed():
    trl = pytest.importorskip("trl", reason="TRL is not installed: SFT keys checked against SFT_FIELDS only")
    fields = {f.name for f in dataclasses.fields(trl.SFTConfig)}
    assert fields >= SFT_FIELDS


def test_same_first_batch_entries_plan_static_s_first_batch():
    for name, entry in STRATEGIES.items():
        first = plan_batches(LENGTHS, PaddingSettings(name, batch_size=3, max_length=64, token_budget=100))[0]
        static_first = plan_batches(LENGTHS, PaddingSettings(BASELINE_STRATEGY, batch_size=3, max_length=64))[0]
        assert (first == static_first) or not entry.same_first_batch, name


def test_row_width_of_padded_and_packed_entries():
    """A packed row is as long as its clipped sequences; a padded row here is the longest, which is max_length."""
    for name, entry in STRATEGIES.items():
        width = row_width([3, 70, 5], PaddingSettings(name, max_length=64, pad_to_multiple_of=8))
        assert width == (72 if entry.packed else 64), name


def test_padding_settings_validate_by_name():
    with pytest.raises(ConfigError, match="padding='ragged'"):
        PaddingSettings("ragged")
    for field, value in (("token_budget", -1), ("seed", -1), ("batch_size", True)):
        with pytest.raises(ConfigError, match=f"^{field}="):
            PaddingSettings(**{field: value})
    assert PaddingSettings(batch_size=4, max_length=8).effective_token_budget == 32


def test_run_config_gives_its_padding_settings():
    from nbhelpers.measure.config import RunConfig

    config = RunConfig(padding="token_budget", batch_size=2, max_length=64, token_budget=256, seed=3)
    assert config.padding_settings == PaddingSettings("token_budget", 2, 64, 8, 4, 256, 3)


def test_the_explorer_offers_every_table_entry_with_its_label():
    pytest.importorskip("ipywidgets")
    from nbhelpers.views.widgets import find_widget, waste_explorer

    selector = find_widget(waste_explorer(LENGTHS, plot=False), description="strategy")
    assert list(selector.options) == [(s.label, name) for name, s in STRATEGIES.items()]
