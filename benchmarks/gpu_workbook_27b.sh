#!/usr/bin/env bash
# The notebook sequence on the seed's model: the Qwen3.8-27B shape (random weights) with LoRA on one H200,
# through the GPU command at sizes that fit one GPU and end within a device session. Every notebook gets
# ADAPTER=lora (frozen bf16 base) and full activation checkpointing (the reference path's padded step at
# batch 4 x 2048 needs it: 79 GiB measured); notebook 02 compares the reference path with fla + Liger, notebook
# 03 measures a token budget on both (their static padding is notebook 02's record of the same workload, which
# the report and the tuner read from the run's store) and runs the tuner; notebook 04 the TRL export beside
# the recommendation; notebook 05 the 27B on one GPU (its N-GPU LoRA run is refused) and the planner's 27B rows.
# Usage, on the GPU machine with the workbook's packages importable: bash benchmarks/gpu_workbook_27b.sh
# (RUN_NAME, NUM_SAMPLES, TUNE_BUDGET_S from the environment; extra arguments go to run-all).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUN_NAME=${RUN_NAME:-gpu27b} MODEL=qwen3.8-27b ADAPTER=lora ACTIVATION_CHECKPOINTING=full
export BATCH_SIZE=4 MAX_LENGTH=2048 NUM_SAMPLES=${NUM_SAMPLES:-16}
export KERNELS=eager,fla+liger STRATEGIES=token_budget ATTENTION=sdpa
export TUNE_BUDGET_S=${TUNE_BUDGET_S:-120} PEER_ROWS=trl CONVERGENCE_STEPS=0
export WORKBOOK_PYTHON=${WORKBOOK_PYTHON:-python3}
# With a frozen output layer Liger's fused linear cross-entropy is not slower (benchmarks/gpu/NOTES.md, LoRA).
exec bash scripts/run_workbook_gpu.sh \
  -p LIGER_KERNELS=rms_norm,swiglu,fused_linear_cross_entropy -p 02:MEASURE_STARTUP=false \
  -p 03:PROFILE=false -p 03:TUNE_TOKEN_BUDGETS=0,16384 \
  -p 05:KERNELS=fla+liger -p 05:PADDING=token_budget -p 05:PLAN_MODEL=qwen3.8-27b -p 05:PLAN_TOKENS=16384 \
  "$@"
