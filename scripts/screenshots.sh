#!/usr/bin/env bash
# Regenerate docs/screenshots/ (the README's and the docs' pictures of the explorer). The test
# suite never writes there: its browser tests save their screenshots in a temporary folder
# unless QKV_SCREENSHOTS names one, which is what this script does. Run it after changing the
# page, then look at `git diff --stat docs/screenshots` before committing the pictures.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export QKV_SCREENSHOTS="$PWD/docs/screenshots"
"$PY" -m pytest -q -p no:cacheprovider "$@" \
  tests/test_explore_browser.py tests/test_explore_views.py tests/test_explore_verdicts.py \
  tests/test_explore_lesson_views.py tests/test_explore_projections_browser.py \
  tests/test_explore_model_task.py tests/test_explore_gpt.py tests/test_explore_random.py \
  tests/test_explore_cost_recall_browser.py
