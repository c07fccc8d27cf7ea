"""Kernel and aten-operator classification on real names (kept whole, however long)."""

# ruff: noqa: E501

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nbhelpers.profiling.classify import CATEGORIES, classify_cpu_op, classify_kernel

KERNELS = [
    # Names from the shipped H200 trace that earlier rules missed
    (
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, void const*, void*, void*, unsigned int)",
        "attention",
    ),
    (
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, float const*, bool, bool)",
        "attention",
    ),
    (
        "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, true, float>(float const*, at::native::TensorListAddresses, int)",
        "reduction",
    ),
    # GEMM: cuBLAS / CUTLASS / Hopper nvjet / gemv / split-K
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_execute_segment_k_off_kernel__5x_cublas",
        "GEMM",
    ),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", "GEMM"),
    ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "GEMM"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn", "GEMM"),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8", "GEMM"),
    (
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)",
        "GEMM",
    ),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, false, true, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
        "GEMM",
    ),
    (
        "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, void*, long, float*, int*)",
        "GEMM",
    ),
    ("triton_tem_fused_mm_0", "GEMM"),
    # attention
    (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
        "attention",
    ),
    (
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, true, false, false>(pytorch_flash::Flash_bwd_params)",
        "attention",
    ),
    (
        "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params)",
        "attention",
    ),
    (
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
        "attention",
    ),
    (
        "fmha_cutlassB_bf16_aligned_64x64_k128_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 128, false>::Params)",
        "attention",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
        "attention",
    ),
    ("triton_tem_fused_flex_attention_0", "attention"),
    ("triton_tem_fused_flex_attention_backward_1", "attention"),
    ("flex_attention", "attention"),
    # normalization
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
        "normalization",
    ),
    (
        "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float, false>(float const*, float const*, float const*, float const*, float const*, float*, int)",
        "normalization",
    ),
    (
        "void at::native::(anonymous namespace)::rms_norm_kernel<float>(float const*, float*, int)",
        "normalization",
    ),
    (
        "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>(long, float, float const*, float*, float*)",
        "normalization",
    ),
    # Liger Triton kernels
    ("_rms_norm_forward_kernel", "Triton/Liger"),
    ("_rms_norm_backward_kernel", "Triton/Liger"),
    ("_swiglu_forward_kernel", "Triton/Liger"),
    ("_swiglu_backward_kernel", "Triton/Liger"),
    ("_triton_rope", "Triton/Liger"),
    ("liger_cross_entropy_kernel", "Triton/Liger"),
    ("element_mul_kernel", "Triton/Liger"),
    ("_fused_linear_cross_entropy_forward", "Triton/Liger"),
    ("_layer_norm_forward_kernel", "Triton/Liger"),
    # Cut Cross-Entropy (cut_cross_entropy 25.1.1)
    ("_cce_lse_forward_kernel", "Triton/Liger"),
    ("_cce_backward_kernel", "Triton/Liger"),
    ("_indexed_neg_dot_forward_kernel", "Triton/Liger"),
    # Inductor generated Triton kernels
    ("triton_poi_fused_add_mul_0", "Triton/Liger"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", "Triton/Liger"),
    ("triton_per_fused__log_softmax_backward_data_nll_loss_backward_2", "Triton/Liger"),
    # elementwise (pointwise, copies run as kernels, fill, indexing, cat)
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        "elementwise",
    ),
    (
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)",
        "elementwise",
    ),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})",
        "elementwise",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
        "elementwise",
    ),
    (
        "void at::native::embedding_backward_feature_kernel<float, float, long>(long const*, float const*, float*, int, long, int)",
        "elementwise",
    ),
    (
        "void at::native::_scatter_gather_elementwise_kernel<128, 8, at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1}>(int, at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1})",
        "elementwise",
    ),
    (
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&, bool)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&, bool)::{lambda(int)#1})",
        "elementwise",
    ),
    # reduction
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)",
        "reduction",
    ),
    (
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, float, 4>)",
        "reduction",
    ),
    # softmax / loss
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
        "softmax/loss",
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)",
        "softmax/loss",
    ),
    (
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)",
        "softmax/loss",
    ),
    (
        "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)",
        "softmax/loss",
    ),
    ("cross_entropy_loss_kernel", "softmax/loss"),
    # optimizer
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, float*, float*, double, double, double, double, bool, float const*, float const*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, float*, float*, double, double, double, double, bool, float const*, float const*)",
        "optimizer",
    ),
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 2, 1, 1>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 2, 1, 1>, std::multiplies<float>, float)",
        "optimizer",
    ),
    ("_fused_adamw_kernel", "optimizer"),
    # memcpy / memset
    ("Memcpy DtoD (Device -> Device)", "memcpy/memset"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy/memset"),
    ("Memset (Device)", "memcpy/memset"),
    # communication
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    # other: sorting
    (
        "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::DeviceRadixSortPolicy<long, long, int>::Policy800, false, long, long, int, int>(int*, int*, long*, long const*, long*, long const*, int, int, int)",
        "other",
    ),
    ("some_unknown_kernel", "other"),
    # Hybrid (Gated DeltaNet) fused path: flash-linear-attention's Triton kernels, TileLang, causal-conv1d
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "linear attention"),
    ("chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64", "linear attention"),
    ("chunk_gated_delta_rule_fwd_kkt_solve_kernel", "linear attention"),
    ("chunk_fwd_kernel_o", "linear attention"),
    ("chunk_bwd_kernel_dqkwg", "linear attention"),
    ("chunk_bwd_kernel_dv_local", "linear attention"),
    ("chunk_scaled_dot_kkt_fwd_kernel", "linear attention"),
    ("recompute_w_u_fwd_kernel", "linear attention"),
    ("prepare_wy_repr_bwd_kernel", "linear attention"),
    ("solve_tril_16x16_kernel", "linear attention"),
    ("merge_16x16_to_64x64_inverse_kernel", "linear attention"),
    ("chunk_local_cumsum_scalar_kernel", "linear attention"),
    ("gdn_gate_fwd_kernel", "linear attention"),
    ("fused_recurrent_gated_delta_rule_fwd_kernel", "linear attention"),
    ("chunk_bwd_dqkwg_tilelang", "linear attention"),
    ("kernel_kernel", "linear attention"),
    ("causal_conv1d_fwd_kernel", "linear attention"),
    ("causal_conv1d_bwd_kernel", "linear attention"),
    (
        "void causal_conv1d_channellast_fwd_kernel<Causal_conv1d_channellast_fwd_kernel_traits<128, 4, 64, true, 8, c10::BFloat16, c10::BFloat16> >(ConvParamsBase)",
        "linear attention",
    ),
    ("l2norm_fwd_kernel", "normalization"),
    ("l2norm_bwd_kernel1", "normalization"),
    ("layer_norm_gated_fwd_kernel", "normalization"),
    ("parallel_attn_fwd_tilelang", "attention"),
]

CPU_OPS = [
    ("aten::mm", "GEMM"),
    ("aten::addmm", "GEMM"),
    ("aten::bmm", "GEMM"),
    ("aten::matmul", "GEMM"),
    ("aten::linear", "GEMM"),
    ("aten::scaled_dot_product_attention", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::_scaled_dot_product_efficient_attention", "attention"),
    ("aten::_flash_attention_backward", "attention"),
    ("torch_attn::_varlen_attn", "attention"),  # torch.nn.attention.varlen (attn_implementation="torch_varlen")
    ("torch_attn::_varlen_attn_backward", "attention"),
    ("aten::rms_norm", "normalization"),
    ("aten::_fused_rms_norm", "normalization"),
    ("aten::native_layer_norm", "normalization"),
    ("aten::native_layer_norm_backward", "normalization"),
    ("aten::_softmax", "softmax/loss"),
    ("aten::_log_softmax", "softmax/loss"),
    ("aten::_log_softmax_backward_data", "softmax/loss"),
    ("aten::nll_loss_forward", "softmax/loss"),
    ("aten::cross_entropy_loss", "softmax/loss"),
    ("aten::mse_loss_backward", "softmax/loss"),
    ("aten::_fused_adamw_", "optimizer"),
    ("aten::_foreach_mul_", "optimizer"),
    ("aten::_foreach_norm", "optimizer"),
    ("aten::copy_", "memcpy/memset"),
    ("aten::to", "memcpy/memset"),
    ("aten::_to_copy", "memcpy/memset"),
    ("aten::fill_", "memcpy/memset"),
    ("aten::zero_", "memcpy/memset"),
    ("aten::sum", "reduction"),
    ("aten::mean", "reduction"),
    ("aten::max", "reduction"),
    ("aten::norm", "reduction"),
    ("aten::mul", "elementwise"),
    ("aten::add_", "elementwise"),
    ("aten::silu", "elementwise"),
    ("aten::silu_backward", "elementwise"),
    ("aten::pow", "elementwise"),
    ("aten::rsqrt", "elementwise"),
    ("aten::neg", "elementwise"),
    ("aten::cat", "elementwise"),
    ("aten::embedding", "elementwise"),
    ("aten::embedding_dense_backward", "elementwise"),
    ("aten::view", "other"),
    ("aten::t", "other"),
    ("aten::empty", "other"),
]


@pytest.mark.parametrize(("name", "category"), KERNELS, ids=[n[:60] for n, _ in KERNELS])
def test_classify_kernel(name: str, category: str) -> None:
    assert classify_kernel(name) == category


@pytest.mark.parametrize(("name", "category"), CPU_OPS, ids=[n for n, _ in CPU_OPS])
def test_classify_cpu_op(name: str, category: str) -> None:
    assert classify_cpu_op(name) == category


def test_every_category_is_reachable() -> None:
    assert {c for _, c in KERNELS} == set(CATEGORIES)
    assert len(CATEGORIES) == 12


H200_TRACE = Path(__file__).resolve().parents[2] / "data" / "h200_qwen3-1.7b_baseline.trace.json.gz"

# Kernels that are "other" on purpose: they fit no category of the design (sorting, scans, RNG setup).
ALLOWED_OTHER = (
    r"RadixSort",
    r"bitonicSort",
    r"DeviceSelect",
    r"DeviceCompactInitKernel",
    r"DeviceScanInitKernel",
    r"DeviceUniqueByKey",  # de-duplicates token ids in the embedding backward
)


def test_h200_trace_names_are_known() -> None:
    """Every kernel of the recorded H200 trace that lands in "other" is an accepted unknown."""
    if not H200_TRACE.exists():
        pytest.skip(f"{H200_TRACE.relative_to(H200_TRACE.parents[1])} is absent (the recorded GPU trace)")
    from nbhelpers.profiling.parse import load_trace

    trace = load_trace(H200_TRACE)
    assert trace.is_gpu
    other = sorted(set(trace.kernels.loc[trace.kernels["category"] == "other", "name"]))
    unexpected = [name for name in other if not any(re.search(p, name) for p in ALLOWED_OTHER)]
    print(f"{len(other)} kernel names in 'other':", *other, sep="\n  ")
    assert not unexpected, "kernels the classifier should know:\n" + "\n".join(unexpected)
