#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (slow tests included) and the linter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup-dev.sh
"$PY" -m ruff check src tests benchmarks
"$PY" -m pytest "$@"
