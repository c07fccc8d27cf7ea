#!/usr/bin/env bash
# Download, into a folder (default: .whl25, git-ignored through .git/info/exclude), the wheels of the new kernel
# entries that the H200 machine (Python 3.12, torch 2.11) lacks: torchao (float8 training) and cut-cross-entropy.
# Both are pure Python where they matter here (torchao's float8 training calls torch._scaled_mm; its compiled
# extensions, built for another torch, are optional and only warn when they do not load).
# Usage: bash benchmarks/float8_cce_wheels.sh [DIR]; carried to the GPU machine, benchmarks/gpu_job.sh installs them
# into /tmp/site before its job starts.
set -euo pipefail
dir=${1:-.whl25}
mkdir -p "$dir"
for n in torchao==0.18.0 cut-cross-entropy==25.1.1; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$dir" "$n"
done
du -sh "$dir"
