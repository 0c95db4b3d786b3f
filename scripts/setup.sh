#!/usr/bin/env bash
# Installs the project and its test tools into the current Python environment (and Debian's
# chromium for the report page test, when missing and run as root).
# torch==2.13.0 (CPU build on this project's machines) is installed first only when no torch
# is present, so a machine with its own CUDA build of torch keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[test]"
# Headless Chromium: the report page test opens the page as a person would.
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq chromium >/dev/null
    else
        echo "setup: chromium is missing (the report page test needs it): sudo apt-get install chromium" >&2
    fi
fi
