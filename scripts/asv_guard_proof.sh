#!/usr/bin/env bash
# Proof that the CI asv guard works, in a scratch clone (the repository itself is never touched):
#   aa      two commits differing only in a comment: nothing flagged (exit 0)
#   legacy  one hot path's default switched to its legacy form (H3 stream output): flagged
#   slow    a 25% slowdown added to one optimized path (H2 msgspec encoder): flagged
# Usage: bash scripts/asv_guard_proof.sh [aa legacy slow]   (ASV_FACTOR as in scripts/asv_ci.sh)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=${ASV_PROOF_DIR:-$(mktemp -d /tmp/asv-guard-proof.XXXXXX)}
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=(aa legacy slow)
GIT=(git -c user.name=asv-proof -c user.email=asv-proof@localhost)

git clone -q "$SRC" "$WORK/repo"
cd "$WORK/repo"
# The suite as it is in the source working tree (it may not be committed yet).
cp "$SRC/asv.conf.json" .
rm -rf benchmarks scripts/asv_ci.sh
cp -r "$SRC/benchmarks" benchmarks
cp "$SRC/scripts/asv_ci.sh" scripts/
find benchmarks -name __pycache__ -prune -exec rm -rf {} +
"${GIT[@]}" add -A
"${GIT[@]}" commit -qm "proof base: the benchmark suite" --allow-empty
BASE=$(git rev-parse HEAD)

patch_file() {  # patch_file FILE OLD NEW: replace one exact occurrence or fail
    python3 - "$@" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"patch: {old!r} found {text.count(old)} times in {path}")
open(path, "w").write(text.replace(old, new))
PY
}

make_commit() {  # make_commit NAME: a commit on top of BASE carrying one scenario
    git checkout -q "$BASE"
    case "$1" in
        aa) printf '# A comment and nothing else.\n' >> reference_impl/__init__.py ;;
        legacy) patch_file reference_impl/config.py \
                    'stream_output: str = "reference"' 'stream_output: str = "copy"' ;;
        slow) patch_file reference_impl/server/sse.py \
                  '        delta = _StreamDelta(reasoning_content' \
                  '        _t0 = time.perf_counter()
        delta = _StreamDelta(reasoning_content'
              patch_file reference_impl/server/sse.py \
                  '        return _SSE_PREFIX + self._encoder.encode(chunk) + _SSE_SUFFIX' \
                  '        data = _SSE_PREFIX + self._encoder.encode(chunk) + _SSE_SUFFIX
        _deadline = _t0 + 1.25 * (time.perf_counter() - _t0)
        while time.perf_counter() < _deadline:  # proof: a 25% slowdown
            pass
        return data'
              patch_file reference_impl/server/sse.py 'import msgspec' 'import time

import msgspec' ;;
    esac
    "${GIT[@]}" commit -qam "proof: $1"
    git rev-parse HEAD
}

declare -A EXPECT=([aa]=pass [legacy]=flagged [slow]=flagged)
summary=()
for name in "${SCENARIOS[@]}"; do
    rev=$(make_commit "$name")
    echo "=== $name: asv continuous ${BASE:0:8} ${rev:0:8} ==="
    set +e
    bash scripts/asv_ci.sh "$BASE" "$rev" 2>&1 | tee "$WORK/$name.log"
    status=${PIPESTATUS[0]}
    set -e
    outcome=$([ "$status" -eq 0 ] && echo pass || echo flagged)
    verdict=$([ "$outcome" = "${EXPECT[$name]}" ] && echo OK || echo UNEXPECTED)
    summary+=("$name: $outcome (expected ${EXPECT[$name]}) $verdict")
done
echo "=== summary (logs in $WORK) ==="
printf '%s\n' "${summary[@]}"
! printf '%s\n' "${summary[@]}" | grep -q UNEXPECTED
