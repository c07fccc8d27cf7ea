#!/usr/bin/env bash
# Create (or reuse) .venv and install the workbook with its test tools. Safe to run again.
# On a machine without an NVIDIA GPU, torch comes from the CPU wheel index (no multi-GB CUDA build).
# Overrides: PYTHON (interpreter), TORCH_SPEC (default torch==2.13.0), TORCH_CPU_INDEX, EXTRAS (default test).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
if ! "$PY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "installing torch (CUDA build: a GPU is present)"
    "$PY" -m pip install -q "${TORCH_SPEC:-torch>=2.5}"
  else
    echo "installing torch (CPU build: no GPU here)"
    "$PY" -m pip install -q --retries 1 "${TORCH_SPEC:-torch==2.13.0}" \
      --index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" 2>&1 \
      | grep -vE '^WARNING: (Location|Retrying)' || true
    "$PY" -c "import torch" 2>/dev/null || { echo "torch did not install; set TORCH_SPEC / TORCH_CPU_INDEX" >&2; exit 1; }
  fi
fi
"$PY" -m pip install -q -e ".[${EXTRAS:-test}]" 2>&1 | grep -vE '^WARNING: Location|BuildBackendWarning|^\s' || true
"$PY" -c "import nbhelpers, transformers, liger_kernel, papermill, holoviews" \
  || { echo "set-up is incomplete: see the messages above" >&2; exit 1; }
# On a CPU, each configuration's process runs on tcmalloc where the machine has it (nbhelpers/measure/host_allocator.py:
# glibc's malloc zeroes the large tensors' pages again every step). Debian's package, where apt and root are here.
if ! command -v nvidia-smi >/dev/null 2>&1 && [ "$(uname -s)" = Linux ] \
  && ! "$PY" -c "import sys; from nbhelpers.measure.host_allocator import find_tcmalloc; sys.exit(find_tcmalloc() is None)"; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
    echo "installing tcmalloc (apt: libtcmalloc-minimal4) for the CPU's steps"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        libtcmalloc-minimal4; } >/dev/null 2>&1 || echo "apt could not install tcmalloc: CPU steps use glibc's malloc" >&2
  else
    echo "no tcmalloc here (Debian: libtcmalloc-minimal4): CPU steps use glibc's malloc, about half as fast" >&2
  fi
fi
"$PY" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (workbook)" >/dev/null
echo "environment ready: $VENV ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
