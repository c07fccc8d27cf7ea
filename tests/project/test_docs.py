"""README.md and docs/*.md say only what is true today, checked against the code without running anything.

For each page: every ``nbhelpers <subcommand>`` shown in code exists in ``nbhelpers.cli``'s argparse parser and
every option after it is one of that subcommand's; every notebook parameter shown (``-p NAME value`` for
papermill, ``-p [NN:]NAME=VALUE`` for ``nbhelpers run-all``, ``--grid name=...`` for ``nbhelpers sweep``, or a
backticked name in a table column headed "parameter") is declared by that notebook's ``parameters`` cell; every
repository path (``scripts/...``, ``notebooks/...``, ``docs/...``, ...) and relative link exists; every
``nbhelpers.x.y`` name and every ``from nbhelpers... import`` in a Python block resolves to a module and a name
defined in it. README.md stays a front door of at most :data:`README_MAX_LINES` lines. A problem is reported as
``FILE:LINE: what is wrong`` naming the offending name; ``test_the_checker_reports_each_kind_of_problem`` shows
the checker failing on a bad page.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import re
import shlex
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "zsh"}
# Folders of the repository whose paths a page may show; runs/ is generated (git-ignored) and not checked.
REPO_FOLDERS = ("scripts", "notebooks", "benchmarks", "docs", "nbhelpers", "data", "tests", "docker", ".ci")
PATH = re.compile(r"(?<![\w./~-])((?:" + "|".join(re.escape(f) for f in REPO_FOLDERS) + r")/[^\s`'\"()<>\[\]{},;|]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOTTED = re.compile(r"(?<![\w./-])nbhelpers(?:\.[A-Za-z_]\w*)+")
COMMAND = re.compile(r"(?:^|(?<=[\s/(]))nbhelpers(?:\.cli)?[ \t]+([a-z][\w-]*)")
PAPERMILL = re.compile(r"(?:^|(?<=[\s/]))papermill\s")
NOTEBOOK_PATH = re.compile(r"notebooks/(\d\d)_\w+\.ipynb")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
PARAMETER_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
PLACEHOLDER_NAMES = {"NAME"}  # -p NAME=VALUE, -p NN:NAME=VALUE: how a page spells the form itself
PLACEHOLDER_SCOPES = {"NN"}
INSTALL_CELL_FIRST_LINE = "# Colab / Databricks: install"


# ----------------------------------------------------------------------------------------------
# What the repository holds


@dataclass(frozen=True)
class Facts:
    root: Path
    commands: dict[str, frozenset[str]]  # subcommand -> its option strings
    parameters: dict[str, frozenset[str]]  # notebook number ("01") -> names its parameters cell declares
    notebook_files: dict[str, str]  # notebook number -> file name


def cli_parser() -> argparse.ArgumentParser:
    """The parser ``nbhelpers.cli`` builds (``_parser()`` today; a public ``build_parser()`` would do too)."""
    from nbhelpers import cli

    for name in ("build_parser", "make_parser", "parser", "_parser"):
        factory = getattr(cli, name, None)
        if callable(factory):
            parser = factory()
            if isinstance(parser, argparse.ArgumentParser):
                return parser
    raise AssertionError("nbhelpers.cli has no parser factory (build_parser() or _parser()) this test can call")


def cli_commands(parser: argparse.ArgumentParser) -> dict[str, frozenset[str]]:
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert subparsers, "nbhelpers.cli's parser has no subcommands"
    return {
        name: frozenset(sub._option_string_actions) for action in subparsers for name, sub in action.choices.items()
    }


def parameters_cell(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{notebook.name}: {len(tagged)} cells tagged 'parameters' (one expected)"
    source = tagged[0]["source"]
    return "".join(source) if isinstance(source, list) else source


def declared_names(source: str) -> frozenset[str]:
    names = set()
    for node in ast.parse(source).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def repo_facts() -> Facts:
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks, "no numbered notebooks in notebooks/"
    return Facts(
        root=ROOT,
        commands=cli_commands(cli_parser()),
        parameters={nb.name[:2]: declared_names(parameters_cell(nb)) for nb in notebooks},
        notebook_files={nb.name[:2]: nb.name for nb in notebooks},
    )


# ----------------------------------------------------------------------------------------------
# Reading a page


@dataclass(frozen=True)
class Block:
    line: int  # of the first content line
    language: str
    lines: list[str]


@dataclass(frozen=True)
class Page:
    name: str  # as reported: the path relative to the repository
    path: Path
    lines: list[str]
    blocks: list[Block]
    prose: list[tuple[int, str]]  # the lines outside fenced blocks


FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def read_page(text: str, path: Path, root: Path) -> Page:
    lines = text.splitlines()
    blocks, prose = [], []
    fence: tuple[str, str, str, int] | None = None  # (indent, marker, language, first line)
    content: list[str] = []
    for number, line in enumerate(lines, start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence, content = (match.group(1), match.group(2), match.group(3).lower(), number + 1), []
        elif fence is not None and match and match.group(2).startswith(fence[1]) and not match.group(3):
            body = textwrap.dedent("\n".join(content)).splitlines() if content else []
            blocks.append(Block(fence[3], fence[2], body))
            fence = None
        elif fence is not None:
            content.append(line)
        else:
            prose.append((number, line))
    try:
        name = str(path.relative_to(root))
    except ValueError:
        name = path.name
    return Page(name, path, lines, blocks, prose)


def inline_code(page: Page) -> Iterator[tuple[int, str]]:
    for number, line in page.prose:
        for match in INLINE.finditer(line):
            yield number, match.group(2).strip()


def logical_lines(block: Block) -> Iterator[tuple[int, str]]:
    """A shell block's commands, backslash continuations joined, each with the number of its first line."""
    start, parts = None, []
    for offset, line in enumerate(block.lines):
        if start is None:
            start = block.line + offset
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        start, parts = None, []
    if parts and start is not None:
        yield start, " ".join(parts)


def shell_snippets(page: Page) -> Iterator[tuple[int, str]]:
    """Commands as a page shows them: shell blocks' lines and inline code that is not Python."""
    for block in page.blocks:
        if block.language in SHELL_LANGUAGES:
            yield from logical_lines(block)
    for number, code in inline_code(page):
        if not code.startswith(("from ", "import ")):
            yield number, code


def words(text: str) -> list[str]:
    """Shell words of a command's tail, up to a comment or the next command; [optional] brackets dropped."""
    text = text.replace("[", " ").replace("]", " ")
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:
        tokens = text.split()
    kept = []
    for token in tokens:
        if token in {"|", "||", "&&", ";", ")"}:
            break
        kept.append(token)
    return kept


# ----------------------------------------------------------------------------------------------
# The checks: each returns problems as "FILE:LINE: ..."


def scoped_name(key: str) -> tuple[str, str]:
    scope, sep, name = key.partition(":")
    return (scope.strip(), name.strip()) if sep else ("", key.strip())


def parameter_problem(
    facts: Facts, where: str, name: str, scopes: list[str], shown: str, case_insensitive: bool = False
) -> str:
    """'' when ``name`` is declared by every notebook of ``scopes`` (any notebook when empty)."""
    if name in PLACEHOLDER_NAMES or any(s in PLACEHOLDER_SCOPES for s in scopes) or not IDENTIFIER.fullmatch(name):
        return ""
    candidates = {name, name.upper()} if case_insensitive else {name}
    if not scopes:
        if any(candidates & declared for declared in facts.parameters.values()):
            return ""
        return f"{where}: parameter `{name}` ({shown}) is declared by no notebook's parameters cell"
    for scope in scopes:
        numbers = [n for n in facts.parameters if n.startswith(scope)]
        if not numbers:
            return f"{where}: `{shown}` names notebook {scope}, and there is no notebooks/{scope}_*.ipynb"
        missing = [n for n in numbers if not candidates & facts.parameters[n]]
        if missing:
            files = ", ".join(f"notebooks/{facts.notebook_files[n]}" for n in missing)
            return f"{where}: parameter `{name}` ({shown}) is not in the parameters cell of {files}"
    return ""


def check_commands(page: Page, facts: Facts) -> list[str]:
    """(a) subcommands and their options; (b) the -p and --grid parameters given to them, and papermill's."""
    problems = []
    for number, code in shell_snippets(page):
        where = f"{page.name}:{number}"
        for match in COMMAND.finditer(code):
            command = match.group(1)
            if command not in facts.commands:
                problems.append(
                    f"{where}: `nbhelpers {command}`: no such subcommand (nbhelpers has: "
                    f"{', '.join(sorted(facts.commands))})"
                )
                continue
            tokens = words(code[match.end() :])
            options = facts.commands[command]
            for token in tokens:
                if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", token):
                    option = token.split("=", 1)[0]
                    if option not in options:
                        problems.append(
                            f"{where}: `{option}` is not an option of `nbhelpers {command}` "
                            f"(see `nbhelpers {command} --help`)"
                        )
            problems += parameter_problems(where, command, tokens, facts)
        if PAPERMILL.search(code):
            scopes = NOTEBOOK_PATH.findall(code)[:1]
            tokens = words(code)
            for flag, value in zip(tokens, tokens[1:]):
                if flag in ("-p", "--parameters"):
                    problem = parameter_problem(facts, where, value, scopes, f"-p {value}")
                    problems += [problem] if problem else []
    for number, code in inline_code(page):  # a -p form shown on its own: `-p 03:PROFILE=false`
        if code.startswith("-p ") and not COMMAND.search(code):
            problems += parameter_problems(f"{page.name}:{number}", "run-all", words(code), facts)
    return problems


def parameter_problems(where: str, command: str, tokens: list[str], facts: Facts) -> list[str]:
    problems = []
    for flag, value in zip(tokens, tokens[1:]):
        if flag in ("-p", "--param") and "=" in value:
            scope, name = scoped_name(value.split("=", 1)[0])
            problems.append(parameter_problem(facts, where, name, [scope] if scope else [], f"-p {value}"))
    if command == "sweep" and "--grid" in tokens:
        for item in tokens[tokens.index("--grid") + 1 :]:
            if item.startswith("-"):
                break
            scope, name = scoped_name(item.split("=", 1)[0])
            shown = f"--grid {item}"
            problems.append(parameter_problem(facts, where, name, [scope] if scope else [], shown, True))
    return [p for p in problems if p]


def table_cells(line: str) -> list[str]:
    """A table row's cells; a '|' inside backticks or escaped belongs to its cell."""
    cells, current, ticks = [], "", False
    text = line.strip().strip("|") if line.strip().endswith("|") else line.strip().lstrip("|")
    previous = ""
    for char in text:
        if char == "`":
            ticks = not ticks
        if char == "|" and not ticks and previous != "\\":
            cells.append(current.strip())
            current = ""
        else:
            current += char
        previous = char
    cells.append(current.strip())
    return cells


def check_tables(page: Page, facts: Facts) -> list[str]:
    """(b) a backticked NAME in a column headed "parameter(s)" is declared by the row's notebooks (its
    "notebook(s)" column, else the notebooks the section's heading names, else any notebook)."""
    problems = []
    prose = page.prose
    heading_scopes: list[str] = []
    index = 0
    while index < len(prose):
        number, line = prose[index]
        if line.startswith("#"):
            heading_scopes = [n for n in re.findall(r"\b(\d\d)\b", line) if n in facts.parameters]
        separator = prose[index + 1][1] if index + 1 < len(prose) else ""
        if not (line.lstrip().startswith("|") and re.match(r"^\s*\|?\s*:?-{3,}", separator)):
            index += 1
            continue
        header = [cell.strip("` ").lower() for cell in table_cells(line)]
        parameter_columns = [i for i, cell in enumerate(header) if "parameter" in cell]
        notebook_columns = [i for i, cell in enumerate(header) if cell in ("notebook", "notebooks")]
        index += 2
        while index < len(prose) and prose[index][1].lstrip().startswith("|"):
            row_number, row = prose[index]
            cells = table_cells(row)
            scopes = heading_scopes
            if notebook_columns and notebook_columns[0] < len(cells):
                found = [n for n in re.findall(r"\b(\d\d)\b", cells[notebook_columns[0]]) if n in facts.parameters]
                scopes = found or scopes
            for column in parameter_columns:
                for match in INLINE.finditer(cells[column] if column < len(cells) else ""):
                    name = PARAMETER_NAME.match(match.group(2).strip())
                    if name:
                        shown = f"table column '{header[column]}'"
                        problem = parameter_problem(facts, f"{page.name}:{row_number}", name.group(), scopes, shown)
                        problems += [problem] if problem else []
            index += 1
    return problems


def path_exists(root: Path, relative: str) -> bool:
    if any(char in relative for char in "*?"):
        return any(root.glob(relative.rstrip("/")))
    return (root / relative).exists()


def check_paths(page: Page, facts: Facts) -> list[str]:
    """(c) repository paths anywhere on the page (from the repository root) and relative links (from the page)."""
    problems = []
    for number, line in enumerate(page.lines, start=1):
        for match in PATH.finditer(line):
            relative = match.group(1).rstrip(".:")
            if not path_exists(facts.root, relative):
                problems.append(f"{page.name}:{number}: `{relative}` does not exist in the repository")
        for match in LINK.finditer(line):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][\w+.-]*:", target):  # an anchor, a URL, mailto:
                continue
            if not (page.path.parent / target).exists():
                problems.append(f"{page.name}:{number}: link `{target}` points to nothing (from {page.name})")
    return problems


def top_level_names(module: Path) -> tuple[set[str], bool]:
    """Names a module binds at its top level, and whether it may bind any (``__getattr__``, ``import *``)."""
    names: set[str] = set()
    anything = False

    def visit(body: list[ast.stmt]) -> None:
        nonlocal anything
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                anything |= node.name == "__getattr__"
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = [node.target] if not isinstance(node, ast.Assign) else node.targets
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    anything |= alias.name == "*"
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for part in ("body", "orelse", "finalbody"):
                    visit(getattr(node, part, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(module.read_text(encoding="utf-8")).body)
    return names, anything


def resolve(root: Path, dotted: str, names: tuple[str, ...] = ()) -> str:
    """'' when ``dotted`` is a module of the package, or a module and a name defined in it; else why not.
    ``names`` (from ``from dotted import ...``) must each be defined in that module or be its submodules."""
    parts = dotted.split(".")
    folder = root / parts[0]
    if not (folder / "__init__.py").is_file():
        return f"`{parts[0]}` is no package of the repository"
    module = folder / "__init__.py"
    for position, part in enumerate(parts[1:], start=1):
        here = ".".join(parts[:position])
        if module.name == "__init__.py" and (folder / part / "__init__.py").is_file():
            folder, module = folder / part, folder / part / "__init__.py"
        elif module.name == "__init__.py" and (folder / f"{part}.py").is_file():
            module = folder / f"{part}.py"
        else:
            defined, anything = top_level_names(module)
            if part not in defined and not anything:
                return f"`{dotted}`: `{here}` defines no `{part}`"
            return ""  # a name of a module; what follows is an attribute of that object
    if names:
        defined, anything = top_level_names(module)
        subpackage = folder if module.name == "__init__.py" else None
        for name in names:
            submodule = subpackage is not None and (
                (subpackage / f"{name}.py").is_file() or (subpackage / name).is_dir()
            )
            if name not in defined and not anything and not submodule:
                return f"`from {dotted} import {name}`: `{dotted}` defines no `{name}`"
    return ""


def check_python_names(page: Page, facts: Facts) -> list[str]:
    """``nbhelpers.x.y`` names anywhere on the page, and ``from nbhelpers... import`` in Python blocks."""
    problems = []
    for number, line in enumerate(page.lines, start=1):
        for match in DOTTED.finditer(line):
            problem = resolve(facts.root, match.group())
            problems += [f"{page.name}:{number}: {problem}"] if problem else []
    for block in page.blocks:
        if block.language != "python":
            continue
        try:
            tree = ast.parse("\n".join(block.lines))
        except SyntaxError as error:
            problems.append(f"{page.name}:{block.line + (error.lineno or 1) - 1}: a Python block that does not parse")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nbhelpers":
                problem = resolve(facts.root, node.module, tuple(alias.name for alias in node.names))
                problems += [f"{page.name}:{block.line + node.lineno - 1}: {problem}"] if problem else []
    return problems


def check_length(page: Page, limit: int = README_MAX_LINES) -> list[str]:
    """(d) README.md is a front door: at most ``limit`` lines."""
    if page.path.name == "README.md" and page.path.parent == ROOT and len(page.lines) > limit:
        return [
            f"{page.name}:{limit + 1}: README.md has {len(page.lines)} lines; at most {limit} (move the rest to docs/)"
        ]
    return []


def check_page(text: str, path: Path, facts: Facts) -> list[str]:
    page = read_page(text, path, facts.root)
    return [
        *check_length(page),
        *check_commands(page, facts),
        *check_tables(page, facts),
        *check_paths(page, facts),
        *check_python_names(page, facts),
    ]


# ----------------------------------------------------------------------------------------------
# The tests


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_says_only_what_exists(path):
    problems = check_page(path.read_text(encoding="utf-8"), path, repo_facts())
    assert not problems, "\n".join(problems)


def test_there_are_pages_to_check():
    assert README.is_file()
    assert len(PAGES) > 1, "docs/ holds no pages"


def test_readme_names_the_commands_ci_runs():
    text = README.read_text(encoding="utf-8")
    for command in ("bash scripts/run_workbook.sh", "bash scripts/test.sh", "bash scripts/test_all.sh",
                    "WORKBOOK_PYTHON=python3 bash scripts/run_workbook_gpu.sh"):  # fmt: skip
        assert command in text, f"README.md does not show `{command}`"
    assert "bash scripts/test_all.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8"), (
        ".ci/run no longer runs the README's full test tier"
    )


def test_the_pages_show_the_notebooks_install_cell():
    """The guarded install cell a page shows is, line for line, the one every notebook has."""
    cells = {}
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        source = json.loads(notebook.read_text(encoding="utf-8"))["cells"][1]["source"]
        cells[notebook.name] = ("".join(source) if isinstance(source, list) else source).strip()
    shown = [
        (page, block)
        for page in PAGES
        for block in read_page(page.read_text(encoding="utf-8"), page, ROOT).blocks
        if block.language == "python" and block.lines and block.lines[0].startswith(INSTALL_CELL_FIRST_LINE)
    ]
    assert shown, "no page shows the notebooks' guarded install cell"
    for page, block in shown:
        text = "\n".join(block.lines).strip()
        differing = [name for name, cell in cells.items() if cell != text]
        assert not differing, f"{page.relative_to(ROOT)}:{block.line}: the install cell differs from {differing}"


BAD_PAGE = """\
# A page with one mistake of each kind
Run `nbhelpers frobnicate --now` first.
```bash
nbhelpers tune --budget-s 10 --no-such-option
papermill notebooks/01_baseline_profile.ipynb out.ipynb -p NOT_A_PARAMETER 3
.venv/bin/nbhelpers run-all -p 04:MODEL=qwen3-tiny -p MODEL=qwen3-tiny
nbhelpers sweep --grid batch_sizes=2,4 --notebooks 01
```
| parameter | notebooks | what |
|---|---|---|
| `BATCH_SIZE` | 04 | not a parameter of notebook 04 |
| `MODEL` | 01, 05 | fine |
See [the guide](missing-guide.md), `scripts/no_such_script.sh` and `nbhelpers.no_such_module.thing`.
```python
from nbhelpers.measure.runner import run_configs, no_such_function
```
"""

GOOD_PAGE = """\
# A correct page
```bash
.venv/bin/nbhelpers run-all --run-name mine -p MODEL=qwen3-tiny -p 03:STRATEGIES=static,packed  # a comment
nbhelpers sweep --grid batch_size=2,4 --notebooks 01
papermill notebooks/03_dynamic_padding.ipynb out.ipynb -p STRATEGIES "static,packed" -p PROFILE True
```
`nbhelpers doctor --pin docker/kernel-set.txt`, `-p 03:PROFILE=false`, [notebooks](notebooks.md),
`nbhelpers.measure.runner.run_configs`, `scripts/test.sh`, `benchmarks/gpu/qwen3-1.7b/*/*.jsonl`.
| parameter | notebooks |
|---|---|
| `TUNE_BUDGET_S` | 03 |
```python
from nbhelpers.measure.runner import run_configs
```
"""


def test_the_checker_reports_each_kind_of_problem():
    problems = check_page(BAD_PAGE, ROOT / "docs" / "bad.md", repo_facts())
    expected = {
        "docs/bad.md:2: `nbhelpers frobnicate`": "an unknown subcommand",
        "docs/bad.md:4: `--no-such-option` is not an option of `nbhelpers tune`": "an unknown option",
        "docs/bad.md:5: parameter `NOT_A_PARAMETER`": "a papermill parameter the notebook lacks",
        "docs/bad.md:6: parameter `MODEL` (-p 04:MODEL=qwen3-tiny)": "a scoped parameter the notebook lacks",
        "docs/bad.md:7: parameter `batch_sizes`": "a grid name no notebook declares",
        "docs/bad.md:11: parameter `BATCH_SIZE`": "a table's parameter the row's notebook lacks",
        "docs/bad.md:13: link `missing-guide.md`": "a broken link",
        "docs/bad.md:13: `scripts/no_such_script.sh` does not exist": "a missing path",
        "docs/bad.md:13: `nbhelpers.no_such_module.thing`": "a missing module",
        "docs/bad.md:15: `from nbhelpers.measure.runner import no_such_function`": "a missing name",
    }
    for start, what in expected.items():
        assert any(p.startswith(start) for p in problems), f"not reported: {what} ({start}); got:\n" + "\n".join(
            problems
        )
    assert len(problems) == len(expected), "\n".join(problems)  # the fine row, and -p MODEL=... unscoped, pass


def test_the_checker_passes_a_correct_page_and_limits_the_readme():
    assert check_page(GOOD_PAGE, ROOT / "docs" / "good.md", repo_facts()) == []
    long_readme = "\n".join(["# Title", *(f"line {n}" for n in range(README_MAX_LINES))])
    problems = check_page(long_readme, README, repo_facts())
    assert problems == [f"README.md:{README_MAX_LINES + 1}: README.md has {README_MAX_LINES + 1} lines; "
                        f"at most {README_MAX_LINES} (move the rest to docs/)"]  # fmt: skip
