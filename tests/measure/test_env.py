"""Peak FLOP/s lookup: whole-name matches only, no bf16 row for GPUs without bf16 tensor cores."""

import pytest

from nbhelpers.measure.env import detect_platform, table_peak_flops


@pytest.mark.parametrize(
    ("name", "peak"),
    [("NVIDIA H200", 989.4e12), ("NVIDIA L40", 181e12), ("NVIDIA L40S", 362e12), ("NVIDIA L4", 121e12),
     ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA H100 PCIe", 756.5e12)],
)  # fmt: skip
def test_table_rows_match_whole_names(name, peak):
    found = table_peak_flops(name)
    assert found is not None and found.flops_per_s == peak and found.source.startswith("table: ")


@pytest.mark.parametrize("name", ["Tesla T4", "Tesla V100-SXM2-16GB", "NVIDIA GH200 480GB", "AMD Instinct MI300X"])
def test_unknown_or_non_bf16_gpus_fall_back_to_a_measurement(name):
    assert table_peak_flops(name) is None


def test_platform_is_inherited_from_the_notebook(monkeypatch):
    monkeypatch.setenv("NBHELPERS_PLATFORM", "databricks")
    assert detect_platform() == "databricks"
    monkeypatch.delenv("NBHELPERS_PLATFORM")
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "15.4")
    assert detect_platform() == "databricks"


def test_measured_peak_is_measured_once_per_machine(monkeypatch, tmp_path):
    import nbhelpers.measure.env as env

    monkeypatch.setenv("NBHELPERS_CACHE", str(tmp_path))
    calls = []

    def fake_measure(device, dtype_name, size=0, repeats=5):
        calls.append((device, dtype_name, size))
        return env.PeakFlops(1.5e11, f"measured: {size}x{size} {dtype_name} matmul, median of {repeats}")

    monkeypatch.setattr(env, "measure_peak_flops", fake_measure)
    first = env.peak_flops("cpu", "fp32")
    second = env.peak_flops("cpu", "fp32")
    assert calls == [("cpu", "fp32", 2048)]
    assert first.flops_per_s == second.flops_per_s == 1.5e11
    assert first.source.startswith("measured: 2048x2048 fp32 matmul, median of 5 on ")
    assert second.source == first.source  # one peak, named the same by the call that measured it and every later one
