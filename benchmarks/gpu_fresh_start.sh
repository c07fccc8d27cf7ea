#!/usr/bin/env bash
# A fresh machine's first step from kernels compiled on another machine (the seed's pre-built kernels): a suite run
# on empty kernel caches, its caches archived; then, on a fresh machine, the archive unpacked and the same suite
# run again. Compare the two records' first_step_s (and phase_s): cold against carried.
#   bash benchmarks/gpu_fresh_start.sh make OUT SUITE [SUITE ...]          # machine A: cold; OUT/kernel-cache.tar.gz
#   bash benchmarks/gpu_fresh_start.sh start ARCHIVE OUT SUITE [SUITE ...] # machine B (fresh): from A's archive
# Suites: qwen3-1.7b/fresh-machine/pick (Liger, token budget 16k, varlen) and hybrid/qwen3.8-27b-lora/fresh-machine/pick
# (fla + Liger; fla and tilelang wheels installed first, ../shared/gpu/hybrid_wheels.sh). Records go to
# OUT/cold/<suite>.jsonl or OUT/carried/<suite>.jsonl. The archive's size is printed with what each cache holds:
# a device call carries at most 64 MiB with the checkout, so a larger archive cannot travel to the second machine
# that way, and the line says so. Run each mode through benchmarks/gpu_job.sh (JOB_COLLECT=OUT), for example
#   JOB_COLLECT=runs/fresh bash benchmarks/gpu_job.sh start 560 bash benchmarks/gpu_fresh_start.sh make runs/fresh \
#     qwen3-1.7b/fresh-machine/pick hybrid/qwen3.8-27b-lora/fresh-machine/pick
# then give the machine back, put the archive under an ignored path (runs/fresh-archive/), and on the next machine
#   JOB_COLLECT=runs/fresh bash benchmarks/gpu_job.sh start 560 bash benchmarks/gpu_fresh_start.sh start \
#     runs/fresh-archive/kernel-cache.tar.gz runs/fresh qwen3-1.7b/fresh-machine/pick ...
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 make OUT SUITE [SUITE ...] | start ARCHIVE OUT SUITE [SUITE ...]"
mode=${1:?$usage}
shift
case $mode in
  make) out=${1:?$usage}; shift; archive= ;;
  start) archive=${1:?$usage}; out=${2:?$usage}; shift 2
    [[ -f $archive ]] || { echo "ARCHIVE=$archive: no such file (made by '$0 make' on another machine)" >&2; exit 2; } ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
(( $# )) || { echo "$usage" >&2; exit 2; }
export NBHELPERS_KERNEL_CACHE=/tmp/nbh-fresh-start-cache  # this machine's kernel caches: empty at the start
rm -rf "$NBHELPERS_KERNEL_CACHE"
mkdir -p "$NBHELPERS_KERNEL_CACHE" "$out"
if [[ $mode == start ]]; then
  python3 -c "import sys; from nbhelpers.kernels.cache import import_cache; print(len(import_cache(*sys.argv[1:])), 'files unpacked')" \
    "$archive" "$NBHELPERS_KERNEL_CACHE"
fi
folder=$out/$([[ $mode == make ]] && echo cold || echo carried)
for suite in "$@"; do  # BENCH_FLAGS=--rehearse: the same commands on the tiny presets, on a CPU
  rc=0
  python3 -m nbhelpers.cli bench "$suite" --out "$folder" ${BENCH_FLAGS:-} || rc=$?
  echo "suite $suite: exit $rc"
done
if [[ $mode == make ]]; then
  python3 - "$NBHELPERS_KERNEL_CACHE" "$out/kernel-cache.tar.gz" <<'EOF'
import sys
from nbhelpers.kernels.cache import cache_summary, export_cache

archive = export_cache(sys.argv[1], sys.argv[2])
mib = archive.stat().st_size / 2**20
print(f"{archive}: {mib:.1f} MiB; {cache_summary(sys.argv[1])}")
if mib > 50:
    print(f"{mib:.1f} MiB with the checkout is more than a device call carries (64 MiB): not carried that way")
EOF
fi
