#!/usr/bin/env bash
# The second call of a session on a lent GPU machine, after the first installed fla (.whlA1) into /tmp/site: the
# other wheels into /tmp/site, Unsloth's wheel set made from the carried folders, the checkout copied to /tmp/wb
# ($JOB_WORKDIR), the offloaded checkpoints' tests run there (their GPU test runs only on a GPU), then one job of the
# suites named, through benchmarks/gpu_job.sh and benchmarks/gpu_peers_caps.sh. A suite whose name has "offload" in
# it runs only if those tests pass. Carry .whl .whl-ao .whl-uo, after a call that installed .whlA2 and .whlB the same
# way (the five folders and the checkout pass the 64 MiB a call carries); set NBHELPERS_COMMIT to the full sha.
#   bash benchmarks/gpu_offload_then_peers.sh SECONDS SUITE...   # SECONDS: what this call may spend, installs included
# The tests' output lands in $OUT/offload-tests.log; collect the job in the next calls, made at once:
#   cd /tmp/wb && bash benchmarks/gpu_job.sh collect 560
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?seconds the job is waited for in this call}
shift
: "${NBHELPERS_COMMIT:?set NBHELPERS_COMMIT to the full sha of the checkout (the machine has no git history)}"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
started=$(date +%s)
pip_install() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$@"; }

if [[ -d .whl-uo ]]; then  # Unsloth's own pins, and the three packages it shares with the workbook's sets
  mkdir -p .whl-unsloth && cp .whl-uo/* .whl-ao/bitsandbytes* .whl/datasets* .whl/dill* .whl/multiprocess* .whl-unsloth/
fi
# The folders carried in this call; one installed by an earlier call (the checkout and all five pass 64 MiB) is absent
[[ -d .whlA2 ]] && { pip_install .whlA2/*.whl || exit 1; }
upgrades=()
for folder in .whlB .whl .whl-ao; do [[ -d $folder ]] && upgrades+=("$folder"/*.whl); done
(( ${#upgrades[@]} )) && { pip_install --upgrade "${upgrades[@]}" || exit 1; }
workdir=${JOB_WORKDIR:-/tmp/wb}
mkdir -p "$workdir" && cp -a . "$workdir" && cd "$workdir" || exit 1

suites=("$@")
if PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m pytest -q -p no:cacheprovider tests/models/test_checkpointing.py \
  > "$OUT/offload-tests.log" 2>&1; then
  echo "offload tests passed"
else
  echo "offload tests failed (see offload-tests.log): the offload suites are left out"
  kept=()
  for suite in "${suites[@]}"; do [[ $suite == *offload* ]] || kept+=("$suite"); done
  suites=("${kept[@]}")
fi
tail -3 "$OUT/offload-tests.log"
(( ${#suites[@]} )) || { echo "no suite left to run"; exit 0; }
left=$(( seconds - ($(date +%s) - started) ))
(( left > 30 )) || left=30
JOB_WHEELS="" bash benchmarks/gpu_job.sh start "$left" bash benchmarks/gpu_peers_caps.sh runs/bench "${suites[@]}"
