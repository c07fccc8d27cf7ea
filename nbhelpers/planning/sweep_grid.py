"""The sweep's grid and notebooks: parse ``name=v1,v2`` items, name points, coerce values strictly to the
types the notebooks' parameters cells declare (``nbhelpers.validation.ConfigError`` otherwise).

A bracketed value of a text parameter is the comma list the notebook parses (:mod:`nbhelpers.planning.lists`):
``liger_kernels=[rope,swiglu],[rms_norm]`` gives LIGER_KERNELS="rope,swiglu", then "rms_norm"."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbhelpers.validation import ConfigError

from .lists import parse_list

RUN_NAME_PARAMETER = "RUN_NAME"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")

# ----------------------------------------------------------------------------------------------
# Grid


def parse_value(text: str) -> Any:
    """A grid value: int, float, true/false, ``[a,b]`` (a list of such values), else the string itself."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [parse_value(v) for v in split_values(text[1:-1])]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def split_values(text: str) -> list[str]:
    """``"2,[a,b],4"`` -> ``["2", "[a,b]", "4"]``: commas inside brackets belong to a list value."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            raise ValueError(f"grid values {text!r}: a ']' without its '['")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"grid values {text!r}: a '[' without its ']'")
    return [p for p in [*parts, current] if p.strip()]


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``["batch_size=2,4", "padding=dynamic,packed"]`` -> ``{"batch_size": [2, 4], "padding": [...]}``.

    A list parameter takes bracketed values: ``liger_kernels=[rms_norm,swiglu],[rope]`` is two values.
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"grid item {item!r} must look like name=value1,value2")
        if key in grid:
            raise ValueError(f"grid parameter {key!r} is given twice")
        parsed = [parse_value(v) for v in split_values(values)]
        if not parsed:
            raise ValueError(f"grid parameter {key!r} has no values")
        grid[key] = parsed
    return grid


def grid_points(grid: dict[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    """Every combination, first key slowest; an empty grid is one point with no values."""
    if not grid:
        return [{}]
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def _short_hash(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:8]


def point_name(point: dict[str, Any]) -> str:
    """Deterministic run name of a grid point: ``batch_size-2_padding-dynamic``.

    Characters a run name may not hold become "-" and a short hash of the point is appended, as it is
    when the name would pass 100 characters, so two points never share a name.
    """
    if not point:
        return "default"
    raw = "_".join(f"{k}-{v}" for k, v in point.items())
    name = _SAFE.sub("-", raw).strip("-._") or "point"
    if name != raw or len(name) > 100:
        name = f"{name[:90].rstrip('-._')}-{_short_hash(point)}"
    return name


def grid_text(grid: dict[str, Sequence[Any]] | None) -> str:
    """A grid as ``--grid`` takes it: ``batch_size=2,4 liger_kernels=[rope,swiglu]`` ("(none)" when empty)."""

    def value(v: Any) -> str:
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(value(x) for x in v) + "]"
        return str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{k}={','.join(value(v) for v in values)}" for k, values in (grid or {}).items()) or "(none)"


def same_sweep(
    started: dict[str, Any], grid: dict[str, Sequence[Any]] | None, notebooks: Sequence[str | Path]
) -> bool:
    """Whether a sweep's manifest (``{"grid": ..., "notebooks": [names]}``) describes the same sweep as ``grid``
    and ``notebooks``: the same points (each a run folder; the values' order aside) and the same notebooks."""
    old_grid, old_notebooks = started.get("grid"), started.get("notebooks")
    if not isinstance(old_grid, dict) or not all(isinstance(v, list) for v in old_grid.values()):
        return False
    if not isinstance(old_notebooks, list):
        return False
    points = {point_name(p) for p in grid_points(grid)}
    return {point_name(p) for p in grid_points(old_grid)} == points and set(old_notebooks) == {
        Path(n).name for n in notebooks
    }


def default_sweep_name(grid: dict[str, Sequence[Any]] | None, notebooks: Sequence[Path]) -> str:
    """Same grid and notebooks -> same name, so running the same command again resumes."""
    return "sweep-" + _short_hash({"grid": grid or {}, "notebooks": [Path(n).name for n in notebooks]})


# ----------------------------------------------------------------------------------------------
# Notebooks and their parameters


def list_notebooks(notebooks_dir: str | Path = "notebooks") -> list[Path]:
    """Every notebook of a folder in name order (01_..., 02_...), checkpoints and outputs left out."""
    folder = Path(notebooks_dir)
    candidates = (p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    found = sorted(p for p in candidates if ".partial" not in p.name)
    if not found:
        raise FileNotFoundError(f"no notebooks (*.ipynb) in {folder.resolve()}")
    return found


def find_notebooks(spec: str | Sequence[str] | None, notebooks_dir: str | Path = "notebooks") -> list[Path]:
    """Notebooks named by number prefix ("01,02"), file name or path; None or "" means all of them."""
    if not spec:
        return list_notebooks(notebooks_dir)
    found: list[Path] = []
    for item in parse_list(spec, None, "notebooks", empty=True):
        path = Path(item)
        if path.suffix == ".ipynb" and path.exists():
            found.append(path)
            continue
        matches = [p for p in list_notebooks(notebooks_dir) if p.name == item or p.name.startswith(item)]
        if len(matches) != 1:
            names = ", ".join(p.name for p in list_notebooks(notebooks_dir))
            problem = "matches no notebook" if not matches else "matches several notebooks"
            raise ValueError(f"notebook {item!r} {problem} in {notebooks_dir}: {names}")
        found.append(matches[0])
    return found


def check_declared(notebook: str | Path, parameters: dict[str, Any]) -> None:
    """ConfigError naming the first parameter ``notebook`` does not declare, and those it does."""
    declared = notebook_parameters(notebook)
    unknown = sorted(set(parameters) - set(declared))
    if unknown:
        names = ", ".join(sorted(declared)) or "none"
        raise ConfigError(unknown[0], parameters[unknown[0]], f"a parameter {Path(notebook).name} declares: {names}")


def notebook_parameters(path: str | Path) -> dict[str, dict[str, Any]]:
    """The parameters a notebook's ``parameters`` cell declares (papermill.inspect_notebook)."""
    import papermill

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(papermill.inspect_notebook(str(path)))


_TYPES = {
    "int": "an integer", "float": "a finite number", "bool": "true or false", "str": "text",
    "list": "a list, written [a,b] in the grid", "tuple": "a list, written [a,b] in the grid",
}  # fmt: skip


def _coerce(value: Any, type_name: str, notebook: str, name: str) -> Any:
    """``value`` as the parameter's declared type, strictly: 1.5 is no int, 1 or "yes" no bool, inf no number."""
    base = (type_name or "").strip().lower().split("[")[0]
    if base not in _TYPES:
        return value  # no annotation: passed as parsed
    if isinstance(value, str) and base != "str":
        value = parse_value(value)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "int" and number and float(value).is_integer():
        return int(value)
    if base == "float" and number and math.isfinite(value):
        return float(value)
    if base == "bool" and isinstance(value, bool):
        return value
    if base == "str" and not isinstance(value, (list, tuple)):
        return value if isinstance(value, str) else json.dumps(value)
    if base == "str" and value and all(_is_name(v) for v in value):
        return ",".join(value)  # a bracketed grid value: the comma list a text parameter holds
    if base in ("list", "tuple") and isinstance(value, (list, tuple)):
        return list(value)
    raise ConfigError(name, value, f"{_TYPES[base]} ({notebook} declares {name}: {type_name})")


def _is_name(value: Any) -> bool:
    """A string that can stand in a comma list: not empty, no comma, no bracket."""
    return isinstance(value, str) and bool(value.strip()) and not any(c in value for c in ",[]")


def _declared_name(key: str, declared: dict[str, Any]) -> str | None:
    for candidate in (key, key.upper()):
        if candidate in declared:
            return candidate
    return None


def scoped(key: str) -> tuple[str, str]:
    """``"02:BACKENDS"`` -> ``("02", "BACKENDS")`` (for notebooks named 02...); ``"MODEL"`` -> ``("", "MODEL")``."""
    scope, sep, name = key.partition(":")
    return (scope.strip(), name.strip()) if sep else ("", key)


def parameters_for(
    notebook: Path, declared: dict[str, dict[str, Any]], point: dict[str, Any], run_name: str
) -> dict[str, Any]:
    """Only what the notebook declares: RUN_NAME and the grid values, typed as its parameters cell says
    (a scoped key ``"NN:NAME"`` only for notebooks named NN..., winning over ``NAME``)."""
    params: dict[str, Any] = {}
    if RUN_NAME_PARAMETER in declared:
        params[RUN_NAME_PARAMETER] = run_name
    for key, value in sorted(point.items(), key=lambda item: bool(scoped(item[0])[0])):
        scope, bare = scoped(key)
        name = _declared_name(bare, declared) if notebook.name.startswith(scope) else None
        if name is not None:
            info = declared[name]
            params[name] = _coerce(value, str(info.get("inferred_type_name", "")), notebook.name, name)
    return params


def check_grid(grid: dict[str, Sequence[Any]] | None, declared: dict[Path, dict[str, Any]]) -> None:
    """Every grid key must be a parameter of at least one notebook (as is, or upper-cased; "NN:" scoped);
    not RUN_NAME."""
    for key in grid or {}:
        scope, bare = scoped(key)
        if bare.upper() == RUN_NAME_PARAMETER:
            raise ConfigError(
                key, (grid or {})[key],
                "left out: the run's folder is named by --run-name (run-all) or by the sweep for each point (--name)",
            )  # fmt: skip
        scope_params = [params for path, params in declared.items() if Path(path).name.startswith(scope)]
        if not any(_declared_name(bare, params) for params in scope_params):
            names = sorted({n for params in scope_params for n in params})
            raise ValueError(
                f"grid parameter {key!r} is declared by none of the notebooks "
                f"({', '.join(p.name for p in declared)}); their parameters are: {', '.join(names)}"
            )


REPORT_NOTEBOOK = "04"  # the notebook whose parameters (BASELINE_LABEL) the run's last report follows


def report_parameter(parameters: dict[str, Any], name: str) -> Any:
    """The value of report notebook 04's parameter ``name`` among run-all's ``parameters`` ("04:NAME" wins over
    "NAME", as the notebooks see them); None when not given."""
    found = None
    for key, value in sorted(parameters.items(), key=lambda item: bool(scoped(item[0])[0])):
        scope, bare = scoped(key)
        if bare.upper() == name and REPORT_NOTEBOOK.startswith(scope):
            found = value
    return found
