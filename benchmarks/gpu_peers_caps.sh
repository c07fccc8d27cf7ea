#!/usr/bin/env bash
# The GPU rows of "beside the tools people pick, on the GPUs people have", in one job: Unsloth and TRL beside the
# workbook's Qwen3-1.7B and Qwen3-8B LoRA picks, each frozen base's first-step parity against the bf16 base, and the best row over
# each base under memory caps of 80, 48 and 24 GiB. Started through benchmarks/gpu_job.sh with the workbook's wheels
# (../shared/gpu/wheels.sh trl; .whl-ao: bitsandbytes 0.50.2, torchao 0.18.0) in /tmp/site and Unsloth's (scripts/gpu_unsloth_wheels.sh)
# carried in .whl-unsloth, installed here into a site of their own:
#   JOB_WHEELS=".whl .whl-ao" bash benchmarks/gpu_job.sh start 540 bash benchmarks/gpu_peers_caps.sh
# Arguments: the output folder, then the suites to run (default: all four). A suite that fails leaves its records and
# the next suite still runs; each suite's exit status is printed. The random weights saved for Unsloth are removed
# after each suite, so that the next one has the disk (the machine has 64 GB; the 27B's take 54).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/bench}
shift || true
suites=("$@")  # the suites to run, in order (default: all four)
(( ${#suites[@]} )) || suites=(qwen3-1.7b/lora-peers/unsloth qwen3-8b/lora-peers/unsloth qwen3-8b/frozen-base/parity
  qwen3-8b/memory-caps/best)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/unsloth-site .whl-unsloth/*.whl
export NBHELPERS_UNSLOTH_SITE=/tmp/unsloth-site NBHELPERS_UNSLOTH_MODELS=/tmp/unsloth-models
for suite in "${suites[@]}"; do
  python3 -m nbhelpers.cli bench "$suite" --out "$out"
  echo "suite $suite: exit $?"
  rm -rf "$NBHELPERS_UNSLOTH_MODELS"  # one suite's saved random weights (54 GB for the 27B): the next suite's disk
done
