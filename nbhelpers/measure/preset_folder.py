"""A preset saved as a checkpoint folder (its random bf16 weights and its real tokenizer), for a peer engine that
loads only from a folder (Unsloth's ``FastLanguageModel.from_pretrained``).

The weights are the workload's: built as the workbook builds them (seed, device, bf16), so a peer trains the same
random model. A folder is kept and reused while its marker matches (saving the 27B shape writes about 54 GB);
``$NBHELPERS_UNSLOTH_MODELS`` says where folders go (default: a folder in the system's temporary directory).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

FOLDER_VARIABLE = "NBHELPERS_UNSLOTH_MODELS"
MARKER = "nbhelpers-preset.json"  # written last: a folder without it is incomplete


def folders_root() -> Path:
    """Where preset folders are saved: ``$NBHELPERS_UNSLOTH_MODELS``, else ``<tmp>/nbhelpers-unsloth-models``."""
    return Path(os.environ.get(FOLDER_VARIABLE) or Path(tempfile.gettempdir()) / "nbhelpers-unsloth-models")


def preset_folder(preset: str, seed: int, root: Path | None = None) -> Path:
    """The folder of one preset's weights at one seed."""
    return (root or folders_root()) / f"{preset}-seed{seed}-bf16"


def marker_of(preset: str, seed: int) -> dict[str, Any]:
    """What a complete folder's marker says."""
    return {"preset": preset, "seed": seed, "dtype": "bfloat16"}


def is_complete(folder: Path, preset: str, seed: int) -> bool:
    """Whether ``folder`` holds a finished save of this preset and seed."""
    try:
        return json.loads((folder / MARKER).read_text()) == marker_of(preset, seed)
    except (OSError, ValueError):
        return False


def free_bytes(folder: Path) -> int:
    """Free bytes on the disk that holds (or will hold) ``folder``."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    return shutil.disk_usage(existing).free


def save_preset(preset: str, seed: int, device: str, adapter: Any, folder: Path) -> Path:
    """Build the preset as the workbook does (bf16 weights on ``device``, ``adapter``'s memory rule), save it and
    its tokenizer into ``folder`` (staged, the marker last) and free the model; an existing complete folder is
    kept."""
    if is_complete(folder, preset, seed):
        return folder
    import gc

    import torch

    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.models.loading import build_model

    staging = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    model = build_model(preset, "sdpa", seed, torch.bfloat16, device, adapter)
    model.save_pretrained(str(staging), safe_serialization=True)
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    load_tokenizer(preset).save_pretrained(str(staging))
    (staging / MARKER).write_text(json.dumps(marker_of(preset, seed)))
    staging.replace(folder)
    return folder


__all__ = ["FOLDER_VARIABLE", "folders_root", "free_bytes", "is_complete", "preset_folder", "save_preset"]
