#!/usr/bin/env bash
# The new kernel entries (float8, Cut Cross-Entropy) on a lent H200, as a background job in two calls made back to
# back: `start` installs the wheels made beforehand on the development machine and starts the suite, then waits up
# to SECONDS; `collect` waits for the end and copies the records and logs into $OUT.
#   here, once:   bash ../shared/gpu/wheels.sh .whlmin min && bash benchmarks/next25_wheels.sh .whl25
#   call 1:       bash benchmarks/gpu_next25_job.sh start 560      (carry .whlmin and .whl25)
#   call 2:       bash benchmarks/gpu_next25_job.sh collect 580
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
out=runs/next25
case "${1:-}" in
  start)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whlmin/*.whl .whl25/*.whl
    bash benchmarks/device_job.sh start python3 benchmarks/gpu_next25_suite.py alone best curve --out "$out"
    bash benchmarks/device_job.sh wait "${2:-540}" || true
    ;;
  collect)
    bash benchmarks/device_job.sh wait "${2:-200}" || true
    bash benchmarks/device_job.sh collect "$out" alone.jsonl best.jsonl curve.jsonl curve-verdict.jsonl \
      logs/alone.log logs/best.log
    ;;
  *)
    echo "usage: bash benchmarks/gpu_next25_job.sh start|collect [SECONDS]" >&2
    exit 2
    ;;
esac
