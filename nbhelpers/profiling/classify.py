"""Kernel and aten-operator categories: ordered regex rules over real names.

The categories (:data:`CATEGORIES`) are those of the design's kernel-level observability section.
Decisions where a name could fit two categories:

- **Triton/Liger** holds every Liger kernel, Cut Cross-Entropy's kernels and every torch.compile (Inductor)
  generated Triton kernel (``triton_poi_fused_*``, ``triton_red_fused_*``, ``triton_per_fused_*``, ...),
  whatever it computes: the category shows how much of a step already runs in fused Triton code. Two exceptions keep
  compute-bound templates with their kind: Triton attention templates (``triton_tem_fused_flex_attention*``)
  are "attention" and Triton GEMM templates (``triton_tem_fused_mm*``, ``*_addmm*``, ``*_bmm*``) are "GEMM".
- **elementwise** holds pointwise kernels and the memory-bound kernels that read and write each element
  once: copies run as kernels (``direct_copy``), ``fill``, indexing (``index_select``, ``gather``,
  ``scatter``, embedding forward and backward) and concatenation (``CatArrayBatchedCopy``).
- **memcpy/memset** holds copy-engine transfers and memsets (``Memcpy DtoD``, ``Memset``), not kernels.
- **optimizer** holds ``multi_tensor_apply_kernel`` (the foreach kernels of optimizers and grad clipping)
  and fused Adam/AdamW kernels.
- GEMM split-K reductions (``splitKreduce_kernel``) are "GEMM"; sorting and de-duplication (cub radix
  sort, ``DeviceUniqueByKey``, which the embedding backward runs on token ids) are "other".
- **linear attention** holds the kernels of a hybrid's Gated DeltaNet layers on the fused path:
  flash-linear-attention's chunked gated delta rule (``chunk_gated_delta_rule_*``, ``chunk_fwd_kernel_o``,
  ``chunk_bwd_kernel_dqkwg``, ``chunk_fwd_kernel_h``, ``recompute_w_u_fwd_kernel``, ``prepare_wy_repr_*``,
  ``chunk_scaled_dot_kkt_fwd_kernel``, ``solve_tril_*``, ``merge_16x16_to_*_inverse_kernel``, chunk cumsums,
  ``gdn_gate_*``, ``fused_recurrent_*``), its TileLang kernels (``*_tilelang``, ``*_tl``; TileLang names a
  kernel after its function, ``kernel_kernel``/``main_kernel`` for anonymous ones, which in this workbook
  only fla launches) and the short causal convolution (fla's or the ``causal-conv1d`` package's
  ``causal_conv1d_*``). fla's ``l2norm_*`` (query/key normalization) and ``layer_norm_gated_*`` (the gated
  output RMSNorm) are "normalization". The reference PyTorch path of the same layers runs as ordinary
  torch kernels (GEMMs, elementwise, triangular solves) and is classified as those.
- cuDNN's SDPA backward helpers (``cudnn::fusion::compute_dot_do_o_specialized``, ``convert_dq_to_16bits``)
  are "attention"; ``lpnorm_cleanup`` (the last pass of the gradient-norm reduction) is "reduction".
"""

from __future__ import annotations

import re
from functools import lru_cache

GEMM = "GEMM"
ATTENTION = "attention"
LINEAR_ATTENTION = "linear attention"
NORMALIZATION = "normalization"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
SOFTMAX_LOSS = "softmax/loss"
OPTIMIZER = "optimizer"
MEMCPY = "memcpy/memset"
COMMUNICATION = "communication"
TRITON = "Triton/Liger"
OTHER = "other"

CATEGORIES: tuple[str, ...] = (
    GEMM,
    ATTENTION,
    LINEAR_ATTENTION,
    NORMALIZATION,
    ELEMENTWISE,
    REDUCTION,
    SOFTMAX_LOSS,
    OPTIMIZER,
    MEMCPY,
    COMMUNICATION,
    TRITON,
    OTHER,
)

_LIGER = (
    r"liger|^_triton_(q\w*)?m?rope|^_rms_norm_\w*kernel|^_block_rms_norm\w*|^_fused_add_rms_norm\w*"
    r"|^_layer_norm_\w*kernel|^_group_norm_\w*kernel|^_poly_norm\w*|^_dyt_\w*|^_swiglu_\w*|^_geglu_\w*"
    r"|^element_mul_kernel|^_fused_linear_cross_entropy\w*|^_cross_entropy\w*kernel|^_kldiv_kernel\w*"
    r"|^_jsd_kernel\w*|^_tvd_kernel\w*|^_selective_log_softmax\w*|^_softmax_\w*kernel|^_sparsemax\w*"
    r"|^_cce_\w*kernel|^_indexed_neg_dot_forward_kernel"  # Cut Cross-Entropy's Triton kernels
)

# flash-linear-attention's Gated DeltaNet kernels (fla/ops/gated_delta_rule, fla/ops/common, fla/ops/utils,
# fla/modules/convolution), TileLang kernels, and the causal-conv1d package's kernels.
_LINEAR_ATTENTION = (
    r"gated_delta|delta_rule|^chunk_(fwd|bwd)_|^chunk_scaled_dot_kkt|^chunk_(local|global)_cumsum|"
    r"recompute_w_u|prepare_wy_repr|wy_fast|solve_tril|merge_16x16_to_\w*inverse|^gdn_gate|^fused_recurrent_|"
    r"^fused_chunk_|^compute_dh0|fused_beta_sigmoid|causal_conv1d|_tilelang\b|_tl(_kernel)?$|"
    r"^(kernel|main)_kernel$"
)

# Ordered, matched (re.search, case-insensitive) against the whole name: strong signals that may sit in
# a template argument (FlashAttention 3 runs as ``cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>``).
FULL_NAME_RULES: tuple[tuple[str, str], ...] = (
    (MEMCPY, r"^\s*(memcpy|memset)\b"),
    (COMMUNICATION, r"nccl|rccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"),
    (TRITON, r"^triton_(?!tem_)"),  # Inductor pointwise / reduction / persistent / combo kernels
    (
        ATTENTION,
        r"flash|fmha|sdpa|_sdp_|flex_?attention|attention|attn|xformers|mha_|"
        r"efficient_attention|mem_eff|paged_?kv|cudnn::fusion::(compute_dot_do_o|convert_dq)",
    ),
)

# Ordered, matched against the kernel's own name (template arguments and parameters cut off, so a
# ``ReduceAdd`` functor inside an elementwise kernel's template does not make it a reduction), then,
# when none matches, against the whole name.
KERNEL_RULES: tuple[tuple[str, str], ...] = (
    (TRITON, _LIGER),
    (LINEAR_ATTENTION, _LINEAR_ATTENTION),
    (GEMM, r"^triton_tem_\w*?(mm|gemm)"),
    (TRITON, r"^triton_"),
    (OPTIMIZER, r"multi_tensor_apply|fused_?adam|adamw|_fused_sgd|fusedsgd|lamb_|adagrad|foreach"),
    (
        GEMM,
        r"gemm|gemv|cutlass|cublas|nvjet|xmma|s16816|s1688|h16816|h1688|hmma|wgmma|splitkreduce|"
        r"matmul|\bmm_kernel|bmm_kernel|dot_kernel|cijk_|_scaled_mm|sgemm|hgemm",
    ),
    (
        NORMALIZATION,
        r"layer_?norm|rms_?norm|l2_?norm|batch_?norm|group_?norm|instance_?norm|rowwisemoments|gammabeta|"
        r"cuapplylayernorm|cuapplyrmsnorm|cucomputegradinput|cucomputepartgradgammabeta|"
        r"cucomputegradgammabeta|welford",
    ),
    (
        SOFTMAX_LOSS,
        r"softmax|nll_?loss|classnllcriterion|cross_?entropy|mse_loss|mse_backward|binary_cross|"
        r"kl_div|smooth_l1|huber|logsumexp",
    ),
    (REDUCTION, r"reduce|reduction|argmax|argmin|cumsum|cumprod|devicescan|scan_kernel|norm_kernel|lpnorm"),
    (
        ELEMENTWISE,
        r"elementwise|vectorized|unrolled|pointwise|fill|copy|catarray|concat|index|gather|scatter|"
        r"embedding|partials_per_segment|partial_segment|compute_grad_weight|segment_offsets|"
        r"dropout|masked|where|clamp|triu|tril|arange|philox|distribution|bernoulli|normal_kernel|"
        r"uniform|transpose|permute|flip|roll|upsample|im2col|col2im|nonzero|_pad|pad_",
    ),
)

_COMPILED_FULL = tuple((cat, re.compile(pattern, re.IGNORECASE)) for cat, pattern in FULL_NAME_RULES)
_COMPILED_KERNEL = tuple((cat, re.compile(pattern, re.IGNORECASE)) for cat, pattern in KERNEL_RULES)
_HEAD = re.compile(r"^(?:void\s+)?([^<(]*)")


def kernel_head(name: str) -> str:
    """The kernel's own name: ``void ns::f<T>(args)`` -> ``ns::f``."""
    match = _HEAD.match(name.replace("(anonymous namespace)", "anon").strip())
    return match.group(1).strip() if match else name


@lru_cache(maxsize=65536)
def classify_kernel(name: str) -> str:
    """Category of a device kernel (or memcpy/memset) name: one of :data:`CATEGORIES`."""
    for category, pattern in _COMPILED_FULL:
        if pattern.search(name):
            return category
    for text in (kernel_head(name), name):
        for category, pattern in _COMPILED_KERNEL:
            if pattern.search(text):
                return category
    return OTHER


# Matched against the operator's name without its namespace and without a trailing "_" (in-place).
CPU_OP_RULES: tuple[tuple[str, str], ...] = (
    (COMMUNICATION, r"^(c10d|_c10d|nccl)|all_?reduce|all_?gather|reduce_?scatter|broadcast_$|alltoall"),
    (OPTIMIZER, r"^_fused_(adam|adamw|sgd|adagrad)|^_foreach_|adam"),
    (
        ATTENTION,
        r"scaled_dot_product|_flash_attention|_efficient_attention|flex_attention|_cudnn_attention|varlen_attn",
    ),
    (
        GEMM,
        r"^(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|addmv|mv|dot|vdot|einsum|_scaled_mm|_addmm_activation)$",
    ),
    (NORMALIZATION, r"rms_norm|layer_norm|batch_norm|group_norm|instance_norm"),
    (
        SOFTMAX_LOSS,
        r"softmax|nll_loss|cross_entropy|mse_loss|binary_cross_entropy|kl_div|smooth_l1|huber|logsumexp",
    ),
    (
        MEMCPY,
        r"^(copy|_copy_from|_copy_from_and_resize|to|_to_copy|clone|contiguous|fill|zero|zeros|zeros_like|"
        r"ones|ones_like|full|full_like|new_zeros|new_ones|new_full|item|_local_scalar_dense|lift_fresh_copy)$",
    ),
    (
        REDUCTION,
        r"^(sum|mean|max|min|amax|amin|norm|linalg_vector_norm|argmax|argmin|var|std|var_mean|"
        r"std_mean|prod|all|any|cumsum|cumprod|count_nonzero|topk|sort|argsort)$",
    ),
    (
        ELEMENTWISE,
        r"^(mul|add|sub|rsub|div|silu|gelu|relu|pow|rsqrt|sqrt|neg|exp|log|log1p|tanh|sigmoid|abs|sin|cos|"
        r"cat|stack|where|masked_fill|masked_scatter|clamp|clamp_min|clamp_max|embedding|index|index_select|"
        r"index_add|index_put|gather|scatter|scatter_add|dropout|native_dropout|reciprocal|square|maximum|"
        r"minimum|triu|tril|arange|lt|le|gt|ge|eq|ne|bitwise_and|bitwise_or|bitwise_not|logical_and|"
        r"logical_or|logical_not|addcmul|addcdiv|lerp|erf|sign|floor|ceil|round|threshold|hardtanh|"
        r"softplus|mish|glu|repeat|repeat_interleave|flip|roll|pad|constant_pad_nd|_unsafe_index|"
        r"rand|randn|uniform|normal|bernoulli|embedding_dense|_embedding_bag|native_dropout|_fused_dropout)$",
    ),
)

_BACKWARD = re.compile(r"_backward(_data)?$")
_COMPILED_CPU = tuple((cat, re.compile(pattern)) for cat, pattern in CPU_OP_RULES)


@lru_cache(maxsize=65536)
def classify_cpu_op(name: str) -> str:
    """Category of a CPU operator such as ``aten::addmm``: one of :data:`CATEGORIES`.

    A backward operator takes its forward's category (``aten::mse_loss_backward`` is softmax/loss).
    Views and allocations (``aten::view``, ``aten::t``, ``aten::empty``) are "other".
    """
    base = name.split("::", 1)[-1]
    base = _BACKWARD.sub("", base.rstrip("_") or base)  # mse_loss_backward -> mse_loss; add_ -> add
    for category, pattern in _COMPILED_CPU:
        if pattern.search(base):
            return category
    return OTHER
