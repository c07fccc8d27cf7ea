"""The multi-GPU export: an accelerate FSDP2 config that accelerate reads, and a TRL launch command."""

import shlex

import yaml

from nbhelpers.analysis.multi_gpu_export import CONFIG_FILE, export_multi_gpu
from nbhelpers.measure.config import RunConfig


def test_accelerate_reads_the_exported_fsdp2_config(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    config = RunConfig(model="qwen3-8b", gpus=2, sharding="fsdp2", activation_checkpointing="every_k", dtype="bf16",
                       batch_size=1, max_length=4096)  # fmt: skip
    exported = export_multi_gpu(config, {"padding_free": True, "use_liger_kernel": True,
                                         "model_init_kwargs": {"attn_implementation": "torch_varlen"}})  # fmt: skip
    text = exported[CONFIG_FILE]
    assert "layers 0, 2, 4, ... checkpointed" in text and "fp32" in text
    data = yaml.safe_load(text)
    fsdp = data["fsdp_config"]
    assert data["num_processes"] == 2 and data["mixed_precision"] == "bf16"
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_transformer_layer_cls_to_wrap"] == "Qwen3DecoderLayer"
    assert fsdp["fsdp_activation_checkpointing"] is True
    path = tmp_path / CONFIG_FILE
    path.write_text(text)
    loaded = load_config_from_file(str(path))
    assert loaded.num_processes == 2 and loaded.fsdp_config["fsdp_version"] == 2

    words = shlex.split(exported["command"])
    assert words[:6] == ["accelerate", "launch", "--config_file", CONFIG_FILE, "-m", "trl.scripts.sft"]
    flags = dict(zip(words[6::2], words[7::2]))
    assert flags["--model_name_or_path"] == "Qwen/Qwen3-8B"
    assert flags["--gradient_checkpointing"] == "false" and flags["--padding_free"] == "true"
    assert flags["--model_init_kwargs"] == '{"attn_implementation": "torch_varlen"}'
    assert flags["--per_device_train_batch_size"] == "1"


def test_offloaded_checkpoints_reach_accelerates_fsdp2_config(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    config = RunConfig(model="qwen3-8b", gpus=2, sharding="fsdp2", activation_checkpointing="offload", dtype="bf16")
    text = export_multi_gpu(config, {})[CONFIG_FILE]
    fsdp = yaml.safe_load(text)["fsdp_config"]
    assert fsdp["fsdp_activation_checkpointing"] is True and fsdp["fsdp_activation_checkpointing_offload"] is True
    path = tmp_path / CONFIG_FILE
    path.write_text(text)
    assert load_config_from_file(str(path)).fsdp_config["fsdp_activation_checkpointing_offload"] is True
    full = export_multi_gpu(config.replace(activation_checkpointing="full"), {})[CONFIG_FILE]
    assert "fsdp_activation_checkpointing_offload" not in yaml.safe_load(full)["fsdp_config"]
