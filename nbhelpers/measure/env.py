"""Where the code runs: device, notebook platform, package versions, and the device's peak FLOP/s."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

from nbhelpers.machine import package_versions, resolve_device

from .host_allocator import allocator_in_use

# Dense (no sparsity) bf16 tensor-core peaks with fp32 accumulation, from the vendors' datasheets, FLOP/s.
# GPUs without bf16 tensor cores (T4, V100) are left out: their peak is measured instead.
PEAK_BF16_FLOPS_TABLE: dict[str, float] = {
    "H200": 989.4e12,
    "H100 SXM": 989.4e12,
    "H100 PCIe": 756.5e12,
    "H100 NVL": 835.5e12,
    "H100": 989.4e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "A10G": 70e12,
    "A10": 125e12,
    "RTX 4090": 165.2e12,
    "RTX 3090": 35.6e12,
}
PACKAGES = ("torch", "transformers", "liger-kernel", "triton", "numpy", "pandas", "tokenizers")


@dataclass(frozen=True)
class PeakFlops:
    """A peak FLOP/s figure and where it came from (a named table row or a measurement)."""

    flops_per_s: float
    source: str


ALLOC_CONF_VARIABLE = "PYTORCH_CUDA_ALLOC_CONF"
# The CUDA allocator of every configuration's process, unless the user set one: segments that grow in place instead
# of new blocks, so a step whose shapes change (packed and budgeted batches) does not strand reserved memory. Without
# it an 8B LoRA step under a 48 GiB cap ran out of memory with 6 GiB reserved and unused (H100, 2026-12-06).
MEASURING_ALLOC_CONF = "expandable_segments:True"


def detect_platform() -> str:
    """'colab', 'databricks', 'jupyter' (JupyterLab / Notebook kernel) or 'terminal'.

    A runner's worker process inherits its notebook's platform through ``NBHELPERS_PLATFORM``.
    """
    if os.environ.get("NBHELPERS_PLATFORM"):
        return os.environ["NBHELPERS_PLATFORM"]
    if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
        return "colab"
    if "DATABRICKS_RUNTIME_VERSION" in os.environ:
        return "databricks"
    if "ipykernel" in sys.modules:
        return "jupyter"
    return "terminal"


def sync_device(device: str) -> None:
    """Wait for the device's queued work (CUDA); a no-op elsewhere. Every clock read of a measurement follows one."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def device_properties(device: str) -> dict[str, Any]:
    """Name and size of the device that runs the step."""
    import torch

    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return {
            "device_type": "cuda",
            "device_name": props.name,
            "gpu_count": torch.cuda.device_count(),
            "sm_count": props.multi_processor_count,
            "device_memory_gib": round(props.total_memory / 2**30, 1),
            "cuda": torch.version.cuda,
            "cuda_alloc_conf": os.environ.get(ALLOC_CONF_VARIABLE, ""),
        }
    return {
        "device_type": "cpu",
        "device_name": f"CPU {platform.processor() or platform.machine()} x{os.cpu_count()}",
        "cpu_threads": torch.get_num_threads(),
        "host_allocator": allocator_in_use(),
    }


def environment(device: str) -> dict[str, Any]:
    """Everything a record needs to say where it was measured."""
    return {
        **device_properties(device),
        "hostname": socket.gethostname(),
        "platform": detect_platform(),
        "python": platform.python_version(),
        "os": platform.platform(),
        **package_versions(PACKAGES),
    }


def safe_environment(requested_device: str) -> dict[str, Any]:
    """The environment for a record, also when the device cannot be used (failed configurations)."""
    try:
        return environment(resolve_device(requested_device))
    except Exception as error:  # noqa: BLE001 - a failed record still says where it ran
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return environment(device) | {"environment_note": f"device {requested_device!r} unusable: {error}"}


def table_peak_flops(device_name: str) -> PeakFlops | None:
    """The datasheet bf16 dense peak for a GPU name, or None when the table has no row for it."""
    import re

    for key in sorted(PEAK_BF16_FLOPS_TABLE, key=len, reverse=True):
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", device_name, flags=re.IGNORECASE):
            return PeakFlops(PEAK_BF16_FLOPS_TABLE[key], f"table: {key} bf16 dense datasheet peak")
    return None


def measure_peak_flops(device: str, dtype_name: str = "bf16", size: int = 0, repeats: int = 5) -> PeakFlops:
    """Measure the peak with a large square matmul (median of ``repeats`` after a warm-up)."""
    import torch

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    if dtype_name != "bf16" and device == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        dtype_name = "fp32 (TF32 matmuls allowed)"
    size = size or (8192 if device == "cuda" else 1024)
    generator = torch.Generator(device=device).manual_seed(0)  # its own: the seeded global RNG stays untouched
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    times = []
    for i in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - start)
    times.sort()
    flops = 2 * size**3 / times[len(times) // 2]
    return PeakFlops(flops, f"measured: {size}x{size} {dtype_name} matmul, median of {repeats}")


def _peak_cache_path() -> Any:
    from pathlib import Path

    root = Path(os.environ.get("NBHELPERS_CACHE", Path.home() / ".cache" / "nbhelpers"))
    return root / "measured_peak_flops.json"


def cached_measured_peak(device: str, dtype_name: str) -> PeakFlops:
    """A measured peak, measured once per machine, device and dtype and then reused from disk.

    Every record of a machine then divides by the same peak, so MFU compares across records (a fresh
    measurement in each process would move with whatever else the machine is doing).
    """
    import json

    name = device_properties(device)["device_name"]
    key = f"{socket.gethostname()}|{name}|{dtype_name}"
    path = _peak_cache_path()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if key not in cached:
        peak = measure_peak_flops(device, dtype_name, size=2048 if device == "cpu" else 0)
        cached[key] = {"flops_per_s": peak.flops_per_s, "source": peak.source, "when": time.strftime("%Y-%m-%d %H:%M")}
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".tmp{os.getpid()}")
        staging.write_text(json.dumps(cached, indent=1))
        staging.replace(path)
    entry = cached[key]  # the measuring call names it as every later one does: one peak, one name
    return PeakFlops(float(entry["flops_per_s"]), f"{entry['source']} on {entry['when']}")


def peak_flops(device: str, compute_dtype: str) -> PeakFlops:
    """The peak used for MFU: the datasheet row for a known GPU, else a matmul measured once per machine."""
    if device == "cuda":
        import torch

        known = table_peak_flops(torch.cuda.get_device_name(0))
        if known is not None and compute_dtype != "fp32":
            return known
    return cached_measured_peak(device, "fp32" if compute_dtype == "fp32" else "bf16")
