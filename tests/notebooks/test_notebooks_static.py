"""Fast checks of every committed notebook, without running it: the skeleton of docs/notebooks.md.

Each check is its own test (parametrized over notebooks/*.ipynb) so a failure names the notebook and
the rule: valid nbformat JSON; a markdown H1 first; the short guarded install cell second; a ``parameters``
cell papermill can read, with a type annotation, a literal value of that type and a comment for every
parameter; every parameter overridable on Databricks; a measuring notebook's workload made by one set-up
call (no RunConfig built inline); code that parses once IPython magics are
stripped; no outputs or execution counts committed; imports of nbhelpers that resolve (names and
module attributes, so an API rename shows here first); nothing that ties the notebook to the repo's
layout (so it runs when copied alone into Colab or Databricks).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import nbformat
import papermill
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")
MAGIC = re.compile(r"^\s*[%!]")
TYPES = {"int": int, "float": float, "str": str, "bool": bool}
REPO_PATHS = re.compile(r"""["'](\.\./|/work/|\.\./data|data/default_sft)|__file__""")
INSTALL_LINES = 8  # the guarded pip line and the check of its source: nbhelpers cannot help before it is installed


def _id(path: Path) -> str:
    return path.name


notebook_params = pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)


def _nb(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _code(cell: nbformat.NotebookNode) -> str:
    """A code cell's source with IPython magics and shell escapes (``%pip``, ``!ls``) commented out."""
    return "\n".join("# " + line if MAGIC.match(line) else line for line in cell.source.splitlines())


def _parameters_cell(nb: nbformat.NotebookNode) -> tuple[int, nbformat.NotebookNode]:
    tagged = [(i, c) for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{len(tagged)} cells tagged 'parameters' (one is needed)"
    return tagged[0]


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/*.ipynb is empty"
    assert all(NAME.match(p.name) for p in NOTEBOOKS), [p.name for p in NOTEBOOKS if not NAME.match(p.name)]


@notebook_params
def test_valid_nbformat_and_python3_kernel(path):
    nb = _nb(path)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    kernelspec = nb.metadata.get("kernelspec", {})
    # papermill's tests, Colab and Databricks all start the kernel named here.
    assert kernelspec.get("name") == "python3" and kernelspec.get("language") == "python", kernelspec
    ids = [c.get("id") for c in nb.cells]
    assert len(set(ids)) == len(ids), "cell ids repeat"


@notebook_params
def test_committed_without_outputs(path):
    dirty = [
        (i, c.get("id"))
        for i, c in enumerate(_nb(path).cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count is not None)
    ]
    assert not dirty, f"cells with outputs or execution counts (clear them before committing): {dirty}"


@notebook_params
def test_first_cell_is_an_h1_title_with_a_paragraph(path):
    first = _nb(path).cells[0]
    assert first.cell_type == "markdown", "the first cell must be markdown"
    lines = [line for line in first.source.splitlines() if line.strip()]
    assert lines and re.match(r"^# \S", lines[0]), f"the first line must be an H1 title, not {lines[:1]}"
    assert lines[0].startswith(f"# {path.name[:2]}"), f"the title should start with the number {path.name[:2]}"
    assert len(lines) > 1, "the title needs its paragraph: what this step shows and what the reader decides"


@notebook_params
def test_guarded_install_cell_comes_second(path):
    cell = _nb(path).cells[1]
    assert cell.cell_type == "code", "the second cell must be the guarded install cell"
    source = cell.source
    assert 'importlib.util.find_spec("nbhelpers") is None' in source, "install is not guarded by find_spec"
    assert "NBHELPERS_SOURCE" in source, "the install source must come from NBHELPERS_SOURCE"
    installs = '[sys.executable, "-m", "pip", "install", "-q", NBHELPERS_SOURCE]' in source
    assert installs, "the guarded cell must install through an argument list (no shell)"
    assert "%pip" not in source and "run_line_magic" not in source and "shell=True" not in source, (
        "NBHELPERS_SOURCE must never reach a shell"
    )
    body = ast.parse(_code(cell)).body
    assert all(isinstance(n, (ast.Import, ast.ImportFrom, ast.If)) for n in body), (
        "the install cell must do nothing outside its guard (imports and one if)"
    )
    lines = source.strip().splitlines()
    assert len(lines) <= INSTALL_LINES, f"the install cell has {len(lines)} lines; at most {INSTALL_LINES}"


@notebook_params
def test_parameters_cell_is_typed_commented_constants(path):
    nb = _nb(path)
    index, cell = _parameters_cell(nb)
    assert cell.cell_type == "code" and index == 2, f"the parameters cell is cell {index}; the guide puts it third"
    inspected = papermill.inspect_notebook(str(path))
    assert inspected, "papermill finds no parameters"
    assert "RUN_NAME" in inspected, "every notebook takes RUN_NAME"
    problems = []
    tree = ast.parse(cell.source)
    lines = cell.source.splitlines()
    for node in tree.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None):
            problems.append(f"line {node.lineno}: not an annotated constant (`NAME: type = value  # comment`)")
            continue
        name = node.target.id
        annotation = ast.unparse(node.annotation)
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            problems.append(f"{name}: the value is not a literal (derived values go in the next cell)")
            continue
        if annotation not in TYPES:
            problems.append(f"{name}: annotation {annotation!r} is not one of {sorted(TYPES)}")
        elif type(value) is not TYPES[annotation] and not (annotation == "float" and type(value) is int):
            problems.append(f"{name}: {value!r} is not a {annotation}")
        if name != name.upper():
            problems.append(f"{name}: parameters are UPPER_CASE constants")
        if "#" not in lines[node.end_lineno - 1]:
            problems.append(f"{name}: no comment saying what it is")
        info = inspected.get(name)
        if info is None or info["inferred_type_name"] in ("None", ""):
            problems.append(f"{name}: papermill does not see its type ({info})")
    assert not problems, "\n".join(problems)
    assert list(inspected) == [n.target.id for n in tree.body], "papermill reads other parameters than the cell"


@notebook_params
def test_every_parameter_is_a_databricks_widget(path):
    nb = _nb(path)
    index, _ = _parameters_cell(nb)
    names = list(papermill.inspect_notebook(str(path)))
    cell = nb.cells[index + 1]
    calls = [
        node
        for node in ast.walk(ast.parse(_code(cell)))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("apply_databricks_widgets")
    ]
    assert calls, "the cell after the parameters must call nbparams.apply_databricks_widgets(globals(), [...])"
    listed = ast.literal_eval(calls[0].args[1])
    assert list(listed) == names, f"widgets {listed} != parameters {names}"


def _calls(source: str, name: str) -> list[ast.Call]:
    """The calls in ``source`` of a function whose dotted name ends with ``name``."""
    tree = ast.parse(source)
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == name]


@notebook_params
def test_a_measuring_notebook_makes_its_workload_with_one_set_up_call(path):
    nb = _nb(path)
    index, parameters = _parameters_cell(nb)
    if "MODEL" not in {n.target.id for n in ast.parse(parameters.source).body if isinstance(n, ast.AnnAssign)}:
        pytest.skip("no MODEL parameter: the notebook measures no workload of its own")
    calls = _calls(_code(nb.cells[index + 1]), "setup_workload")
    assert len(calls) == 1, f"the set-up cell calls setup_workload {len(calls)} times (once: the workload)"
    assert [ast.unparse(a) for a in calls[0].args] == ["globals()"], "setup_workload(globals()) reads the parameters"
    inline = [c.get("id") for c in nb.cells if c.cell_type == "code" and _calls(_code(c), "RunConfig")]
    assert not inline, f"cells that build a RunConfig inline (the facade's setup_workload makes it): {inline}"


@notebook_params
def test_code_parses_once_magics_are_stripped(path):
    for i, cell in enumerate(_nb(path).cells):
        if cell.cell_type == "code":
            try:
                ast.parse(_code(cell), filename=f"{path.name}[{i}]")
            except SyntaxError as error:
                pytest.fail(f"cell {i} ({cell.get('id')}): {error}")


@notebook_params
def test_sections_are_numbered_in_order(path):
    headings = [
        line
        for cell in _nb(path).cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("## ")
    ]
    numbers = [int(m.group(1)) for h in headings if (m := re.match(r"## (\d+)\. ", h))]
    assert numbers, "no numbered sections (`## 1. ...`)"
    assert numbers == list(range(1, len(numbers) + 1)), f"sections numbered {numbers}"


@notebook_params
def test_notebooks_that_plot_load_the_bokeh_extension_through_the_workbook(path):
    """A notebook that draws loads HoloViews' Bokeh extension with ``load_plotting()`` (BokehJS inline when live,
    from its CDN in a batch run), never with its own ``hv.extension``, which would skip that choice."""
    text = "\n".join(c.source for c in _nb(path).cells if c.cell_type == "code")
    assert "hv.extension(" not in text, "hv.extension called directly: use load_plotting()"
    if "holoviews" in text or re.search(r"\w*plots?\b|\w+_plot\(|_bars\(|_histogram\(", text):
        assert "load_plotting()" in text, "a notebook that draws without load_plotting()"


def _nbhelpers_bindings(tree: ast.AST) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Names bound to nbhelpers modules, and every (module, name) imported from nbhelpers."""
    modules: dict[str, str] = {}
    imported: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nbhelpers":
            for alias in node.names:
                imported.append((node.module, alias.name))
                target = f"{node.module}.{alias.name}"
                if _is_module(target):
                    modules[alias.asname or alias.name] = target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "nbhelpers":
                    modules[alias.asname or alias.name] = alias.name
    return modules, imported


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return False


@notebook_params
def test_nbhelpers_names_the_notebook_uses_exist(path):
    code = "\n".join(_code(c) for c in _nb(path).cells if c.cell_type == "code")
    tree = ast.parse(code)
    modules, imported = _nbhelpers_bindings(tree)
    missing = []
    for module, name in imported:
        loaded = importlib.import_module(module)
        if not hasattr(loaded, name) and not _is_module(f"{module}.{name}"):
            missing.append(f"from {module} import {name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            loaded = importlib.import_module(modules[node.value.id])
            if not hasattr(loaded, node.attr):
                missing.append(f"{node.value.id}.{node.attr} ({modules[node.value.id]} has no {node.attr})")
    assert not missing, f"names the notebook uses that nbhelpers lacks: {missing}"


@notebook_params
def test_nothing_ties_the_notebook_to_the_repo_layout(path):
    # Copied alone into Colab / Databricks, there is no ../data or repo folder next to the notebook:
    # shipped files are found by nbhelpers (repo folder or installed package), not by relative paths.
    found = [
        (i, line.strip())
        for i, cell in enumerate(_nb(path).cells)
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if REPO_PATHS.search(line) or "sys.path" in line or "os.chdir" in line
    ]
    assert not found, f"code that assumes the repo layout: {found}"


@notebook_params
def test_last_code_cell_writes_or_reports_the_run(path):
    code_cells = [c for c in _nb(path).cells if c.cell_type == "code"]
    last = code_cells[-1].source
    assert re.search(r"store|RunStore|report", last) and "print(" in last, (
        "the last cell writes the run's record(s) (or the report) and prints where"
    )


def test_every_notebook_default_and_every_commands_default_is_the_one_table():
    """A notebook's parameter named in NOTEBOOK_DEFAULTS holds that default, and `nbhelpers tune` with no option
    measures what notebook 03 measures with no parameter (05, the several-GPU notebook, keeps its own workload)."""
    from nbhelpers.cli import build_parser
    from nbhelpers.planning.notebook_defaults import NOTEBOOK_DEFAULTS
    from nbhelpers.sweep import notebook_parameters

    checked = 0
    for notebook in (path for path in NOTEBOOKS if path.name[:2] in ("01", "02", "03", "04")):
        for name, info in notebook_parameters(notebook).items():
            if name in NOTEBOOK_DEFAULTS:
                assert ast.literal_eval(info["default"]) == NOTEBOOK_DEFAULTS[name], (notebook.name, name)
                checked += 1
    assert checked >= 3 * 12  # the workload's parameters in notebooks 01-03 at least
    tune = build_parser().parse_args(["tune"])
    options = {"model": "MODEL", "batch_size": "BATCH_SIZE", "max_length": "MAX_LENGTH",
               "num_samples": "NUM_SAMPLES", "steps": "STEPS", "warmup": "WARMUP", "kernels": "KERNELS",
               "strategies": "STRATEGIES", "attention": "ATTENTION", "budget_s": "TUNE_BUDGET_S",
               "token_budgets": "TUNE_TOKEN_BUDGETS"}  # fmt: skip
    given = {option: getattr(tune, option) for option in options}
    assert given == {option: NOTEBOOK_DEFAULTS[name] for option, name in options.items()}
