#!/usr/bin/env bash
# The new kernel entries (float8, Cut Cross-Entropy) on a lent H200, as a background job in two calls made back to
# back: `start` installs the wheels made beforehand on the development machine and starts the suite, waits up to
# SECONDS and copies what the records and logs hold by then into $OUT (the next call may find a fresh machine);
# `collect`, made at once, waits for the end and copies them again.
#   here, once:   bash ../shared/gpu/wheels.sh .whlmin min && bash benchmarks/next25_wheels.sh .whl25
#   call 1:       bash benchmarks/gpu_next25_job.sh start 560 [GROUP ...]  (carry .whlmin and .whl25; timeout 600;
#                 groups alone best curve by default)
#   call 2:       bash benchmarks/gpu_next25_job.sh collect 580    (again while it says "still running")
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
out=runs/next25
files=(alone.jsonl best.jsonl curve.jsonl curve-verdict.jsonl logs/alone.log logs/best.log)
case "${1:-}" in
  start)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whlmin/*.whl .whl25/*.whl
    seconds=${2:-540}
    shift $(( $# >= 2 ? 2 : $# ))
    (( $# )) || set -- alone best curve
    bash benchmarks/device_job.sh start python3 benchmarks/gpu_next25_suite.py "$@" --out "$out"
    bash benchmarks/device_job.sh wait "$seconds" || true
    bash benchmarks/device_job.sh collect "$out" "${files[@]}"
    ;;
  collect)
    bash benchmarks/device_job.sh wait "${2:-200}" || true
    bash benchmarks/device_job.sh collect "$out" "${files[@]}"
    ;;
  *)
    echo "usage: bash benchmarks/gpu_next25_job.sh start|collect [SECONDS] [GROUP ...]" >&2
    exit 2
    ;;
esac
