#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (slow tests included) and the linter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup-dev.sh
"$PY" -m ruff check src tests benchmarks
"$PY" -m pytest "$@"
# The engine again as on a machine without the qkv[fast] extra (no Numba: the NumPy tile step).
if [ $# -eq 0 ]; then
  QKV_WITHOUT_NUMBA=1 "$PY" -m pytest -q -p no:cacheprovider tests/test_attention.py \
    tests/test_backward.py tests/test_defects.py tests/test_masks.py \
    tests/test_weights_and_explain.py tests/test_seeds.py tests/test_engine_package.py \
    tests/test_packed_causal.py tests/test_fuzz_api.py
fi
