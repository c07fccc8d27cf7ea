"""A synthetic torch.profiler Chrome trace shaped like a GPU training step's, of any size: what the trace analysis
is timed on (:mod:`nbhelpers.profiling.analysis_speed`) without shipping a 200 MB trace.

Per launch: a top-level aten op, a nested aten op, a ``cudaLaunchKernel`` with its correlation id, the kernel (real
cuBLAS / flash / elementwise / reduce / FusedAdam / Liger / Inductor names, grid, block, registers) and the ac2g flow
pair; every 97th launch an NCCL kernel on a second stream overlapping compute; a memcpy every 500 launches;
ProfilerStep spans of 6,500 launches (the Qwen3-1.7B baseline on an H200 had about 6,400 a step).
"""

from __future__ import annotations

import random
from pathlib import Path

# (aten op, kernel name, typical duration us, grid x) drawn with these weights
KERNELS = [
    ("aten::mm", "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", 120.0, 132, 8),
    (
        "aten::mm",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_execute_segment_k_"
        "off_kernel__5x_cublas",
        80.0,
        66,
        6,
    ),
    (
        "aten::_scaled_dot_product_flash_attention",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
        "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
        200.0,
        256,
        2,
    ),
    (
        "aten::mul",
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
        "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, "
        "3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)",
        6.0,
        1056,
        20,
    ),
    (
        "aten::add",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        5.0,
        1056,
        14,
    ),
    (
        "aten::copy_",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
        "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda"
        "(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffset"
        "Calculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast"
        "<1> >(int, ...)",
        4.0,
        528,
        12,
    ),
    (
        "aten::mean",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
        "float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps"
        "<float, float, float, float>, unsigned int, float, 4>)",
        8.0,
        64,
        6,
    ),
    (
        "aten::_log_softmax",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::"
        "(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
        300.0,
        2048,
        1,
    ),
    (
        "aten::_fused_adamw_",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)"
        "::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float*, double, float*, float*, double, double, double, double, "
        "bool, float const*, float const*>(...)",
        40.0,
        320,
        2,
    ),
    ("aten::rms_norm", "_rms_norm_forward_kernel", 10.0, 4096, 4),
    ("aten::add", "triton_poi_fused__to_copy_add_mul_0", 3.0, 512, 6),
]

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def write_trace(path: Path, size_mb: float, seed: int = 0) -> dict[str, int]:
    """Write a synthetic trace of about size_mb megabytes; returns what it holds."""
    rng = random.Random(seed)
    weights = [k[4] for k in KERNELS]
    target = size_mb * 1e6
    pid, tid = 4242, 4242
    launches_per_step = 6_500  # the Qwen3-1.7B baseline on an H200 had ~6,400
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115
    out.write(
        '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": '
        '150754820096, "computeMajor": 9, "computeMinor": 0, "numSms": 132}], "distributedInfo": '
        '{"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": [\n'
    )
    out.write(f'{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, "args": {{"name": "python"}}}}')
    written, step, corr, cpu_t, gpu_t = 0, 0, 0, 1_000_000.0, 1_000_050.0
    counts = {"kernels": 0, "memcpy": 0, "cpu_ops": 0, "steps": 0}
    while written < target:
        step_start = cpu_t
        lines = []
        for i in range(launches_per_step):
            op, kernel, mean, grid, _ = rng.choices(KERNELS, weights)[0]
            corr += 1
            dur = round(rng.uniform(0.5, 1.5) * mean, 3)
            gpu_t = max(gpu_t, cpu_t + 8.0) + round(rng.uniform(0.5, 3.0), 3)
            lines.append(
                f'{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {pid}, "tid": {tid}, "ts": '
                f'{cpu_t:.3f}, "dur": 9.5, "args": {{"External id": {corr}, "Sequence number": {corr}, '
                f'"Fwd thread id": 0, "Record function id": 0, "Ev Idx": {corr}}}}}'
            )
            lines.append(
                f'{{"ph": "X", "cat": "cpu_op", "name": "aten::empty_strided", "pid": {pid}, "tid": {tid}, '
                f'"ts": {cpu_t + 0.5:.3f}, "dur": 1.2, "args": {{"External id": {corr}, "Ev Idx": {corr}}}}}'
            )
            lines.append(
                f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, '
                f'"tid": {tid}, "ts": {cpu_t + 2:.3f}, "dur": 4.1, "args": {{"External id": {corr}, '
                f'"cbid": 211, "correlation": {corr}}}}}'
            )
            stream = 20 if i % 97 == 0 else 7  # an all-reduce on a second stream, overlapping compute
            if stream == 20:
                kernel, dur = NCCL, round(rng.uniform(30.0, 90.0), 3)
            lines.append(
                f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": 0, "tid": {stream}, "ts": '
                f'{gpu_t:.3f}, "dur": {dur}, "args": {{"External id": {corr}, "queued": 0, "device": 0, '
                f'"context": 1, "stream": {stream}, "correlation": {corr}, "registers per thread": 128, '
                f'"shared memory": 49152, "blocks per SM": {grid / 132:.6f}, "warps per SM": 8.0, '
                f'"grid": [{grid}, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 25}}}}'
            )
            lines.append(
                f'{{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {cpu_t + 2:.3f}, '
                f'"cat": "ac2g", "name": "ac2g"}}'
            )
            lines.append(
                f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {gpu_t:.3f}, "cat": "ac2g", '
                f'"name": "ac2g", "bp": "e"}}'
            )
            counts["kernels"] += 1
            counts["cpu_ops"] += 2
            if i % 500 == 0:
                corr += 1
                lines.append(
                    f'{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", '
                    f'"pid": 0, "tid": 7, "ts": {gpu_t + dur + 1:.3f}, "dur": 3.2, "args": {{"device": 0, '
                    f'"context": 1, "stream": 7, "correlation": {corr}, "bytes": 1048576, '
                    f'"memory bandwidth (GB/s)": 327.6}}}}'
                )
                counts["memcpy"] += 1
                gpu_t += 4.5
            gpu_t += dur if stream == 7 else 0.0
            cpu_t += 10.0
        cpu_t = max(cpu_t, gpu_t) + 20.0
        lines.append(
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {pid}, '
            f'"tid": {tid}, "ts": {step_start:.3f}, "dur": {cpu_t - step_start:.3f}, '
            f'"args": {{"External id": 0}}}}'
        )
        counts["steps"] += 1
        chunk = ",\n" + ",\n".join(lines)
        out.write(chunk)
        written += len(chunk)
        step += 1
    out.write('\n], "traceName": "synthetic", "displayTimeUnit": "ms"}\n')
    out.close()
    counts["bytes"] = path.stat().st_size
    return counts
