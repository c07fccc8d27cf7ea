"""Presets match the real Qwen3 shapes; local folders load through from_pretrained."""

import pytest

from nbhelpers.models.families import preset_config
from nbhelpers.models.loading import build_model
from nbhelpers.models.shape import ModelShape

# Qwen's model cards: total and non-embedding parameters, in billions, as printed (rounded).
PUBLISHED = {
    "qwen3-0.6b": ("0.6", "0.44"),
    "qwen3-1.7b": ("1.7", "1.4"),
    "qwen3-4b": ("4.0", "3.6"),
    "qwen3-8b": ("8.2", "6.95"),
}


def _rounding_tolerance(printed: str) -> float:
    """Half a unit of the last printed digit: what rounding to that many digits allows."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10**-decimals


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED.items()))
def test_counts_match_model_cards(name, published):
    total, non_embedding = published
    shape = ModelShape.from_config(preset_config(name))
    # the model card's figures are rounded: half a unit of their last digit (_rounding_tolerance)
    assert shape.total_parameters / 1e9 == pytest.approx(float(total), abs=_rounding_tolerance(total))
    assert shape.non_embedding_parameters / 1e9 == pytest.approx(
        float(non_embedding), abs=_rounding_tolerance(non_embedding)
    )


def test_tiny_preset_is_a_few_million_beside_the_vocabulary():
    shape = ModelShape.from_config(preset_config("qwen3-tiny"))
    assert shape.vocab_size == 151_936
    assert shape.non_embedding_parameters < 1_000_000
    assert shape.total_parameters < 15_000_000


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(ValueError, match="presets are"):
        preset_config("qwen9-huge")


def test_local_folder_loads_through_from_pretrained(tmp_path):
    import torch

    model = build_model("qwen3-tiny", seed=3)
    model.save_pretrained(tmp_path / "saved")
    loaded = build_model(str(tmp_path / "saved"), attn_implementation="eager")
    assert loaded.config.model_type == "qwen3"
    assert loaded.config._attn_implementation == "eager"
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_folder_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        build_model(str(tmp_path))


def test_training_models_have_no_kv_cache_so_packed_rows_match_padded():
    import torch

    from nbhelpers.data.collate import collate
    from nbhelpers.data.loading import load_examples
    from nbhelpers.data.strategies import PaddingSettings
    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.kernels.registry import cpu_tolerance

    tokenizer = load_tokenizer()
    examples = load_examples("default", tokenizer, 3, 64)
    results = {}
    for strategy in ("dynamic", "packed"):
        model = build_model("qwen3-tiny", "sdpa", seed=0)
        assert model.config.use_cache is False
        out = model(**collate(examples, PaddingSettings(strategy, max_length=64), tokenizer.pad_token_id))
        out.loss.backward()
        results[strategy] = (out.loss.item(), torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item())
    # the baseline's cpu_tolerance (spec.SAME_KERNELS_CPU: padded and packed rows of one batch, its basis says why)
    assert results["packed"] == pytest.approx(results["dynamic"], rel=cpu_tolerance("eager").rel)
