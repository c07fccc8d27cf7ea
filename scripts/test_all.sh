#!/usr/bin/env bash
# The full tier: set up (if needed), lint, then every test, the slow and browser ones included (more notebook
# variants, Liger in Triton's interpreter, FSDP2 on gloo, the notebook chain opened in Chromium), on every core.
# CPU_CAPABILITIES="native default" runs it once per ATen CPU kernel set (ATEN_CPU_CAPABILITY; "native" leaves it
# unset). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test,float8,qlora bash scripts/setup.sh
PY=.venv/bin/python
"$PY" -m ruff check nbhelpers tests scripts benchmarks
for capability in ${CPU_CAPABILITIES:-native}; do
  echo "== full tier, ATEN_CPU_CAPABILITY=${capability}"
  if [ "$capability" = native ]; then
    "$PY" -m pytest -q -ra --durations=25 -n "${PYTEST_WORKERS:-auto}" --dist worksteal "$@"
  else
    ATEN_CPU_CAPABILITY="$capability" "$PY" -m pytest -q -ra --durations=25 -n "${PYTEST_WORKERS:-auto}" \
      --dist worksteal "$@"
  fi
done
