#!/usr/bin/env bash
# Set up, lint, and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup.sh
"$PY" -m ruff check .
"$PY" -m pytest -q "$@"
