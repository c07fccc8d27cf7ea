#!/usr/bin/env bash
# A fresh machine's first step from kernels compiled on another machine (the seed's pre-built kernels): each suite run
# on empty kernel caches of its own, its caches archived; then, on a fresh machine, each suite's archive unpacked and
# the suite run again. Compare the two records' first_step_s (and phase_s): cold against carried.
#   bash benchmarks/gpu_fresh_start.sh make OUT SUITE [SUITE ...]            # machine A: cold; OUT/archives/*.tgz
#   bash benchmarks/gpu_fresh_start.sh start ARCHIVES OUT SUITE [SUITE ...]  # machine B (fresh): from A's archives
# Suites: qwen3-1.7b/fresh-machine/pick (Liger, token budget 16k, varlen) and hybrid/qwen3.8-27b-lora/fresh-machine/pick
# (fla + Liger; fla and tilelang installed first, ../shared/gpu/hybrid_wheels.sh). Records go to OUT/cold/<suite>.jsonl
# or OUT/carried/<suite>.jsonl. Each archive's size is printed with what each cache holds: a device call carries at
# most 64 MiB with the checkout, so a larger one cannot travel to the second machine that way, and the line says so.
# The archives are .tgz, which benchmarks/gpu_job.sh collects with the runs folder (JOB_COLLECT=OUT), for example
#   JOB_COLLECT=runs/fresh bash benchmarks/gpu_job.sh start 560 bash benchmarks/gpu_fresh_start.sh make runs/fresh \
#     qwen3-1.7b/fresh-machine/pick hybrid/qwen3.8-27b-lora/fresh-machine/pick
# then give the machine back, unpack runs.tgz here, move runs/fresh/archives to runs/fresh-archives (carried), and on
# the next machine
#   JOB_COLLECT=runs/fresh bash benchmarks/gpu_job.sh start 560 bash benchmarks/gpu_fresh_start.sh start \
#     runs/fresh-archives runs/fresh qwen3-1.7b/fresh-machine/pick ...
# BENCH_FLAGS=--rehearse runs the same commands on the tiny presets, on a CPU. Exit status 1 when a suite failed.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 make OUT SUITE [SUITE ...] | start ARCHIVES OUT SUITE [SUITE ...]"
mode=${1:?$usage}
shift
case $mode in
  make) out=${1:?$usage}; shift; archives=$out/archives ;;
  start) archives=${1:?$usage}; out=${2:?$usage}; shift 2
    [[ -d $archives ]] || { echo "ARCHIVES=$archives: no such folder (made by '$0 make' on another machine)" >&2; exit 2; } ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
(( $# )) || { echo "$usage" >&2; exit 2; }
caches=/tmp/nbh-fresh-start-caches  # this machine's kernel caches, one folder per suite: empty at the start
rm -rf "$caches"
mkdir -p "$caches" "$out" "$archives"
folder=$out/$([[ $mode == make ]] && echo cold || echo carried)
failed=0
for suite in "$@"; do
  slug=${suite//\//_}
  export NBHELPERS_KERNEL_CACHE=$caches/$slug
  mkdir -p "$NBHELPERS_KERNEL_CACHE"
  if [[ $mode == start ]]; then
    [[ -f $archives/$slug.tgz ]] || { echo "$archives/$slug.tgz: no archive of $suite" >&2; failed=1; continue; }
    python3 -c "import sys; from nbhelpers.kernels.cache import import_cache; print(len(import_cache(*sys.argv[1:])), 'files unpacked into', sys.argv[2])" \
      "$archives/$slug.tgz" "$NBHELPERS_KERNEL_CACHE"
  fi
  rc=0
  python3 -m nbhelpers.cli bench "$suite" --out "$folder" ${BENCH_FLAGS:-} || rc=$?
  echo "suite $suite: exit $rc"
  (( rc == 0 )) || failed=1
  if [[ $mode == make ]]; then
    python3 - "$NBHELPERS_KERNEL_CACHE" "$archives/$slug.tgz" <<'EOF'
import sys
from nbhelpers.kernels.cache import cache_summary, export_cache

archive = export_cache(sys.argv[1], sys.argv[2])
mib = archive.stat().st_size / 2**20
print(f"{archive}: {mib:.1f} MiB; {cache_summary(sys.argv[1])}")
if mib > 50:
    print(f"{mib:.1f} MiB with the checkout is more than a device call carries (64 MiB): not carried that way")
EOF
  fi
done
exit $failed
