#!/usr/bin/env bash
# Installs what the main job (scripts/storm.py: sim engine, embedded tokenizer) needs into the
# current Python environment: the project with its "server" extra (reference server, engines,
# benchmarks, plotting), nothing else. (loadgen alone is the base install: pip install .)
#   bash scripts/setup.sh           the main job
#   bash scripts/setup.sh --test    also the test tools (the "test" extra) and, when missing and
#                                   run as root, Debian's chromium for the report page tests
# torch==2.13.0 (CPU build on this project's machines) is installed first only when no torch
# is present, so a machine with its own CUDA build of torch keeps it.
# NOTE: chromium is optional: when apt cannot install it (not root, apt's lock held by another
# install, no network) this warns and goes on; the page tests then skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CHROMIUM_INSTALL="apt-get update && apt-get install -y chromium"

case "${1:-}" in
    "") extras="[server]" ;;
    --test) extras="[test]" ;;
    *) echo "usage: bash scripts/setup.sh [--test]" >&2; exit 2 ;;
esac

chromium_found() {
    command -v chromium || command -v chromium-browser || command -v google-chrome
} >/dev/null 2>&1

install_chromium() {
    chromium_found && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "setup: warning: chromium is missing (the report page tests will skip): sudo sh -c '$CHROMIUM_INSTALL'" >&2
        return 0
    fi
    local said
    # NOTE: Lock::Timeout=0: a held apt/dpkg lock fails at once instead of waiting.
    if ! said=$({ apt-get -qq -o DPkg::Lock::Timeout=0 update &&
                  DEBIAN_FRONTEND=noninteractive apt-get -qq -y -o DPkg::Lock::Timeout=0 install chromium
                } 2>&1 >/dev/null); then
        echo "setup: warning: chromium not installed, going on (the report page tests will skip);" \
             "apt said: $(printf '%s\n' "$said" | grep -m1 '^E:' || printf '%s\n' "$said" | tail -n1)" >&2
        echo "setup: install it later with: $CHROMIUM_INSTALL" >&2
    fi
}

if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".$extras"
if [ "$extras" = "[test]" ]; then
    install_chromium
fi
