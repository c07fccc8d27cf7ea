#!/usr/bin/env bash
# Regional torch.compile and bf16-master on a lent H200, as a background job in calls made back to back: `start`
# installs the Liger/tokenizer wheels made beforehand on the development machine (and torchao/cut-cross-entropy
# from .whl25 where carried: the `best` group's float8 and CCE rows) and starts the named groups and options (three
# groups by default), waits up to SECONDS and copies what the records and console hold by then to $OUT (the next
# call may find a fresh machine); only if it said "still running", `collect`, made at once, waits and copies again.
#   here, once:   bash ../shared/gpu/wheels.sh .whlmin min && bash benchmarks/next25_wheels.sh .whl25
#   call 1:       bash benchmarks/gpu_regional_job.sh start 540 [GROUP ...] [--profile ...]  (carry .whlmin .whl25)
#   call 2:       bash benchmarks/gpu_regional_job.sh collect 580               (again while it says "still running")
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
out=runs/regional_h200
case "${1:-}" in
  start)
    seconds=${2:-540}
    shift $(( $# >= 2 ? 2 : $# ))
    shopt -s nullglob  # .whl25 (torchao, cut-cross-entropy) only where float8/CCE rows are measured
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whlmin/*.whl .whl25/*.whl
    export NBHELPERS_KERNEL_CACHE=/tmp/nbh-kernel-cache  # one kernel cache for every configuration of the job
    (( $# )) || set -- regional precision startup
    bash benchmarks/device_job.sh start python3 benchmarks/gpu_regional_suite.py "$@" --out "$out"
    bash benchmarks/device_job.sh wait "$seconds" || true
    bash benchmarks/device_job.sh collect "$out" regional.jsonl precision.jsonl startup.jsonl best.jsonl float8.jsonl
    ;;
  collect)
    bash benchmarks/device_job.sh wait "${2:-200}" || true
    bash benchmarks/device_job.sh collect "$out" regional.jsonl precision.jsonl startup.jsonl best.jsonl float8.jsonl
    ;;
  *)
    echo "usage: bash benchmarks/gpu_regional_job.sh start|collect [SECONDS] [GROUP ...]" >&2
    exit 2
    ;;
esac
