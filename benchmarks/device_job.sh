#!/usr/bin/env bash
# One benchmark job on a GPU machine that outlives a single call: started in its own process session in one
# call, waited for (and collected) in the next ones, made right away while the machine is still warm.
#   bash benchmarks/device_job.sh start CMD ARGS...   # starts CMD with setsid; its console in /tmp/job/console.log
#   bash benchmarks/device_job.sh wait SECONDS        # prints new console lines until CMD ends or SECONDS pass
#   bash benchmarks/device_job.sh collect DIR [FILE...]  # copies the console and the named files of DIR to $OUT
# Exit status of wait: 0 when the job ended (its status in /tmp/job/rc), 3 while it still runs; start refuses (4)
# while an earlier job still runs.
set -euo pipefail
job=${DEVICE_JOB_DIR:-/tmp/job}  # one job at a time: its console, pid and exit status
case "${1:-}" in
  start)
    shift
    mkdir -p "$job"
    if [[ -f $job/pid && ! -f $job/rc ]] && kill -0 "$(cat "$job/pid")" 2> /dev/null; then
      echo "a job is still running (pid $(cat "$job/pid")): wait for it or collect it before starting another;" \
        "two jobs on one GPU share its memory and time, and the second would overwrite the first's console" >&2
      exit 4
    fi
    rm -f "$job/rc"
    setsid nohup bash -c 'rc=$1; shift; "$@"; echo $? > "$rc"' job "$job/rc" "$@" > "$job/console.log" 2>&1 < /dev/null &
    echo $! > "$job/pid"
    echo "started: $*"
    ;;
  wait)
    limit=${2:?seconds}
    start=$(date +%s)
    shown=0
    while :; do
      lines=$(wc -l < "$job/console.log")
      if (( lines > shown )); then sed -n "$((shown + 1)),${lines}p" "$job/console.log" | grep -E '^\[|Error|error|Traceback' || true; shown=$lines; fi
      if [[ -f $job/rc ]]; then echo "job ended: status $(cat "$job/rc")"; exit 0; fi
      (( $(date +%s) - start >= limit )) && { echo "job still running after ${limit}s"; exit 3; }
      sleep 5
    done
    ;;
  collect)
    dir=${2:?folder}
    shift 2
    cp "$job/console.log" "$OUT/console.log"
    for name in "$@"; do [[ -f $dir/$name ]] && cp "$dir/$name" "$OUT/$(echo "$name" | tr / _)"; done
    ls -la "$OUT"
    ;;
  *)
    echo "usage: $0 start CMD... | wait SECONDS | collect DIR [FILE...]" >&2
    exit 2
    ;;
esac
