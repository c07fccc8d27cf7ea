"""The table of model families is the single source: every model the workbook names is an entry,
every entry builds, and what an entry says it supports is spelled as the rest of the package spells it."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import papermill
import pytest

from nbhelpers.data.tokenizer import EMBEDDED_TOKENIZERS, load_tokenizer
from nbhelpers.kernels.registry import family_kernel_backends
from nbhelpers.measure.config import ATTENTION_IMPLEMENTATIONS, KERNEL_BACKENDS
from nbhelpers.models.families import (
    FAMILIES,
    GATED_DELTANET,
    LIGER_PATCH,
    MAX_LAYER_KINDS,
    MODEL_CAPABILITIES,
    MODEL_PRESETS,
    NO_CHECKPOINT,
    PACKING_MODES,
    REPEATED_LAYERS,
    family_of_model,
    family_of_model_type,
    family_of_preset,
    hub_id,
    model_shape,
    model_type_of,
    preset_config,
    unsupported,
)
from nbhelpers.models.loading import count_parameters, meta_model

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# How presets are spelled: family, then "tiny" or a size in billions ("qwen3-1.7b", "qwen3.5-27b").
PRESET_LIKE = re.compile(r"\b[a-z][a-z0-9]*(?:\.[0-9]+)?-(?:tiny|[0-9]+(?:\.[0-9]+)?b)\b")
MODEL_ASSIGNMENT = re.compile(r"""\b(?:MODEL|model)\s*=\s*["']([^"']+)["']""")
GRID_ITEM = re.compile(r"""\b(?:MODEL|model)=([^\s"'`]+)""")
FAMILY_PARAMETRIZE = pytest.mark.parametrize("family", list(FAMILIES.values()), ids=list(FAMILIES))


def _is_path(name: str) -> bool:
    return name.startswith(("/", ".", "~"))


def _assert_known(names: dict[str, str]) -> None:
    """Every name (name -> where it was found) is a preset or a model of a family in the table."""
    unknown = {name: where for name, where in names.items() if family_of_model(name) is None}
    assert not unknown, f"models named outside the family table: {unknown}"


def test_notebook_model_parameters_are_table_entries():
    names = {}
    for notebook in NOTEBOOKS:
        parameters = papermill.inspect_notebook(str(notebook))
        if "MODEL" in parameters:
            names[ast.literal_eval(parameters["MODEL"]["default"])] = notebook.name
        for cell in json.loads(notebook.read_text())["cells"]:
            names |= {name: notebook.name for name in PRESET_LIKE.findall("".join(cell["source"]))}
    assert names, "no notebook declares a MODEL parameter"
    _assert_known(names)


def test_readme_models_are_table_entries():
    text = (ROOT / "README.md").read_text()
    names = {name: "README.md" for name in PRESET_LIKE.findall(text)}
    names |= {name: "README.md" for name in MODEL_ASSIGNMENT.findall(text) if not _is_path(name)}
    assert names, "README.md names no preset"
    _assert_known(names)


def test_benchmark_scripts_name_only_table_entries():
    names = {}
    for script in sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names |= {name: script.name for name in PRESET_LIKE.findall(node.value)}
    assert names, "no benchmark script names a preset"
    _assert_known(names)


def test_shipped_records_measure_table_entries():
    names = {}
    for records in sorted((ROOT / "benchmarks").rglob("*.jsonl")):
        for line in records.read_text().splitlines():
            model = json.loads(line).get("config", {}).get("model") if line.strip() else None
            if model:
                names[model] = records.name
    assert names
    _assert_known(names)


def test_sweep_grids_name_only_table_entries():
    sources = [ROOT / "README.md", ROOT / "nbhelpers" / "sweep.py", ROOT / "nbhelpers" / "cli.py"]
    sources += sorted(p for p in (ROOT / "scripts").glob("*") if p.is_file())
    names = {}
    for source in sources:
        for line in source.read_text().splitlines():
            if "--grid" in line:
                names |= {v: source.name for item in GRID_ITEM.findall(line) for v in item.split(",") if v}
    _assert_known(names)


def test_preset_names_and_model_types_each_belong_to_one_family():
    presets = [name for family in FAMILIES.values() for name in family.presets]
    model_types = [model_type for family in FAMILIES.values() for model_type in family.model_types]
    assert len(presets) == len(set(presets)) == len(MODEL_PRESETS)
    assert len(model_types) == len(set(model_types))
    for family in FAMILIES.values():
        assert all(family_of_preset(name) is family for name in family.presets)
        assert all(family_of_model_type(model_type) is family for model_type in family.model_types)
        assert set(family.hub_ids) <= set(family.presets), f"{family.name}: hub ids of unknown presets"


@FAMILY_PARAMETRIZE
def test_support_lists_use_the_names_the_package_accepts(family):
    assert family.attention_implementations, family.name
    assert all(name in ATTENTION_IMPLEMENTATIONS for name in family.attention_implementations)
    assert all(capability in MODEL_CAPABILITIES for capability in family.capabilities), family.name
    assert family_kernel_backends(family), family.name
    assert set(family.kernel_gaps) <= set(KERNEL_BACKENDS) and set(family.kernel_packing) <= set(KERNEL_BACKENDS)
    assert all(mode in PACKING_MODES for mode in family.packing)
    assert family.tokenizer in EMBEDDED_TOKENIZERS


@FAMILY_PARAMETRIZE
def test_config_class_covers_the_model_types(family):
    import transformers
    from transformers import CONFIG_MAPPING

    config_class = getattr(transformers, family.config_class)
    for model_type in family.model_types:
        # a released multimodal checkpoint's config wraps the text model's as its text_config
        assert type(CONFIG_MAPPING[model_type]().get_text_config()) is config_class
    for name in family.presets:
        config = preset_config(name)
        assert isinstance(config, config_class) and config.model_type in family.model_types


@FAMILY_PARAMETRIZE
def test_layer_capabilities_are_what_the_presets_build(family):
    """A family has Gated DeltaNet layers when its presets' configs list linear-attention layers, and repeated layers
    of few kinds when no preset's layers are of more than MAX_LAYER_KINDS types (one compiled graph per kind)."""
    for name in family.presets:
        kinds = set(getattr(preset_config(name), "layer_types", None) or ["full_attention"])
        assert ("linear_attention" in kinds) == (GATED_DELTANET in family.capabilities), name
        assert (len(kinds) <= MAX_LAYER_KINDS) == (REPEATED_LAYERS in family.capabilities), name


@FAMILY_PARAMETRIZE
def test_liger_patches_every_model_type_of_a_family_that_says_so(family):
    if LIGER_PATCH not in family.capabilities:
        pytest.skip(f"{family.name} has no Liger patch")
    monkey_patch = pytest.importorskip("liger_kernel.transformers.monkey_patch")
    for model_type in family.model_types:
        assert model_type in monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN


@pytest.mark.parametrize("name", sorted(MODEL_PRESETS))
def test_formula_equals_instantiated_model(name):
    """Every preset builds on the meta device, and its family's shape arithmetic counts its parameters."""
    shape = family_of_preset(name).shape(preset_config(name))
    model = meta_model(name)
    assert next(model.parameters()).device.type == "meta"
    assert count_parameters(model) == shape.total_parameters
    assert model_shape(model.config) == shape


def test_model_type_lookup_reads_a_folder_config_without_network(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    assert model_type_of(folder) is None and family_of_model(str(folder)) is None
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 8}))
    assert model_type_of(folder) == "qwen3"
    assert family_of_model(str(folder)) is FAMILIES["qwen3"]
    (folder / "config.json").write_text(json.dumps({"model_type": "no-such-family"}))
    assert family_of_model(str(folder)) is None


def test_bare_checkpoint_folder_gets_its_familys_embedded_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    with pytest.warns(UserWarning, match="no tokenizer files: using the embedded qwen3 tokenizer"):
        tokenizer = load_tokenizer(str(tmp_path))
    assert tokenizer.vocab_size == load_tokenizer("qwen3-tiny").vocab_size


def test_hub_ids_and_lookups():
    assert hub_id("qwen3-1.7b") == "Qwen/Qwen3-1.7B"
    assert hub_id("qwen3-tiny") == NO_CHECKPOINT  # no released model of that shape
    assert hub_id("/my/checkpoint") == "/my/checkpoint"
    assert family_of_model("Qwen/Qwen3-8B") is FAMILIES["qwen3"]
    assert family_of_model("someone/unknown-model") is None
    with pytest.raises(ValueError, match="presets are"):
        family_of_preset("qwen9-huge")


def test_unsupported_settings_are_named():
    narrow = dataclasses.replace(FAMILIES["qwen3"], attention_implementations=("sdpa",), packing=())
    assert narrow.refusal("sdpa", "eager") == ""
    assert "attn_implementation='eager'" in narrow.refusal("eager")
    assert "packing='position_ids'" in narrow.refusal(packing="position_ids")
    assert unsupported("qwen3", "sdpa", "liger", "position_ids") == ""
    assert unsupported("no-such-family", "anything") == ""
