#!/usr/bin/env bash
# Download, into a folder (default: .whl-unsloth), the wheels the H200 machine's Python 3.12 lacks for the
# Unsloth peer engine (PEER_ROWS=unsloth): unsloth and unsloth_zoo 2026.10.9, bitsandbytes, TRL at Unsloth's pin
# (<= 1.15), datasets with dill and multiprocess, and the pure-Python packages Unsloth imports that the machine's
# image lacks (tyro and its own, msgspec, cut-cross-entropy). torch 2.11, transformers 5.17 (Unsloth's highest),
# PEFT, accelerate, pandas, numpy, pyarrow, triton, sentencepiece, protobuf, psutil are there already. Left out:
# xformers, torchao, diffusers, hf_transfer, pydantic (Unsloth imports them only where it uses them).
# Two wheels are slimmed (their RECORD rewritten to match): bitsandbytes keeps the CUDA 13.0 library the machine's
# torch (cu130) loads and its CPU one, not those of other CUDA and ROCm versions; unsloth drops studio/, its web app.
# Usage: bash scripts/gpu_unsloth_wheels.sh [DIR]    (about 11 MB: it travels beside the workbook's own .whl)
# On the GPU machine, into a folder of its own (kept apart from the workbook's site: other TRL, same transformers):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/unsloth-site DIR/*.whl
#   export NBHELPERS_UNSLOTH_SITE=/tmp/unsloth-site   # only the Unsloth engine's process puts it first on PYTHONPATH
#   export NBHELPERS_UNSLOTH_MODELS=/tmp/unsloth-models  # where presets are saved for from_pretrained (disk)
# DIR is git-excluded (/.whl-*/ in .git/info/exclude): name it in the run's carry list. benchmarks/gpu_job.sh puts every
# carried .whl* folder into /tmp/site by default: give it JOB_WHEELS without this one (e.g. JOB_WHEELS=.whl-trl) so
# the workbook's own TRL stays the one its other rows import.
set -euo pipefail
dir=${1:-.whl-unsloth}
mkdir -p "$dir"
names=(unsloth==2026.10.9 unsloth_zoo==2026.10.9 'bitsandbytes>=0.45.5,!=0.46.0,!=0.48.0' 'trl<=1.15' datasets==4.8.5 dill==0.4.1
  multiprocess==0.70.19 tyro docstring-parser shtab typeguard msgspec cut-cross-entropy)
for n in "${names[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" "$n"
done
python3 - "$dir" <<'PY'
import pathlib, re, sys, zipfile

def slim(wheel: pathlib.Path, drop) -> None:
    out = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if drop(info.filename):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(line for line in lines if not drop(line.split(",", 1)[0])) + "\n").encode()
            dst.writestr(info, data)
    out.replace(wheel)

root = pathlib.Path(sys.argv[1])
for wheel in root.glob("bitsandbytes-*.whl"):
    slim(wheel, lambda n: bool(re.search(r"libbitsandbytes_(?!cuda130\.so|cpu\.so)", n)))
for wheel in root.glob("unsloth-*.whl"):
    slim(wheel, lambda n: n.startswith("studio/"))
PY
du -sh "$dir"
