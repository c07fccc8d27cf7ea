"""The CPU step on the C library's malloc and on tcmalloc: the main command's baseline (static padding) and packed
rows, the two allocators alternating, twice. Each row's process chooses its allocator through its environment
(:data:`ROW_ALLOCATORS`); the record says which it ran on (``environment.host_allocator``) and what the host spent
(``metrics.process_page_faults``, ``process_sys_s``)."""

from __future__ import annotations

from pathlib import Path

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.host_allocator import ALLOCATOR_VARIABLE

from .suite import Suite

# The main command's workload on a CPU (planning.notebook_defaults), 12 timed steps a row
MAIN_WORKLOAD = RunConfig(model="qwen3-tiny", device="cpu", batch_size=2, max_length=512, num_samples=8, steps=12,
                          warmup=1)  # fmt: skip
ROW_ALLOCATORS = {"glibc": "glibc", "tcmalloc": "auto"}  # a row's allocator -> its NBHELPERS_HOST_ALLOCATOR
REPEATS = 2


def allocator_rows(_: Path) -> list[RunConfig]:
    """Static and packed rows on each allocator, alternating, :data:`REPEATS` times."""
    return [
        MAIN_WORKLOAD.replace(label=f"{padding} on {allocator}, repeat {repeat}", padding=padding)
        for repeat in range(1, REPEATS + 1) for padding in ("static", "packed") for allocator in ROW_ALLOCATORS
    ]  # fmt: skip


def allocator_env(config: RunConfig) -> dict[str, str]:
    """The environment that puts ``config``'s process on the allocator its label names."""
    allocator = config.label.split(" on ", 1)[1].split(",", 1)[0]
    return {ALLOCATOR_VARIABLE: ROW_ALLOCATORS[allocator]}


SUITES = (
    Suite("qwen3-tiny/host-allocator/glibc-and-tcmalloc",
          "the CPU step's speed, page faults and sys time on the C library's malloc and on tcmalloc",
          allocator_rows, parity=False, needs="tcmalloc (Debian's libtcmalloc-minimal4)", row_env=allocator_env),
)  # fmt: skip
