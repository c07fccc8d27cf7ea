"""The planning layer: the one comma-list parser, what can run on this device and why not, the kernel and padding
grids, the tuner's candidates, and that the notebooks, the sweep and the tuner take them from here."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import nbformat
import pytest
from test_architecture import LAYERS, layer_of, module_name, package_of

from nbhelpers.data.strategies import PADDING_STRATEGIES, PaddingSettings
from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS
from nbhelpers.kernels.float8 import float8_status
from nbhelpers.kernels.liger import LIGER_KERNELS
from nbhelpers.kernels.registry import KERNEL_BACKENDS
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.memory_plan import cap_plan_refusal, settings_from_config
from nbhelpers.models.families import model_shape
from nbhelpers.models.loading import model_config
from nbhelpers.planning import candidates, device
from nbhelpers.planning.candidates import build_space, parse_budgets
from nbhelpers.planning.device import (
    CPU_SWITCHES_REASON,
    backend_refusal,
    cpu_skipped_switches,
    family_refusal,
    refusal,
    skip_broken,
    switches_here,
)
from nbhelpers.planning.kernel_grid import backend_configs, cpu_skipped_kernels, cpu_unsupported_configs, kernel_grid
from nbhelpers.planning.lists import parse_list
from nbhelpers.planning.padding_grid import strategy_configs
from nbhelpers.planning.sweep_grid import find_notebooks, grid_points, notebook_parameters, parameters_for, parse_grid
from nbhelpers.validation import ConfigError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NO_LIGER = "missing package: liger-kernel is not installed"

# -- the one list parser -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (" static, packed,static ", ("static", "packed")),  # spaces dropped, each name once, order kept
        ("static,,packed,", ("static", "packed")),
        ("[static,packed]", ("static", "packed")),  # a bracketed value, as a sweep grid writes a list
        (["packed", " static"], ("packed", "static")),
        (("static",), ("static",)),
    ],
)
def test_the_list_parser_reads_comma_text_brackets_and_sequences(value, expected):
    assert parse_list(value, PADDING_STRATEGIES, "STRATEGIES") == expected


def test_the_list_parser_names_the_parameter_what_is_allowed_and_what_it_does_not_know():
    with pytest.raises(ConfigError, match="STRATEGIES='static,ragged'") as caught:
        parse_list("static,ragged", PADDING_STRATEGIES, "STRATEGIES")
    error = caught.value
    assert error.parameter == "STRATEGIES" and error.value == "static,ragged"
    assert error.allowed.startswith("a comma-separated list drawn from " + ", ".join(PADDING_STRATEGIES))
    assert error.allowed.endswith("(unknown: ragged)")
    for empty in ("", " , ", [], "[]"):
        with pytest.raises(ConfigError, match="ATTENTION"):
            parse_list(empty, ATTENTION_IMPLEMENTATIONS, "ATTENTION")
        assert parse_list(empty, LIGER_KERNELS, "LIGER_KERNELS", empty=True) == ()
    with pytest.raises(ConfigError, match="'' or a comma-separated list"):
        parse_list("rope,warp", LIGER_KERNELS, "LIGER_KERNELS", empty=True)
    for not_a_list in (None, 3, {"a": 1}):
        with pytest.raises(ConfigError, match="notebooks"):
            parse_list(not_a_list, None, "notebooks")
    with pytest.raises(ConfigError, match=r"unknown: \[rope"):
        parse_list("[rope,swiglu],[rms_norm]", LIGER_KERNELS, "LIGER_KERNELS")  # two lists are no one list
    assert parse_list("01, 03", None, "notebooks") == ("01", "03")  # no allowed names: any name


def test_every_comma_list_above_planning_goes_through_the_one_parser():
    """No module that may import planning splits a comma list itself (those below it cannot import it)."""
    above = {package for members in LAYERS[layer_of("planning") :] for package in members} - {""}
    splitters = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "nbhelpers").rglob("*.py"))
        if package_of(module_name(path)) in above and path.name != "lists.py"
        and '.split(",")' in path.read_text(encoding="utf-8")
    ]  # fmt: skip
    assert splitters == []


def test_the_tuners_lists_use_the_one_parser():
    assert parse_budgets("0, 16384,0") == [0, 16384] and parse_budgets(256) == [256] and parse_budgets([0, 8]) == [0, 8]
    for bad in ("16k", "", -1, None, "[1,-2]"):
        with pytest.raises(ConfigError, match="token_budgets"):
            parse_budgets(bad)
    assert candidates.parse_switch_sets(["rope,rms_norm", ["rope"]]) == [("rope", "rms_norm"), ("rope",)]


# -- what can run on this device, and why not -------------------------------------------------------------


def _without_liger(monkeypatch) -> None:
    """Liger's own status says its package is missing (the device checks ask every backend part's status)."""
    real = device.find_backend

    def find(name):
        found = real(name)
        return dataclasses.replace(found, status=lambda device: NO_LIGER) if name == "liger" else found

    monkeypatch.setattr(device, "find_backend", find)


def test_device_checks_say_why_not(monkeypatch):
    assert cpu_skipped_switches(("rope", "rms_norm", "swiglu", "cross_entropy"), "cpu") == ("rms_norm", "swiglu")
    assert cpu_skipped_switches(("rms_norm",), "cuda") == ()
    assert switches_here(("rms_norm", "rope"), "cpu") == ("rope",) and switches_here(("rms_norm",), "cuda") == (
        "rms_norm",
    )
    assert backend_refusal("eager", (), "cpu") == ""
    assert backend_refusal("liger", ("swiglu",), "cpu") == "none of LIGER_KERNELS='swiglu' runs on cpu"
    assert backend_refusal("fla+liger", ("rms_norm",), "cpu").startswith("missing package: flash-linear-attention")
    _without_liger(monkeypatch)
    assert backend_refusal("liger+compile", ("rope",), "cuda") == NO_LIGER
    assert backend_refusal("compile", ("rope",), "cuda") == ""


def test_refusal_names_the_doctor_first_then_the_attention_then_the_model_family():
    broken = {"kernels liger": "probe failed: swiglu"}
    assert refusal("liger+compile", "sdpa", "cpu", model="qwen3-tiny", packed=False, broken=broken) == (
        "the kernel doctor marks kernels liger broken: probe failed: swiglu"
    )
    varlen = refusal("eager", "torch_varlen", "cpu", model="qwen3-tiny", packed=True)
    assert varlen.startswith("attn_implementation='torch_varlen': ") and "CUDA" in varlen
    hybrid = refusal("eager", "flex_attention", "cpu", model="qwen3.5-tiny", packed=False)
    assert hybrid == family_refusal("qwen3.5-tiny", "flex_attention", "eager", False) != ""
    assert "qwen3_5 family" in hybrid
    assert family_refusal("qwen3.5-tiny", "sdpa", "eager", True) == ""  # packed rows carry their boundaries
    assert refusal("eager", "sdpa", "cpu", model="qwen3-tiny", packed=True) == ""
    assert family_refusal("someone/unknown-model", "sdpa", "fla", True) == ""  # no family known: nothing refused


def test_skip_broken_leaves_out_broken_backends_composites_and_attention_with_the_reason():
    base = RunConfig(run_name="k", batch_size=1)
    configs = [base.replace(kernels=k, attn_implementation=a, label=f"{k}, {a}")
               for k in ("eager", "liger", "liger+compile") for a in ("sdpa", "flex_attention")]  # fmt: skip
    broken = {"kernels liger": "probe failed: swiglu", "attention flex_attention": "probe failed: flex"}
    kept, skipped = skip_broken(configs, broken)
    assert [c.label for c in kept] == ["eager, sdpa"]
    assert skipped["kernels liger+compile"] == "the kernel doctor marks kernels liger broken: probe failed: swiglu"
    assert skipped["attention flex_attention"].endswith("probe failed: flex")
    assert set(skipped) == {"kernels liger", "kernels liger+compile", "attention flex_attention"}
    assert skip_broken(configs, {}) == (configs, {}) and skip_broken(configs, None) == (configs, {})


# -- the kernel grid (notebook 02) -------------------------------------------------------------------------


def test_backend_configs_on_cpu_keep_interpretable_liger_kernels():
    base = RunConfig(run_name="k", batch_size=1)
    configs = backend_configs(base, "eager, liger,compile", "rope,rms_norm,swiglu,fused_linear_cross_entropy", "cpu")
    assert [(c.label, c.kernels, c.liger_kernels) for c in configs] == [
        ("eager", "eager", ()),
        ("liger", "liger", ("rope", "fused_linear_cross_entropy")),
        ("compile", "compile", ()),
    ]
    gpu = backend_configs(base, "eager,liger", "rope,rms_norm", "cuda")
    assert gpu[1].liger_kernels == ("rope", "rms_norm")
    assert [c.label for c in backend_configs(base, "eager,compile", "", "cpu")] == ["eager", "compile"]
    assert cpu_skipped_kernels("rope,rms_norm,swiglu,cross_entropy") == ("rms_norm", "swiglu")
    assert cpu_skipped_kernels("rope,rms_norm", "eager,liger", "cuda") == ()
    assert cpu_skipped_kernels("rope,rms_norm", "eager,compile", "cpu") == ()
    demo = cpu_unsupported_configs(base.replace(profile=True), ("rms_norm",))
    assert [(c.label, c.liger_kernels, c.profile) for c in demo] == [
        ("liger rms_norm (CPU interpreter)", ("rms_norm",), False)
    ]
    with pytest.raises(ConfigError, match="BACKENDS"):
        backend_configs(base, "eager,fast", "rope", "cpu")
    with pytest.raises(ConfigError, match="BACKENDS"):
        backend_configs(base, "liger", "rope", "cpu")
    with pytest.raises(ConfigError, match="LIGER_KERNELS"):
        backend_configs(base, "eager,liger", "rms_norm,swiglu", "cpu")
    with pytest.raises(ConfigError, match="LIGER_KERNELS"):
        cpu_skipped_kernels("rope,warp")


def test_kernel_grid_skips_what_cannot_run_here_with_the_reason(monkeypatch):
    base = RunConfig(run_name="k", batch_size=1)
    configs, skipped = kernel_grid(base, "eager,liger", "rope,rms_norm", "cpu")
    assert [(c.label, c.liger_kernels) for c in configs] == [("eager", ()), ("liger", ("rope",))]
    assert skipped == {"Liger switches rms_norm": CPU_SWITCHES_REASON}
    configs, skipped = kernel_grid(base, "eager,compile", "rope,rms_norm", "cpu")  # no Liger: no switch skipped
    assert [c.label for c in configs] == ["eager", "compile"] and skipped == {}
    _without_liger(monkeypatch)
    configs, skipped = kernel_grid(base, "eager,liger", "rope", "cuda")
    assert [c.label for c in configs] == ["eager"] and skipped == {"kernels liger": NO_LIGER}


# -- the padding grid (notebook 03) ------------------------------------------------------------------------


def test_parse_list_and_the_padding_grid():
    base = RunConfig(run_name="t", num_samples=8)
    configs, skipped = strategy_configs(base, ["static", "packed"], ["sdpa", "flash_attention_2"], device="cpu")
    assert [c.label for c in configs] == ["eager, static, sdpa", "eager, packed, sdpa"]
    assert [(c.padding, c.attn_implementation) for c in configs] == [("static", "sdpa"), ("packed", "sdpa")]
    assert list(skipped) == ["attention flash_attention_2"] and "flash-attn" in skipped["attention flash_attention_2"]
    configs, skipped = strategy_configs(base, ["dynamic"], ["sdpa", "flex_attention"], device="cpu")
    assert [c.attn_implementation for c in configs] == ["sdpa", "flex_attention"] and skipped == {}


def test_combination_grid_kernels_x_strategies_x_attention():
    base = RunConfig(run_name="t", num_samples=8)
    configs, skipped = strategy_configs(
        base, ["static", "packed"], ["sdpa", "flash_attention_2"], "cpu", kernels="liger,eager",
        liger_kernels="rope,rms_norm,swiglu,cross_entropy",
    )  # fmt: skip
    assert [c.label for c in configs] == [
        "eager, static, sdpa", "eager, packed, sdpa", "liger, static, sdpa", "liger, packed, sdpa"
    ]  # fmt: skip
    assert {c.liger_kernels for c in configs if c.kernels == "liger"} == {("rope", "cross_entropy")}
    assert all(c.liger_kernels == () for c in configs if c.kernels == "eager")
    assert skipped == {
        "Liger switches rms_norm, swiglu": (
            "Triton's CPU interpreter fails on them (notebook 02 runs them to show it); they run on a GPU"
        ),
        "attention flash_attention_2": "not installed: the flash-attn package is missing",
    }
    on_gpu, skipped_gpu = strategy_configs(base, ["packed"], ["sdpa"], "cuda", kernels="eager,liger")
    assert [c.liger_kernels for c in on_gpu] == [(), ("rope", "rms_norm", "swiglu", "cross_entropy")]
    assert skipped_gpu == {}


def test_grid_skips_a_backend_that_cannot_run_here(monkeypatch):
    base = RunConfig(run_name="t", num_samples=8)
    configs, skipped = strategy_configs(base, ["static"], ["sdpa"], "cpu", "eager,liger", liger_kernels="swiglu")
    assert [c.kernels for c in configs] == ["eager"]
    assert skipped["kernels liger"] == "none of LIGER_KERNELS='swiglu' runs on cpu"
    _without_liger(monkeypatch)
    configs, skipped = strategy_configs(base, ["static"], ["sdpa"], "cuda", kernels="eager,liger+compile,compile")
    assert [c.label for c in configs] == ["eager, static, sdpa", "compile, static, sdpa"]
    assert skipped == {"kernels liger+compile": NO_LIGER}
    with pytest.raises(ConfigError, match="KERNELS='liger'"):
        strategy_configs(base, ["static"], ["sdpa"], "cpu", kernels="liger")
    with pytest.raises(ConfigError, match="KERNELS='eager,fast'"):
        strategy_configs(base, ["static"], ["sdpa"], "cpu", kernels="eager,fast")


# -- the tuner's candidates --------------------------------------------------------------------------------


def test_the_tuner_leaves_out_what_the_doctor_marks_broken_with_the_reason():
    workload = RunConfig(run_name="k", batch_size=1)
    broken = {"kernels compile": "probe failed: rms_norm"}
    runnable, dropped = build_space(workload, ["eager", "compile"], ["static"], ["sdpa"], device="cpu", broken=broken)
    assert [c.kernels for c in runnable] == ["eager"]
    assert [(c.kernels, why) for c, why in dropped] == [
        ("compile", "the kernel doctor marks kernels compile broken: probe failed: rms_norm")
    ]
    assert len(build_space(workload, ["eager", "compile"], ["static"], ["sdpa"], device="cpu")[0]) == 2


def test_the_candidates_reasons_are_the_device_checks():
    workload = RunConfig(run_name="k", model="qwen3.5-tiny", batch_size=1)
    runnable, dropped = build_space(
        workload, ["eager"], ["static", "packed"], ["sdpa", "flex_attention", "torch_varlen"], device="cpu"
    )
    assert [(c.padding, c.attn_implementation) for c in runnable] == [("static", "sdpa"), ("packed", "sdpa")]
    assert len(dropped) == 4  # flex (refused by the family) and varlen (CUDA only), static and packed
    for candidate, why in dropped:
        packed = candidate.padding == "packed"
        assert why == refusal("eager", candidate.attn_implementation, "cpu", model=workload.model, packed=packed)
    with pytest.raises(ConfigError, match="kernels.*unknown: turbo"):
        build_space(workload, ["eager", "turbo"], ["static"], ["sdpa"])
    assert set(KERNEL_BACKENDS) >= {c.kernels for c in runnable}


def test_under_a_memory_cap_the_tuner_leaves_out_what_the_planner_cannot_fit_with_its_reason():
    workload = RunConfig(run_name="k", model="qwen3-8b", adapter="lora", batch_size=8, max_length=2048,
                         gpu_memory_gib=48)  # fmt: skip
    grid = (["liger"], ["static", "token_budget"], ["sdpa"])
    runnable, dropped = build_space(workload, *grid, token_budgets=[2048, 16384], device="cuda")
    assert [(c.padding, c.token_budget) for c in runnable] == [("token_budget", 2048)]
    assert {(c.padding, c.token_budget) for c, _ in dropped} == {("static", 0), ("token_budget", 16384)}
    for candidate, why in dropped:
        assert why.startswith("gpu_memory_gib=48: the memory planner puts this step's peak at ")
        assert "over the cap" in why
        assert why == cap_plan_refusal(candidate.config(workload), model_shape(model_config("qwen3-8b")))
    uncapped = build_space(workload.replace(gpu_memory_gib=0), *grid, token_budgets=[2048, 16384], device="cuda")
    assert len(uncapped[0]) == 3 and not uncapped[1]


def test_a_token_budget_step_is_planned_at_its_budget_not_at_batch_size_rows():
    settings = PaddingSettings("token_budget", batch_size=8, max_length=2048, token_budget=2048)
    assert settings.most_tokens_per_step == 2048
    assert settings.replace(max_length=4096).most_tokens_per_step == 4096  # one sample alone past the budget
    assert settings.replace(strategy="static").most_tokens_per_step == 8 * 2048
    assert settings.replace(token_budget=1000, token_multiple=16).most_tokens_per_step == 2048
    assert settings.replace(max_length=100, token_budget=1000, token_multiple=16).most_tokens_per_step == 1008
    config = RunConfig(run_name="k", padding="token_budget", batch_size=8, max_length=2048, token_budget=2048)
    assert settings_from_config(config).tokens_per_gpu == 2048


# -- where the grids come from ------------------------------------------------------------------------------


def test_the_tuner_takes_its_candidates_from_planning():
    import nbhelpers.tuning as tuning
    import nbhelpers.tuning.journal as journal
    import nbhelpers.tuning.tuner as tuner

    assert tuning.build_space is candidates.build_space and tuning.Candidate is candidates.Candidate
    assert tuner.Candidate is journal.Candidate is candidates.Candidate
    assert tuner.baseline_candidate is candidates.baseline_candidate
    assert not (ROOT / "nbhelpers" / "tuning" / "space.py").exists()


def _nbhelpers_imports(path: Path) -> dict[str, str]:
    """name -> module of every ``from nbhelpers... import name`` in a notebook's code cells."""
    names: dict[str, str] = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nbhelpers"):
                names.update({alias.name: node.module or "" for alias in node.names})
    return names


@pytest.mark.parametrize(
    ("notebook", "facade", "planner", "planned"),
    [
        ("02_kernel_swap_in.ipynb", "nbhelpers.workbook.kernel_swap", "plan_backends",
         ("backend_configs", "cpu_skipped_kernels", "cpu_unsupported_configs", "describe_backends", "skip_broken")),
        ("03_dynamic_padding.ipynb", "nbhelpers.workbook.padding_study", "plan_strategies",
         ("parse_list", "strategy_configs", "skip_broken")),
    ],
)  # fmt: skip
def test_the_notebooks_grids_come_from_planning(notebook, facade, planner, planned):
    """A notebook plans its grid through its facade, whose grid functions are planning's own."""
    import importlib
    import inspect

    imports = _nbhelpers_imports(NOTEBOOKS / notebook)
    assert imports.get(planner) == facade
    module = importlib.import_module(facade)
    for name in planned:
        used = getattr(module, name)
        assert used.__module__.split(".")[1] == "planning", f"{facade}.{name} comes from {used.__module__}"
    source = inspect.getsource(module)
    assert all(f"{name}(" in source for name in planned if name != "cpu_unsupported_configs")


# -- the sweep's grid: a bracketed list for a text parameter -------------------------------------------------


def test_a_bracketed_grid_value_reaches_a_text_parameter_as_its_comma_list():
    notebook = NOTEBOOKS / "02_kernel_swap_in.ipynb"
    declared = notebook_parameters(notebook)
    assert declared["LIGER_KERNELS"]["inferred_type_name"] == "str"
    grid = parse_grid(["liger_kernels=[rope,swiglu],[rms_norm]"])
    values = [parameters_for(notebook, declared, point, "p")["LIGER_KERNELS"] for point in grid_points(grid)]
    assert values == ["rope,swiglu", "rms_norm"]
    assert [parse_list(v, LIGER_KERNELS, "LIGER_KERNELS") for v in values] == [("rope", "swiglu"), ("rms_norm",)]
    for refused in ([], [["rope"]], [1, 2], ["a,b"]):
        with pytest.raises(ConfigError, match="LIGER_KERNELS.*text"):
            parameters_for(notebook, declared, {"liger_kernels": refused}, "p")


def test_notebooks_are_found_by_a_comma_list():
    found = find_notebooks(" 02, 03 ", NOTEBOOKS)
    assert [p.name for p in found] == ["02_kernel_swap_in.ipynb", "03_dynamic_padding.ipynb"]
    assert find_notebooks(["03"], NOTEBOOKS) == found[1:]
    with pytest.raises(ValueError, match="matches no notebook"):
        find_notebooks("99", NOTEBOOKS)


def test_the_tuner_keeps_a_hybrids_packed_candidates_which_carry_their_boundaries():
    # A hybrid's packed rows keep their sequences apart by their boundaries (cu_seqlens), as the step packs them;
    # the space once judged them by position_ids alone and left out every token-budget candidate of the 27B.
    workload = RunConfig(model="qwen3.5-tiny", batch_size=2, max_length=64)
    runnable, dropped = build_space(workload, ["eager"], ["static", "token_budget", "packed"], ["sdpa"])
    assert {c.padding for c in runnable} == {"static", "token_budget", "packed"}, dropped


def test_the_tuner_leaves_out_a_liger_set_the_hybrids_patch_cannot_turn_on():
    workload = RunConfig(model="qwen3.5-tiny", batch_size=2, max_length=64)
    runnable, dropped = build_space(
        workload, ["eager", "liger"], ["static"], ["sdpa"], liger_sets=[("rope", "cross_entropy"), ("cross_entropy",)]
    )
    kept_sets = {c.liger_kernels for c in runnable if c.kernels == "liger"}
    assert kept_sets == {("cross_entropy",)}
    reasons = [reason for candidate, reason in dropped if candidate.liger_kernels == ("rope", "cross_entropy")]
    assert reasons and all("'rope': Liger's Qwen3.5 patch has no rotary kernel" in reason for reason in reasons)


# -- "auto" kernel lists --------------------------------------------------------------------------------------


def test_auto_kernels_leave_liger_out_on_a_cpu_with_the_reason_and_keep_it_on_a_gpu():
    from nbhelpers.planning.device import CPU_LIGER_REASON, auto_kernels
    from nbhelpers.workbook.kernel_swap import plan_backends

    assert auto_kernels("auto", "cuda") == ("eager,liger", "")
    assert auto_kernels(" AUTO ", "cpu") == ("eager,regional_compile", CPU_LIGER_REASON)
    assert auto_kernels("eager,liger", "cpu") == ("eager,liger", "")  # named explicitly: runs as asked
    base = RunConfig(run_name="t", model="qwen3-tiny")
    configs, skipped = kernel_grid(base, "auto", "rope,cross_entropy", "cpu")
    assert [c.kernels for c in configs] == ["eager", "regional_compile"]
    assert skipped == {"kernels liger": CPU_LIGER_REASON}
    assert "interpreter" in CPU_LIGER_REASON and "name liger" in CPU_LIGER_REASON
    plan = plan_backends(base, "auto", "rope,rms_norm,swiglu,cross_entropy", "cpu")
    assert [c.kernels for c in plan.configs] == ["eager", "regional_compile"] and plan.cpu_skipped == ()
    assert plan.description.endswith(f"Liger is left out here: {CPU_LIGER_REASON}")
    gpu = plan_backends(base, "auto", "rope,rms_norm,swiglu,cross_entropy", "cuda")
    assert [c.kernels for c in gpu.configs] == ["eager", "liger"]
    assert gpu.configs[1].liger_kernels == ("rope", "rms_norm", "swiglu", "cross_entropy")


def test_the_tuner_can_pick_float8_and_cce_where_they_run_and_leaves_them_out_with_the_reason_where_not(monkeypatch):
    workload = RunConfig(run_name="k", batch_size=1)
    names = ["eager", "float8+compile", "cce", "liger+cce"]
    runnable, dropped = build_space(workload, names, ["static"], ["sdpa"], device="cpu",
                                    liger_sets=[("rope", "cross_entropy")])  # fmt: skip
    assert {c.kernels for c in runnable} >= {"eager", "cce", "liger+cce"}
    assert [c.liger_kernels for c in runnable if c.kernels == "liger+cce"] == [("rope",)]  # no Liger loss beside CCE
    assert [(c.kernels, why.split(": ", 1)[1]) for c, why in dropped] == [("float8+compile", float8_status("cpu"))]
    real = device.find_backend  # on an H200: every part's status says it can run

    def find(name):
        found = real(name)
        return dataclasses.replace(found, status=lambda device: "") if found is not None else None

    monkeypatch.setattr(device, "find_backend", find)
    on_gpu, dropped_gpu = build_space(workload, names, ["static"], ["sdpa"], device="cuda")
    assert [c.kernels for c in on_gpu] == names and dropped_gpu == []
    beside_cce = [c.config(workload).liger_kernels for c in on_gpu if c.kernels == "liger+cce"]
    assert beside_cce == [("rope", "rms_norm", "swiglu")]
