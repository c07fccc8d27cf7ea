"""The suite table: every suite's rows are valid configurations, filed by model and question, parity suites start
at static padding with the baseline kernels, and a rehearsal maps every row onto what a CPU runs."""

from __future__ import annotations

import pytest

from nbhelpers.bench.rehearsal import cpu_kernels, rehearsal
from nbhelpers.bench.run import suite_configs
from nbhelpers.bench.suite import LONGTAIL, Suite, write_datasets
from nbhelpers.bench.table import SUITES, suite_named, suites_under
from nbhelpers.kernels.attention import DEFAULT_ATTENTION, attention_status
from nbhelpers.kernels.registry import BASELINE_BACKEND, kernel_backend
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.model_fit import model_fit_error
from nbhelpers.models.loading import model_config
from nbhelpers.validation import ConfigError


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_builds_its_rows_named_for_its_folder(name, tmp_path):
    suite = SUITES[name]
    configs = suite_configs(suite, tmp_path)
    assert configs, f"{name} has no configurations"
    assert {c.run_name for c in configs} == {suite.folder(tmp_path).name}
    labels = [c.label for c in configs]
    assert all(labels) and len(set(labels)) == len(labels), f"{name}: labels must name each row once"
    if suite.parity:
        first = configs[0]
        assert (first.kernels, first.padding) == (BASELINE_BACKEND, "static"), f"{name}: the reference comes first"
    assert not list(tmp_path.iterdir()), "building a suite's rows writes nothing"


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_row_rehearses_on_what_a_cpu_runs(name, tmp_path):
    for config in suite_configs(SUITES[name], tmp_path, rehearse=True):
        assert config.device == "cpu" and config.attn_implementation == DEFAULT_ATTENTION
        assert not attention_status(config.attn_implementation, "cpu")
        assert all(not kernel_backend(part).status("cpu") for part in kernel_backend(config.kernels).components)
        assert config.max_length <= 64 and config.num_samples <= 8 and not config.profile
        assert model_fit_error(config, model_config(config.model)) is None  # k and rank fit the small preset


def test_names_are_folders_then_a_file_and_unknown_names_list_the_table():
    with pytest.raises(ConfigError, match="suite"):
        Suite("no-folder", "?", lambda _: [])
    with pytest.raises(ConfigError, match="measure"):
        Suite("a/b", "?", lambda _: [], measure="twice")
    with pytest.raises(ConfigError, match="qwen3-tiny/bench-smoke/static-and-packed"):
        suite_named("qwen3-tiny/nothing")
    smoke = suites_under("qwen3-tiny/bench-smoke")
    assert [s.name for s in smoke] == ["qwen3-tiny/bench-smoke/static-and-packed"]
    assert suites_under("qwen3-tiny/bench-smoke/static-and-packed") == smoke
    with pytest.raises(ConfigError, match="a folder of suites"):
        suites_under("qwen3-tiny/bench")  # a prefix that is no folder


def test_cpu_kernels_keep_the_parts_a_cpu_runs():
    assert cpu_kernels("eager") == BASELINE_BACKEND
    assert cpu_kernels("liger+compile") == "liger+compile"
    assert cpu_kernels("float8") == BASELINE_BACKEND  # float8 matmuls need a GPU
    assert all(not kernel_backend(p).status("cpu") for p in kernel_backend(cpu_kernels("liger+float8")).components)


def test_a_rehearsal_keeps_the_rows_strategy_adapter_and_gpus():
    config = RunConfig(model="qwen3.8-27b", adapter="lora", padding="token_budget", token_budget=8192, batch_size=4,
                       max_length=2048, activation_checkpointing="every_k", checkpoint_every=3, timing="epoch")
    cpu = rehearsal(config)
    assert cpu.model == "qwen3.5-tiny" and cpu.adapter == "lora" and cpu.padding == "token_budget"
    assert cpu.token_budget >= cpu.max_length and cpu.activation_checkpointing == "every_k"
    fsdp = rehearsal(RunConfig(model="qwen3-8b", gpus=2, sharding="fsdp2", dtype="bf16"))
    assert (fsdp.gpus, fsdp.sharding, fsdp.dtype, fsdp.model) == (2, "fsdp2", "auto", "qwen3-tiny")


def test_the_long_tailed_set_is_written_once_into_the_suite_folder(tmp_path):
    suite = suite_named("qwen3-1.7b/padding-strategies-epoch/longtail")
    assert all(c.dataset == str(suite.folder(tmp_path) / LONGTAIL) for c in suite.configurations(tmp_path))
    write_datasets(suite, tmp_path)
    written = suite.folder(tmp_path) / LONGTAIL
    first = written.read_bytes()
    write_datasets(suite, tmp_path)
    assert written.read_bytes() == first and len(first.splitlines()) == 400
