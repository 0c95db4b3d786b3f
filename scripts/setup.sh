#!/usr/bin/env bash
# Installs the project and its test tools into the current Python environment.
# torch==2.13.0 (CPU build on this project's machines) is installed first only when no torch
# is present, so a machine with its own CUDA build of torch keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[test]"
