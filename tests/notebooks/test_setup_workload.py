"""Each measuring notebook's set-up call: its facade's ``setup_workload(globals())`` makes the RunConfig its
parameters name, the same one the notebook once built inline, and refuses a bad value before any work, naming
the notebook parameter and what is allowed."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest

from nbhelpers.analysis import baseline, scaling
from nbhelpers.data.loading import DataParams
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.workload import WORKLOAD_FIELDS, check_renamed, workload_from
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.planning.kernel_grid import parse_switches
from nbhelpers.validation import ConfigError
from nbhelpers.workbook import kernel_swap, padding_study

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
FACADES: dict[str, ModuleType] = {
    "01_baseline_profile": baseline, "02_kernel_swap_in": kernel_swap, "03_dynamic_padding": padding_study,
    "05_several_gpus": scaling,
}  # fmt: skip
# Parameters that name a RunConfig field but list values to plan: the notebook's grid, not its base workload.
GRID = {"02_kernel_swap_in": {"KERNELS", "LIGER_KERNELS"},
        "03_dynamic_padding": {"KERNELS", "ATTENTION", "LIGER_KERNELS"}}  # fmt: skip
by_notebook = pytest.mark.parametrize("notebook", sorted(FACADES))


def defaults(notebook: str) -> dict[str, Any]:
    """The notebook's parameters cell, as the values it assigns (what ``globals()`` holds after it)."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    return {node.target.id: ast.literal_eval(node.value) for node in ast.parse(cell.source).body}  # type: ignore[union-attr]


def old_inline_config(notebook: str, p: dict[str, Any]) -> RunConfig:
    """The RunConfig each notebook built inline before its set-up call (the reference the call must match)."""
    data = DataParams(p["DATASET"], p["DATA_FORMAT"], p["PROMPT_FIELD"], p["RESPONSE_FIELD"], p["PROMPT_TEMPLATE"],
                      p["USE_CHAT_TEMPLATE"])  # fmt: skip
    adapter = AdapterSettings(p["ADAPTER"], p["LORA_RANK"], p["LORA_ALPHA"], p["LORA_TARGETS"],
                              frozen_base=p["FROZEN_BASE"]).config_fields()  # fmt: skip
    common = dict(run_name=p["RUN_NAME"], model=p["MODEL"], **data.config_fields(), batch_size=p["BATCH_SIZE"],
                  max_length=p["MAX_LENGTH"], num_samples=p["NUM_SAMPLES"], steps=p["STEPS"], warmup=p["WARMUP"],
                  activation_checkpointing=p["ACTIVATION_CHECKPOINTING"], dtype=p["DTYPE"], **adapter,
                  gpu_memory_gib=p["GPU_MEMORY_GIB"])  # fmt: skip
    if notebook == "01_baseline_profile":
        return baseline.baseline_config(
            p["RUN_NAME"], p["MODEL"], p["DATASET"], p["BATCH_SIZE"], p["MAX_LENGTH"], p["PADDING"], p["STEPS"],
            p["WARMUP"], num_samples=p["NUM_SAMPLES"], timing=p["TIMING"], dtype=p["DTYPE"],
            activation_checkpointing=p["ACTIVATION_CHECKPOINTING"], **data.kwargs(), **adapter,
        ).replace(gpu_memory_gib=p["GPU_MEMORY_GIB"])  # fmt: skip
    if notebook == "02_kernel_swap_in":
        return RunConfig(**common, padding=p["PADDING"], timing=p["TIMING"], profile=True)
    if notebook == "03_dynamic_padding":
        return RunConfig(**common, token_budget=p["TOKEN_BUDGET"], pad_to_multiple_of=p["PAD_TO_MULTIPLE_OF"],
                         num_buckets=p["NUM_BUCKETS"], timing=p["TIMING"], profile=p["PROFILE"])  # fmt: skip
    return RunConfig(**common, device=p["DEVICE"], padding=p["PADDING"], attn_implementation=p["ATTENTION"],
                     kernels=p["KERNELS"], liger_kernels=parse_switches(p["LIGER_KERNELS"]))  # fmt: skip


@by_notebook
def test_the_set_up_call_makes_the_config_the_notebook_built_inline(notebook):
    parameters = defaults(notebook)
    changed = parameters | {"BATCH_SIZE": 3, "MAX_LENGTH": 96, "ADAPTER": "lora", "LORA_RANK": 4,
                            "FROZEN_BASE": "float8", "GPU_MEMORY_GIB": 24.0}  # fmt: skip
    for values in (parameters, changed):
        workload = FACADES[notebook].setup_workload(values)
        assert workload.config == old_inline_config(notebook, values)
        assert workload.data.dataset == values["DATASET"] and workload.data.kwargs()["data_format"] == "auto"
        assert workload.adapter == AdapterSettings(values["ADAPTER"], values["LORA_RANK"], values["LORA_ALPHA"],
                                                   values["LORA_TARGETS"], frozen_base=values["FROZEN_BASE"])  # fmt: skip
        assert workload.config.gpu_memory_gib == values["GPU_MEMORY_GIB"]


@by_notebook
def test_every_workload_parameter_of_the_notebook_reaches_its_config(notebook):
    names = set(FACADES[notebook].WORKLOAD)
    declared = set(defaults(notebook))
    assert names <= declared, sorted(names - declared)
    assert {n for n in declared if n in WORKLOAD_FIELDS} == names | GRID.get(notebook, set())


@by_notebook
@pytest.mark.parametrize(
    ("parameter", "value", "allowed"),
    [
        ("BATCH_SIZE", 0, "BATCH_SIZE must be an integer from 1 to 4096"),
        ("MAX_LENGTH", "long", "MAX_LENGTH must be an integer from 8"),
        ("DTYPE", "fp8", "DTYPE must be one of 'auto'"),
        ("LORA_RANK", 0, "LORA_RANK must be an integer from 1"),
        ("DATA_FORMAT", "csv", "DATA_FORMAT must be one of"),
        ("RUN_NAME", "../up", "RUN_NAME must be 1-100 letters"),
    ],
)  # fmt: skip
def test_a_bad_parameter_is_named_with_what_is_allowed_before_any_work(notebook, parameter, value, allowed, runs_root):
    with pytest.raises(ConfigError, match=allowed) as refused:
        FACADES[notebook].setup_workload(defaults(notebook) | {parameter: value})
    assert refused.value.parameter == parameter and refused.value.value == value
    assert not any(runs_root.iterdir())  # no run folder, no record: nothing ran


def test_the_grid_parameters_are_named_too():
    with pytest.raises(ConfigError, match="PADDING must be one of"):
        scaling.setup_workload(defaults("05_several_gpus") | {"PADDING": "tight"})
    with pytest.raises(ConfigError, match=r"LIGER_KERNELS='rope,turbo' is not allowed.*unknown: turbo"):
        scaling.setup_workload(defaults("05_several_gpus") | {"LIGER_KERNELS": "rope,turbo"})
    with pytest.raises(ConfigError, match="TOKEN_BUDGET must be 0 or at least max_length"):
        padding_study.setup_workload(defaults("03_dynamic_padding") | {"TOKEN_BUDGET": 16})
    with pytest.raises(ConfigError, match="KERNELS must be one of"):
        scaling.setup_workload(defaults("05_several_gpus") | {"KERNELS": "eager,liger"})


@by_notebook
def test_the_old_name_of_kernels_is_refused_with_its_new_one(notebook):
    with pytest.raises(ConfigError, match=r"BACKENDS='eager,liger' is not allowed: BACKENDS must be passed as KERNELS"):
        FACADES[notebook].setup_workload(defaults(notebook) | {"BACKENDS": "eager,liger"})
    check_renamed({"KERNELS": "eager"})  # the name now: nothing refused


def test_a_missing_parameter_and_a_fixed_field_keep_their_names():
    with pytest.raises(KeyError, match="BATCH_SIZE"):
        workload_from({"RUN_NAME": "r"}, ("RUN_NAME", "BATCH_SIZE"))
    with pytest.raises(ConfigError, match="^steps=0 is not allowed"):
        workload_from({"RUN_NAME": "r"}, ("RUN_NAME",), steps=0)
