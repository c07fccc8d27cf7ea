#!/usr/bin/env bash
# One job on a lent GPU machine: started in its own session (setsid nohup) so that it outlives the call, waited for
# up to SECONDS, and what it wrote collected into $OUT within the same call (a later call may find a fresh machine);
# `collect`, in a call made at once while the machine is still warm, waits again and collects again.
#   bash benchmarks/gpu_job.sh start SECONDS CMD [ARG ...]   # install the carried wheels, start CMD, wait, collect
#   bash benchmarks/gpu_job.sh collect SECONDS               # wait for the job started before, collect
#   bash benchmarks/gpu_job.sh wait SECONDS                  # print its new console lines until it ends
# CMD is a benchmark suite or the GPU command, for example
#   bash benchmarks/gpu_job.sh start 560 python3 -m nbhelpers.cli bench qwen3-1.7b/regional-compile --out runs/bench
#   JOB_KERNEL=python3 bash benchmarks/gpu_job.sh start 580 bash scripts/run_workbook_gpu.sh
# Collected into $OUT: console.log, and the runs folder ($JOB_COLLECT, default runs/) as runs.tgz without traces and
# kernel caches (JOB_TRACES=1 keeps the traces). Before CMD starts, the wheels of every carried .whl* folder
# ($JOB_WHEELS: folders, default .whl*; ../shared/gpu/wheels.sh and benchmarks/float8_cce_wheels.sh make them) go into
# /tmp/site, and with JOB_KERNEL=NAME this python is registered as the Jupyter kernel NAME. The job's console, pid and
# exit status are in $DEVICE_JOB_DIR (default /tmp/job); `wait` exits 0 once the job has ended, 3 while it runs;
# `start` refuses (exit 4) while an earlier job runs: two jobs on one GPU share its memory and time. Records name
# their code by $NBHELPERS_COMMIT where the machine has no git history (pass it in the command's environment).
set -euo pipefail
cd "$(dirname "$0")/.."
job=${DEVICE_JOB_DIR:-/tmp/job}
collected=${JOB_COLLECT:-runs}
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export NBHELPERS_KERNEL_CACHE=${NBHELPERS_KERNEL_CACHE:-/tmp/nbh-kernel-cache} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

running() {
  [[ -f $job/pid && ! -f $job/rc ]] && kill -0 "$(cat "$job/pid")" 2> /dev/null
}

install_wheels() {
  shopt -s nullglob
  local wheels=() folder
  for folder in ${JOB_WHEELS-.whl*}; do wheels+=("$folder"/*.whl); done
  if (( ${#wheels[@]} )); then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"
  fi
  if [[ -n ${JOB_KERNEL:-} ]]; then python3 -m ipykernel install --user --name "$JOB_KERNEL" > /dev/null; fi
}

start_job() {
  mkdir -p "$job"
  if running; then
    echo "a job is still running (pid $(cat "$job/pid")): wait for it or collect it before starting another;" \
      "two jobs on one GPU share its memory and time, and the second would overwrite the first's console" >&2
    exit 4
  fi
  rm -f "$job/rc"
  setsid nohup bash -c 'rc=$1; shift; "$@"; echo $? > "$rc"' job "$job/rc" "$@" > "$job/console.log" 2>&1 < /dev/null &
  echo $! > "$job/pid"
  echo "started: $*"
}

wait_job() {
  local limit=$1 start shown=0 lines ended
  start=$(date +%s)
  while :; do
    ended=0
    [[ -f $job/rc ]] && ended=1  # before the console is read: the lines a job wrote just before it ended are shown
    lines=$(wc -l < "$job/console.log")
    if (( lines > shown )); then
      sed -n "$((shown + 1)),${lines}p" "$job/console.log" | grep -E '^\[|tok/s|failed|Error|error|Traceback' || true
      shown=$lines
    fi
    if (( ended )); then echo "job ended: status $(cat "$job/rc")"; return 0; fi
    (( $(date +%s) - start >= limit )) && { echo "job still running after ${limit}s"; return 3; }
    sleep 5
  done
}

collect() {
  cp "$job/console.log" "$OUT/console.log"
  if [[ -d $collected ]]; then
    local skip=(--exclude='*/kernel-caches/*' --exclude='*/.kernel-cache/*' --exclude='*.tar.gz')
    [[ ${JOB_TRACES:-} == 1 ]] || skip+=(--exclude='*/traces/*')
    tar czf "$OUT/runs.tgz" "${skip[@]}" "$collected"
  fi
  ls -la "$OUT"
}

case "${1:-}" in
  start)
    seconds=${2:?seconds}
    shift 2
    (( $# )) || { echo "start: name the command to run" >&2; exit 2; }
    running && start_job "$@"  # refuses with its message before anything is installed
    install_wheels
    start_job "$@"
    wait_job "$seconds" || true
    collect
    ;;
  collect)
    wait_job "${2:-200}" || true
    collect
    ;;
  wait)
    wait_job "${2:?seconds}"
    ;;
  *)
    echo "usage: $0 start SECONDS CMD... | collect [SECONDS] | wait SECONDS" >&2
    exit 2
    ;;
esac
