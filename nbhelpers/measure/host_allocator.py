"""The host allocator of a configuration's process on a CPU: tcmalloc where the machine has it, preloaded.

glibc's malloc serves every block over its mmap threshold (at most 32 MiB) with fresh pages from the kernel and gives
them back on free, so each step zeroes the pages of its large tensors again: qwen3-tiny's fp32 logits at 2 x 512
tokens are 0.6 GB. On a 2-core CPU, 12 steps took 9.2 million page faults and a sys time near their own;
tcmalloc keeps freed blocks for the next step. Colab preloads tcmalloc itself; a process that already preloads an
allocator keeps it. ``NBHELPERS_HOST_ALLOCATOR`` chooses: ``auto`` (the default: tcmalloc where found), ``glibc``
(the system's malloc), or the path of an allocator library to preload.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from pathlib import Path

ALLOCATOR_VARIABLE = "NBHELPERS_HOST_ALLOCATOR"
ALLOCATOR_CHOICES = ("auto", "glibc")  # besides the path of a library
TCMALLOC_LIBRARIES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")  # Debian's libtcmalloc-minimal4; Colab's
LIBRARY_FOLDERS = (
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
)  # fmt: skip
ALLOCATOR_NAMES = ("tcmalloc", "jemalloc", "mimalloc")  # the allocators a preloaded library's name is read for
# tcmalloc reports every allocation over 1 GiB on stderr; a configuration's stderr is its failure's reason
QUIET_LARGE_ALLOCATIONS = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(2**40)}


def find_tcmalloc(folders: Sequence[str] = LIBRARY_FOLDERS) -> str | None:
    """The path of the first tcmalloc library in ``folders`` (None where there is none, or off Linux)."""
    if platform.system() != "Linux":
        return None
    for folder in folders:
        for name in TCMALLOC_LIBRARIES:
            if (path := Path(folder) / name).is_file():
                return str(path)
    return None


def allocator_of(libraries: str) -> str:
    """The allocator named by a list of libraries (``LD_PRELOAD``'s value, or a process's mapped files): "" if none."""
    lowered = libraries.lower()
    return next((name for name in ALLOCATOR_NAMES if name in lowered), "")


def host_allocator_env(env: Mapping[str, str], folders: Sequence[str] = LIBRARY_FOLDERS) -> dict[str, str]:
    """What to add to a CPU configuration's environment ``env`` so that its process runs on tcmalloc: nothing where
    ``env`` preloads an allocator already, chooses ``glibc``, or the machine has no tcmalloc.

    Raises ValueError, naming the variable and what it allows, for a choice that is neither a choice nor a file."""
    choice = env.get(ALLOCATOR_VARIABLE, "").strip() or "auto"
    if choice == "glibc" or allocator_of(env.get("LD_PRELOAD", "")):
        return {}
    if choice == "auto":
        library = find_tcmalloc(folders)
    elif Path(choice).is_file():
        library = choice
    else:
        raise ValueError(
            f"{ALLOCATOR_VARIABLE}={choice!r} is neither {' nor '.join(ALLOCATOR_CHOICES)} nor an allocator library's "
            "file (for example /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4)"
        )
    if library is None:
        return {}
    preload = " ".join(part for part in (library, env.get("LD_PRELOAD", "")) if part)
    return {"LD_PRELOAD": preload} | {name: value for name, value in QUIET_LARGE_ALLOCATIONS.items() if name not in env}


def allocator_in_use(maps: Path = Path("/proc/self/maps")) -> str:
    """The allocator this process runs on, read from its mapped libraries: "tcmalloc", "jemalloc", "mimalloc", or
    "system" (the C library's malloc; also where the maps cannot be read)."""
    try:
        return allocator_of(maps.read_text(errors="replace")) or "system"
    except OSError:
        return "system"


def host_usage() -> dict[str, float]:
    """What the host spent on this process so far (a forked process counts from its fork): its minor page faults
    (each a page the kernel zeroed or mapped for it), its time in the kernel and in user code; empty off Unix."""
    try:
        import resource
    except ImportError:
        return {}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "process_page_faults": usage.ru_minflt,
        "process_sys_s": round(usage.ru_stime, 3),
        "process_user_s": round(usage.ru_utime, 3),
    }


__all__ = [
    "ALLOCATOR_CHOICES", "ALLOCATOR_VARIABLE", "allocator_in_use", "allocator_of", "find_tcmalloc",
    "host_allocator_env", "host_usage",
]  # fmt: skip
