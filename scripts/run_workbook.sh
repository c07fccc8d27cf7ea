#!/usr/bin/env bash
# Set up (if needed) and run all notebooks on the embedded default; prints where the report is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/nbhelpers run-all "$@"
