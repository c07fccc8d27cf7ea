#!/usr/bin/env bash
# The whole notebook sequence on one CUDA GPU, with the tuner, at sizes that fit one GPU: the Qwen3-1.7B shape
# (random weights), batch 8 x 2048 tokens, one timed epoch per configuration. Prints where the report is.
# Any value below can be overridden from the environment, e.g. MODEL=qwen3-0.6b TUNE_BUDGET_S=120, or
# MODEL=qwen3.8-27b ADAPTER=lora (LoRA adapters on a frozen bf16 base, in every notebook);
# extra arguments go to `nbhelpers run-all` (e.g. -p 03:PROFILE=false). WORKBOOK_PYTHON=python3 uses that
# interpreter's packages as they are instead of setting up .venv (a machine without network access).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n ${BACKENDS:-} ]]; then
  echo "run_workbook_gpu.sh: BACKENDS is now KERNELS (notebooks 02 and 03): KERNELS=$BACKENDS" >&2
  exit 2
fi
no_gpu() {
  echo "run_workbook_gpu.sh: no CUDA GPU here ($1); this command needs one." >&2
  echo "On a CPU, run scripts/run_workbook.sh (the tiny preset) instead." >&2
  exit 2
}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  no_gpu "nvidia-smi finds no device"
fi
if [[ -n ${WORKBOOK_PYTHON:-} ]]; then  # an environment that already has the workbook's packages (no set-up)
  PY=$WORKBOOK_PYTHON
else
  bash scripts/setup.sh
  PY=.venv/bin/python
fi
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" \
  || no_gpu "torch $("$PY" -c 'import torch; print(torch.__version__)') sees no CUDA device"

RUN_NAME=${RUN_NAME:-gpu}
MODEL=${MODEL:-qwen3-1.7b}
BATCH_SIZE=${BATCH_SIZE:-8}
MAX_LENGTH=${MAX_LENGTH:-2048}
NUM_SAMPLES=${NUM_SAMPLES:-32}
ADAPTER=${ADAPTER:-none}                               # every notebook: none (full fine-tuning) or lora
LORA_RANK=${LORA_RANK:-16}                             # with ADAPTER=lora: rank, alpha, PEFT's target_modules
LORA_ALPHA=${LORA_ALPHA:-32}
LORA_TARGETS=${LORA_TARGETS:-all-linear}
ACTIVATION_CHECKPOINTING=${ACTIVATION_CHECKPOINTING:-none}  # none, full or every_k (layers recomputed: less memory)
DTYPE=${DTYPE:-auto}                                   # notebooks 01-03: auto (fp32 weights + bf16 autocast), bf16-master, ...
KERNELS=${KERNELS:-eager,liger}                        # notebook 02's backends, notebook 03's grid and tuner
STRATEGIES=${STRATEGIES:-static,packed,token_budget}   # notebook 03
ATTENTION=${ATTENTION:-sdpa,torch_varlen}              # notebook 03
TUNE_BUDGET_S=${TUNE_BUDGET_S:-240}                    # notebook 03's tuner: seconds for its whole search
PEER_ROWS=${PEER_ROWS-trl_defaults,trl_best,trl}       # notebook 04: TRL SFTTrainer beside the recommendation
CONVERGENCE_STEPS=${CONVERGENCE_STEPS:-50}             # notebook 04: loss curves, recommendation vs baseline

# A parameter reaches only the notebooks whose parameters cell declares it; NN: limits it to notebook NN.
exec "$PY" -m nbhelpers.cli run-all --run-name "$RUN_NAME" \
  -p "MODEL=$MODEL" -p "BATCH_SIZE=$BATCH_SIZE" -p "MAX_LENGTH=$MAX_LENGTH" -p "NUM_SAMPLES=$NUM_SAMPLES" \
  -p "TIMING=epoch" \
  -p "ADAPTER=$ADAPTER" -p "LORA_RANK=$LORA_RANK" -p "LORA_ALPHA=$LORA_ALPHA" -p "LORA_TARGETS=$LORA_TARGETS" \
  -p "ACTIVATION_CHECKPOINTING=$ACTIVATION_CHECKPOINTING" \
  -p "01:DTYPE=$DTYPE" -p "02:DTYPE=$DTYPE" -p "03:DTYPE=$DTYPE" \
  -p "02:KERNELS=$KERNELS" -p "03:KERNELS=$KERNELS" \
  -p "03:STRATEGIES=$STRATEGIES" -p "03:ATTENTION=$ATTENTION" \
  -p "03:TUNE_BUDGET_S=$TUNE_BUDGET_S" \
  -p "04:PEER_ROWS=$PEER_ROWS" -p "04:CONVERGENCE_STEPS=$CONVERGENCE_STEPS" \
  "$@"
