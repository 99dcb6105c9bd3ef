#!/usr/bin/env bash
# Everything the test suite needs, on a fresh Debian machine (as root) or again on a used one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# System packages: OpenMPI for the ring-attention tests, Chromium for the browser tests.
need=()
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# torch first and pinned exactly: the CPU build on this machine's disk. Any looser spec, asked
# for later by another package, would fetch a multi-GB CUDA build.
"$PY" -m pip install -q "torch==2.13.0"
bash scripts/install.sh
"$PY" -m pip install -q -e ".[all,test,mpi]"
