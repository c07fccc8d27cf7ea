"""What this machine has: the installed version of a distribution, and the device a run asks for."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from typing import Any


def package_versions(names: Iterable[str], missing: str | None = "not installed") -> dict[str, Any]:
    """Installed version of each distribution (importlib.metadata); ``missing`` where one is not installed."""
    versions: dict[str, Any] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = missing
    return versions


def resolve_device(requested: str = "auto") -> str:
    """'cuda' or 'cpu'; asking for cuda without a GPU is an error that says so."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no GPU: device='cuda' was asked for but torch.cuda.is_available() is False")
    return requested
