#!/usr/bin/env bash
# Set up (if needed), lint, and run every test: unit tests and papermill runs of each notebook.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
"$PY" -m ruff check nbhelpers tests scripts benchmarks
"$PY" -m pytest -q -ra --durations=20 "$@"
