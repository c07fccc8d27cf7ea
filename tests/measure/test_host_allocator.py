"""The host allocator of a CPU configuration's process: tcmalloc preloaded where found, the user's choice kept."""

import mmap
import subprocess
import sys

import pytest

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.host_allocator import (
    ALLOCATOR_VARIABLE,
    allocator_in_use,
    allocator_of,
    find_tcmalloc,
    host_allocator_env,
    host_usage,
)

LIBRARY = "libtcmalloc_minimal.so.4"


@pytest.fixture
def folder(tmp_path):
    (tmp_path / LIBRARY).write_bytes(b"")  # a stand-in: only its path is used here
    return str(tmp_path)


def test_finds_tcmalloc_in_the_library_folders(folder, tmp_path):
    assert find_tcmalloc([str(tmp_path / "empty"), folder]) == f"{folder}/{LIBRARY}"
    assert find_tcmalloc([str(tmp_path / "empty")]) is None


def test_preloads_tcmalloc_before_what_the_user_preloads(folder):
    added = host_allocator_env({}, [folder])
    assert added["LD_PRELOAD"] == f"{folder}/{LIBRARY}"
    assert int(added["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) >= 2**40  # no report on stderr per large tensor
    added = host_allocator_env({"LD_PRELOAD": "/opt/mine.so", "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": "5"}, [folder])
    assert added == {"LD_PRELOAD": f"{folder}/{LIBRARY} /opt/mine.so"}  # the user's threshold is kept


def test_keeps_a_preloaded_allocator_and_the_users_choice(folder, tmp_path):
    assert host_allocator_env({"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"}, [folder]) == {}  # Colab's own
    assert host_allocator_env({"LD_PRELOAD": "libjemalloc.so.2"}, [folder]) == {}
    assert host_allocator_env({ALLOCATOR_VARIABLE: "glibc"}, [folder]) == {}
    assert host_allocator_env({}, [str(tmp_path / "empty")]) == {}  # none on this machine: the system's malloc
    mine = tmp_path / "libmine.so"
    mine.write_bytes(b"")
    assert host_allocator_env({ALLOCATOR_VARIABLE: str(mine)}, [folder])["LD_PRELOAD"] == str(mine)


def test_a_choice_that_is_neither_names_the_variable_and_what_it_allows(folder):
    with pytest.raises(ValueError, match=rf"{ALLOCATOR_VARIABLE}='tcmallc' is neither auto nor glibc nor"):
        host_allocator_env({ALLOCATOR_VARIABLE: "tcmallc"}, [folder])


def test_names_the_allocator_a_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10\n")
    assert allocator_in_use(maps) == "tcmalloc"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert allocator_in_use(maps) == "system"
    assert allocator_in_use(tmp_path / "missing") == "system"
    assert allocator_of("") == ""


def _allocator_of_child(env):
    code = "from nbhelpers.measure.host_allocator import allocator_in_use; print(allocator_in_use())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_a_cpu_configurations_process_runs_on_tcmalloc(monkeypatch):
    from nbhelpers.measure import runner

    if find_tcmalloc() is None:
        pytest.skip("no tcmalloc on this machine (scripts/setup.sh installs Debian's libtcmalloc-minimal4 as root)")
    monkeypatch.setattr(runner, "_cuda_available", lambda: False)
    monkeypatch.delenv(ALLOCATOR_VARIABLE, raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert _allocator_of_child(runner._child_env(RunConfig(device="cpu"), None)).strip() == "tcmalloc"
    glibc = {ALLOCATOR_VARIABLE: "glibc"}  # a row's own environment (a suite's row_env) chooses too
    assert _allocator_of_child(runner._child_env(RunConfig(device="cpu"), glibc)).strip() == "system"
    monkeypatch.setenv(ALLOCATOR_VARIABLE, "glibc")
    assert _allocator_of_child(runner._child_env(RunConfig(device="cpu"), None)).strip() == "system"


def test_the_host_usage_of_a_process_grows_with_the_pages_it_touches():
    before = host_usage()
    assert set(before) == {"process_page_faults", "process_sys_s", "process_user_s"}
    size = 64 * 2**20  # a fresh anonymous mapping (whatever allocator this process runs on), in small pages
    pages = mmap.mmap(-1, size)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        pages.madvise(mmap.MADV_NOHUGEPAGE)
    for offset in range(0, size, 4096):  # each page zeroed by the kernel when first written
        pages[offset] = 1
    after = host_usage()
    pages.close()
    assert after["process_page_faults"] - before["process_page_faults"] >= 64 * 2**20 // 4096 // 2
    assert after["process_user_s"] >= before["process_user_s"] and after["process_sys_s"] >= before["process_sys_s"]
