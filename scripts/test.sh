#!/usr/bin/env bash
# Install what the tests need, then run the linter, the whole suite (slow tests included) and the
# engine's tests again without Numba. Every pass runs even when an earlier one fails; the script
# says which passed and exits non-zero at the end if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup-dev.sh || exit

failed=()
run() {  # run NAME CMD...: run a pass, remember whether it failed
  local name=$1; shift
  echo "== test.sh: $name"
  "$@" || failed+=("$name (exit $?)")
}
run "ruff" "$PY" -m ruff check src tests benchmarks
run "pytest" "$PY" -m pytest "$@"
# The engine again as on a machine without the qkv[fast] and qkv[mkl] extras (no Numba: the
# NumPy tile step; NumPy's GEMMs, where the first pass ran MKL's on an Intel CPU).
if [ $# -eq 0 ]; then
  run "pytest without Numba or MKL" env QKV_WITHOUT_NUMBA=1 QKV_GEMM=numpy \
    "$PY" -m pytest -q -p no:cacheprovider \
    tests/test_attention.py tests/test_backward.py tests/test_defects.py tests/test_masks.py \
    tests/test_weights_and_explain.py tests/test_seeds.py tests/test_engine_package.py \
    tests/test_packed_causal.py tests/test_fuzz_api.py tests/test_layouts.py
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'test.sh: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "test.sh: every pass passed"
