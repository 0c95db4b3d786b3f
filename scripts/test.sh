#!/usr/bin/env bash
# Set up (with the test tools), lint, and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup.sh --test
"$PY" -m ruff check .
if ! { command -v chromium || command -v chromium-browser || command -v google-chrome; } >/dev/null 2>&1; then
    echo "test: chromium is missing: the report page tests will be SKIPPED" \
         "(install it with: apt-get update && apt-get install -y chromium)"
fi
"$PY" -m pytest -q "$@"
