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
"$PY" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (workbook)" >/dev/null
echo "environment ready: $VENV ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
