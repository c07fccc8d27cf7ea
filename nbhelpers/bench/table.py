"""The suite table: every benchmark suite by name, in the order ``nbhelpers bench --list`` shows them.

Adding a suite is one ``Suite`` entry in the module of its model family or question (``dense_grid``,
``dense_entries``, ``dense_peers``, ``hybrid``, ``hybrid_peers``, ``frozen_bases``, ``host_allocators``); its name says
where its records are filed.
"""

from __future__ import annotations

from nbhelpers.validation import ConfigError

from .dense_entries import SUITES as DENSE_ENTRIES
from .dense_grid import SUITES as DENSE_GRID
from .dense_peers import SUITES as DENSE_PEERS
from .frozen_bases import SUITES as FROZEN_BASES
from .host_allocators import SUITES as HOST_ALLOCATORS
from .hybrid import SUITES as HYBRID
from .hybrid_peers import SUITES as HYBRID_PEERS
from .suite import Suite

SUITES: dict[str, Suite] = {
    suite.name: suite
    for group in (DENSE_GRID, DENSE_ENTRIES, DENSE_PEERS, HYBRID, HYBRID_PEERS, FROZEN_BASES, HOST_ALLOCATORS)
    for suite in group
}


def suite_named(name: str) -> Suite:
    """The suite called ``name``; ConfigError listing the names when there is none."""
    if name not in SUITES:
        raise ConfigError("suite", name, "one of " + ", ".join(SUITES))
    return SUITES[name]


def suites_under(prefix: str) -> list[Suite]:
    """The suite called ``prefix``, else every suite filed under the folder ``prefix`` (ConfigError: none)."""
    if prefix in SUITES:
        return [SUITES[prefix]]
    found = [s for name, s in SUITES.items() if name.startswith(prefix.rstrip("/") + "/")]
    if not found:
        raise ConfigError("suite", prefix, "a suite's name or a folder of suites, e.g. " + next(iter(SUITES)))
    return found
