"""The float8 backends: torchao's float8 training in the model's linear layers, one table entry per recipe.

torchao's ``convert_to_float8_training`` swaps each ``nn.Linear`` for a ``Float8Linear`` whose matmuls take float8
inputs (e4m3, with e5m2 or e4m3 gradients by recipe) scaled per tensor ("tensorwise", torchao's default and its
fastest) or per row ("rowwise", more accurate). Left in higher precision: the lm head (its logits feed the loss,
where float8's 3 mantissa bits cost the most; torchtitan leaves it out too) and any linear layer whose dimensions
are not multiples of 16 (float8 matmuls need them). Float8 matmuls need an NVIDIA GPU of compute capability 8.9 or
newer (Ada, Hopper, Blackwell); elsewhere the backend is refused with the reason before anything runs. Its casts
are fused by torch.compile, so ``float8+compile`` is the entry to time; ``float8`` alone shows what the casts cost.

Light at import: torch and torchao load inside the functions.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from .spec import ApplyFunction, BackendUnavailable, CurveTolerance, ProbeFunction, ReportFunction, Tolerance

FLOAT8_BACKEND = "float8"  # torchao's "tensorwise" recipe
FLOAT8_ROWWISE_BACKEND = "float8_rowwise"  # torchao's "rowwise" recipe
RECIPES = {FLOAT8_BACKEND: "tensorwise", FLOAT8_ROWWISE_BACKEND: "rowwise"}  # backend -> torchao recipe name
MIN_CAPABILITY = (8, 9)  # float8 tensor cores: Ada (8.9), Hopper (9.0) and newer
DIMENSION_MULTIPLE = 16  # float8 matmuls need both dimensions of the weight divisible by 16
FLOAT8_CHECKS = {
    f"float8_{recipe}": f"every linear layer torchao can take (dimensions multiples of {DIMENSION_MULTIPLE}), the lm "
    f"head excepted, is torchao's Float8Linear with the {recipe!r} recipe's config"
    for recipe in RECIPES.values()
}
# Lower precision: judged by looser tolerances than bf16 autocast (2e-2 first step, 0.02 per step over a curve).
FLOAT8_PARITY = Tolerance(
    5e-2, "float8 matmuls in every decoder linear layer (e4m3: 3 mantissa bits, scaled per tensor or row)"
)
FLOAT8_CURVE = CurveTolerance(
    step_rtol=0.05,
    smoothed_rtol=0.02,
    window=5,
    mean_rtol=0.01,
    basis="float8 matmuls: single steps scatter more than in bf16 (5%), a drift shows in the 5-step moving average "
    "(2%, bf16's per-step bound) and in the mean (1%)",
)
TORCHAO = ("torchao", "torchao")  # (import name, pip name)
NO_FLOAT8_GPU = (
    f"float8 matmuls need an NVIDIA GPU of compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer "
    "(Ada, Hopper: L4, H100, H200)"
)


def float8_status(device: str) -> str:
    """'' when torchao's float8 training can run on ``device``, else why not (no such GPU, or torchao missing)."""
    if device != "cuda":
        return f"{NO_FLOAT8_GPU}; this is a {device.upper()}"
    if importlib.util.find_spec(TORCHAO[0]) is None:
        return f"missing package: {TORCHAO[1]} is not installed"
    import torch

    if not torch.cuda.is_available():
        return f"{NO_FLOAT8_GPU}; torch sees no CUDA GPU"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < MIN_CAPABILITY:
        return f"{NO_FLOAT8_GPU}; this GPU is {major}.{minor}"
    return ""


def float8_eligible(module: Any, output_layer: Any = None) -> bool:
    """Whether torchao may convert a module: a linear layer with both dimensions multiples of 16, not the lm head."""
    import torch

    if not isinstance(module, torch.nn.Linear) or module is output_layer:
        return False
    out_features, in_features = module.weight.shape
    return out_features % DIMENSION_MULTIPLE == 0 and in_features % DIMENSION_MULTIPLE == 0


def convert_linears(model: Any, recipe: str, emulate: bool = False) -> Any:
    """Swap the model's eligible linear layers (:func:`float8_eligible`) for torchao's Float8Linear with a recipe.

    ``emulate=True`` runs the float8 matmuls in higher precision (torchao's emulation): for tests on a CPU only.
    """
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as error:
        raise BackendUnavailable(f"missing package: torchao is not importable ({error})") from error
    config = Float8LinearConfig.from_recipe_name(recipe)
    if emulate:
        import dataclasses

        config = dataclasses.replace(config, emulate=True)
    head = model.get_output_embeddings()
    return convert_to_float8_training(model, module_filter_fn=lambda m, fqn: float8_eligible(m, head), config=config)


def use_float8(model: Any, recipe: str = RECIPES[FLOAT8_BACKEND]) -> None:
    """Turn float8 training on for a loaded model (exported Trainer/TRL code): refused where it cannot run."""
    import torch

    if why := float8_status("cuda" if torch.cuda.is_available() else "cpu"):
        raise BackendUnavailable(why)
    convert_linears(model, recipe)


def apply_float8_for(backend: str) -> ApplyFunction:
    """The apply function of a float8 entry: its recipe's conversion, refused with the reason where it cannot run."""
    recipe = RECIPES[backend]

    def apply(model: Any, switches: tuple[str, ...], device: str) -> None:
        if why := float8_status(device):
            raise BackendUnavailable(why)
        convert_linears(model, recipe)

    return apply


def _converted_with(module: Any, recipe: str) -> bool:
    """The module is torchao's Float8Linear with the recipe's config, emulated or not (torchao is imported once
    anything converted)."""
    if "torchao.float8" not in sys.modules or not type(module).__module__.startswith("torchao.float8"):
        return False
    import dataclasses

    from torchao.float8 import Float8LinearConfig

    config = getattr(module, "config", None)
    if not dataclasses.is_dataclass(config):
        return False
    return dataclasses.replace(config, emulate=False) == Float8LinearConfig.from_recipe_name(recipe)  # type: ignore


def float8_report_for(backend: str) -> ReportFunction:
    """The report of a float8 entry: its key is true when every eligible linear layer runs the entry's recipe."""
    recipe = RECIPES[backend]

    def report(model: Any) -> dict[str, bool]:
        get_head = getattr(model, "get_output_embeddings", None)
        head = get_head() if callable(get_head) else None
        eligible = [m for m in model.modules() if float8_eligible(m, head)]
        converted = bool(eligible) and all(_converted_with(m, recipe) for m in eligible)
        return {f"float8_{recipe}": converted}

    return report


def requested_float8_for(backend: str) -> Any:
    """The report key a float8 entry must see replaced."""
    key = f"float8_{RECIPES[backend]}"
    return lambda switches: (key,)


FLOAT8_PROBE_SHAPE = (32, 256)  # tokens, features of the doctor's float8 probe
# rtol, atol, norm_rtol: float8's rounding passes (emulated on a CPU: each row of output and gradients within 8.4%
# by norm, the weight gradient's entries, sums over 32 tokens about 5.7 in scale, within 1.9 of bf16's), a wrong
# scale (rows 100% off) or a transposed operand (entries 5.7 off) fails. Measured on an H200 (2026-12-03, torchao
# 0.18.0): the earlier bounds (rtol 0.125, atol 0.5) failed both recipes on the weight gradient (1.88 and 1.75 apart).
FLOAT8_PROBE_TOLERANCE = (0.25, 3.0, 0.25)


def float8_probe_inputs(device: str) -> list[Any]:
    """The probe's activations (unit scale) and weight (scaled by 1/sqrt(features), as a fresh layer's) in bf16."""
    import torch

    tokens, features = FLOAT8_PROBE_SHAPE
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(tokens, features, generator=generator).to(device, torch.bfloat16)
    weight = (torch.randn(features, features, generator=generator) / features**0.5).to(device, torch.bfloat16)
    return [x, weight]


def probe_float8_for(backend: str) -> ProbeFunction:
    """The probe of a float8 entry: a Float8Linear against the bf16 linear layer, forward and backward, on a GPU,
    within :data:`FLOAT8_PROBE_TOLERANCE` (a wrong scale, a transposed operand or a broken kernel fails; float8's
    own rounding does not)."""
    recipe = RECIPES[backend]

    def probe(device: str) -> list[Any]:
        from .probes import compare_kernels, not_runnable

        if why := float8_status(device):
            return [not_runnable(f"float8 linear ({recipe})", why)]
        import torch

        x, weight = float8_probe_inputs(device)
        features = weight.shape[0]
        layer = torch.nn.Sequential(torch.nn.Linear(features, features, bias=False)).to(device, torch.bfloat16)
        layer.get_output_embeddings = lambda: None  # nothing to leave out of this one-layer model
        convert_linears(layer, recipe)

        def fused(a: Any, w: Any) -> Any:
            return torch.func.functional_call(layer, {"0.weight": w}, (a,))

        rtol, atol, norm_rtol = FLOAT8_PROBE_TOLERANCE
        return [compare_kernels(f"float8 linear ({recipe})", fused, torch.nn.functional.linear, [x, weight],
                                rtol, atol, norm_rtol=norm_rtol, input_names=("the input", "the weight"))]  # fmt: skip

    return probe
