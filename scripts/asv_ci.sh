#!/usr/bin/env bash
# CI asv step: `asv continuous` between HEAD~1 and HEAD on the fast benchmark families.
# Fails (non-zero) on a significant slowdown and prints the comparison table; passes quietly
# when there is no previous commit or it predates the benchmark suite.
# A benchmark flagged at --factor is measured again, up to ASV_RETRIES (2) more times with more
# rounds, and fails the step only if every pass flags it: on this noisy 2-core machine a one-off
# 20-40% shift happens between identical commits, and once a README-only commit had a 3 µs
# benchmark flagged at 1.9x and then 2.5x (a neighbour's burst), while a real slowdown repeats.
# That lets the factor be 1.2, so a 25% slowdown is caught.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
FACTOR=${ASV_FACTOR:-1.2}
RETRIES=${ASV_RETRIES:-2}
RETRY_ROUNDS=${ASV_RETRY_ROUNDS:-6}
MACHINE=${ASV_MACHINE:-serving-hotpaths-2core}
# The fast families: one mid size of each time_ family of H1, H2, H3, H4, H6 (asv matches
# "name(param, ...)"); the track_ families (H5, e2e, growth) stay out.
DEFAULT_FAST='^bench_sse\.TimeChatChunk\.'
DEFAULT_FAST+='|^bench_wakeups\.TimeWakeups\.time_step\(.*, 2048, 16\)'
DEFAULT_FAST+='|^bench_stream_outputs\.TimeStreamOutputs\.time_request\(.*, 4000\)'
DEFAULT_FAST+='|^bench_token_storage\.TimeTokenStorage\.time_stage\(.*, 10000, '
DEFAULT_FAST+='|^bench_stream_deltas\.TimeStreamDeltas\.time_request\(.*, 4000\)'
FAST=${ASV_BENCH:-$DEFAULT_FAST}
BASE=${1:-HEAD~1}
HEAD_REV=${2:-HEAD}

if ! git rev-parse -q --verify "$BASE^{commit}" >/dev/null; then
    echo "asv: no previous commit ($BASE): nothing to compare"
    exit 0
fi
if ! git cat-file -e "$BASE:asv.conf.json" 2>/dev/null || ! git cat-file -e "$BASE:benchmarks" 2>/dev/null; then
    echo "asv: $BASE predates the benchmark suite: nothing to compare"
    exit 0
fi

"$PY" -m asv --version >/dev/null 2>&1 || "$PY" -m pip install -q "asv==0.6.6"
# NOTE: asv builds its environments with pip; an unset PIP_NO_CACHE_DIR keeps pip's cache in use.
unset PIP_NO_CACHE_DIR
"$PY" -m asv machine --yes --machine "$MACHINE" >/dev/null
start=$(date +%s)
continuous() {  # continuous BENCH_REGEX LOG [ASV ARGS...]: one asv continuous run, teed to LOG
    local bench=$1 out=$2
    shift 2
    "$PY" -m asv continuous --factor "$FACTOR" --split --machine "$MACHINE" -b "$bench" "$@" \
        "$BASE" "$HEAD_REV" 2>&1 | tee "$out"
    return "${PIPESTATUS[0]}"
}
flagged_regex() {  # the benchmarks a log flags as slower ("| +" rows), as one exact regex
    "$PY" - "$1" <<'PY'
import re, sys
rows = [line.split("|") for line in open(sys.argv[1]) if line.startswith("| +")]
print("|".join("^" + re.escape(row[5].strip()) + "$" for row in rows if len(row) > 5))
PY
}
log=$(mktemp)
status=0
continuous "$FAST" "$log" || status=$?
for (( try = 1; status != 0 && try <= RETRIES; try++ )); do
    again=$(flagged_regex "$log")
    [ -n "$again" ] || break
    echo "asv: measuring the flagged benchmarks again ($try of $RETRIES, $RETRY_ROUNDS rounds) to rule out noise: $again"
    status=0
    continuous "$again" "$log" --attribute rounds="$RETRY_ROUNDS" || status=$?
done
echo "asv: continuous $BASE..$HEAD_REV (factor $FACTOR) took $(( $(date +%s) - start )) s, exit $status"
exit "$status"
