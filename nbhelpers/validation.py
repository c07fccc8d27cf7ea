"""Validation shared by every layer: a refused value raises :class:`ConfigError` naming the parameter.

The lowest layer of the package: it imports nothing from nbhelpers, so settings objects anywhere
(RunConfig, the padding settings, the tables) validate the same way with the same messages.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A parameter with a value outside what is allowed."""

    def __init__(self, parameter: str, value: Any, allowed: str) -> None:
        self.parameter = parameter
        self.value = value
        self.allowed = allowed
        super().__init__(f"{parameter}={value!r} is not allowed: {parameter} must be {allowed}")


def check_int(name: str, value: Any, low: int, high: int) -> None:
    """An int (not a bool) from ``low`` to ``high``, else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(name, value, f"an integer from {low} to {high}")


def check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    """One of ``choices``, else ConfigError listing them."""
    if value not in choices:
        raise ConfigError(name, value, "one of " + ", ".join(repr(c) for c in choices))


def check_text(name: str, value: Any) -> None:
    """A non-empty string, else ConfigError."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, value, "a non-empty string")


RUN_NAME_RULE = "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit (a folder under runs/)"
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_run_name(value: Any, parameter: str = "RUN_NAME") -> str:
    """A run name that stays one folder inside the runs folder (no '/', '..', newline); else ConfigError."""
    if not isinstance(value, str) or not _RUN_NAME.fullmatch(value):
        raise ConfigError(parameter, value, RUN_NAME_RULE)
    return value


def check_timeout(value: Any, parameter: str = "timeout") -> int | None:
    """None (no limit) or a whole number of seconds >= 1 (2.0 becomes 2); 0, negatives, 2.5, inf are refused."""
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(parameter, value, "a whole number of seconds, at least 1 (leave it out for no limit)")
    return value


def nearest(name: str, known: Sequence[str]) -> str:
    """' (nearest: 'x')' for the closest of ``known`` to ``name``, or '' when none is close."""
    match = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=1, cutoff=0.5)
    if not match:
        return ""
    original = next(k for k in known if k.lower() == match[0])
    return f" (nearest preset: {original!r})"


def looks_like_path(name: str) -> bool:
    """A name that can only mean a local file or folder: starts with / . ~, holds a backslash or 2+ '/'."""
    return name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1


_HUB_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def _offline() -> bool:
    return any(
        os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _in_hub_cache(repo_id: str, repo_type: str) -> bool:
    try:
        from huggingface_hub import scan_cache_dir

        return any(r.repo_id == repo_id and r.repo_type == repo_type for r in scan_cache_dir().repos)
    except Exception:  # noqa: BLE001 - no cache folder, no huggingface_hub: not cached
        return False


def hub_lookup(repo_id: str, repo_type: str, timeout_s: float = 5.0) -> str:
    """'' when the hub answers that ``repo_id`` exists, else why not ('not found' or the network error)."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError
    except ImportError:
        return "huggingface_hub is not installed"
    try:
        HfApi().repo_info(repo_id, repo_type=repo_type, timeout=timeout_s)
    except RepositoryNotFoundError:
        return "not found on the hub"
    except Exception as error:  # noqa: BLE001 - gated repos, timeouts, no network: say which
        if "gated" in type(error).__name__.lower() or "401" in str(error) or "403" in str(error):
            return ""  # exists; access is the loader's business
        return f"the hub did not answer within {timeout_s:g} s ({type(error).__name__})"
    return ""


def check_hub_name(
    parameter: str, name: str, presets: Sequence[str] = (), repo_type: str = "model", timeout_s: float = 5.0
) -> str:
    """A name that is no preset and no local path must be a hub id the hub (or its cache) knows.

    Fails at once, without the network, for a path-like name that does not exist and for an uncached id
    when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE`` / ``HF_DATASETS_OFFLINE``) is set; otherwise asks
    the hub once with a short timeout. The error says what was looked for and the nearest preset.
    """
    allowed = (f"a preset ({', '.join(presets)}), " if presets else "") + "an existing local path or a hub id"
    hint = nearest(name, presets)
    if looks_like_path(name) or not _HUB_ID.fullmatch(name):
        raise ConfigError(parameter, name, f"{allowed}; no such file or folder {name!r}{hint}")
    if hint and "/" not in name:  # 'qwen3-tinny': a typo of a preset, not a namespace-less hub id
        raise ConfigError(parameter, name, f"{allowed}{hint}")
    if _in_hub_cache(name, repo_type):
        return name
    if _offline():
        raise ConfigError(parameter, name, f"{allowed}; offline (HF_HUB_OFFLINE) and not in the hub cache{hint}")
    problem = hub_lookup(name, repo_type, timeout_s)
    if problem:
        raise ConfigError(parameter, name, f"{allowed}; looked for {repo_type} {name!r} on the hub: {problem}{hint}")
    return name


def output_target(path: str | os.PathLike[str], parameter: str) -> Path:
    """The regular file that writing ``path`` replaces: the path itself, or a symbolic link's target (written
    through: the link stays). ValueError naming ``parameter`` when the path (or the link's target) exists and is no
    regular file (a folder, a device, a pipe), when a link points into a folder that does not exist, or when a file
    stands where its folder would be. Callers check before any work and write to the returned path."""
    given = Path(path)
    target = given.resolve() if given.is_symlink() else given
    if target.exists() and not target.is_file():
        raise ConfigError(parameter, str(given), "a regular file (or a new name): this exists and is not one")
    if given.is_symlink() and not target.parent.is_dir():
        raise ConfigError(parameter, str(given), f"a link into an existing folder; it points to {target}")
    for folder in target.parents:
        if folder.exists():
            if not folder.is_dir():
                raise ConfigError(parameter, str(given), f"a path whose folders are folders; {folder} is a file")
            break
    return target
