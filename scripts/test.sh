#!/usr/bin/env bash
# The fast tier: set up (if needed), lint, then every unit test and one papermill run of each notebook at tiny
# sizes, on every core (pytest-xdist). `bash scripts/test_all.sh` runs the full tier (slow and browser tests too).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test,float8,qlora bash scripts/setup.sh  # float8: torchao (the float8 conversion test); qlora: bitsandbytes (NF4 on its CPU backend)
PY=.venv/bin/python
"$PY" -m ruff check nbhelpers tests scripts benchmarks
"$PY" -m pytest -q -ra --durations=15 -n "${PYTEST_WORKERS:-auto}" --dist worksteal -m "not slow and not browser" "$@"
