#!/usr/bin/env bash
# Set up (if needed), lint, and run every test: unit tests and papermill runs of each notebook.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test,float8 bash scripts/setup.sh  # float8: torchao, for the float8 entry's conversion test
PY=.venv/bin/python
"$PY" -m ruff check nbhelpers tests scripts benchmarks
"$PY" -m pytest -q -ra --durations=20 "$@"
