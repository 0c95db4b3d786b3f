#!/usr/bin/env bash
# asv-judge-protocol: 1
# CI asv step, two gates between BASE (default HEAD~1) and HEAD_REV (default HEAD):
#   counts  instruction counts of every hot path's CI family under callgrind (bench_instructions),
#           `asv continuous --factor 1.015`, no re-runs: the counts are deterministic (A/A spread
#           0.03%, heap-layout shifts up to 0.9%; see benchmarks/README.md), so 2% is caught.
#   wall    wall time of the fast families, `asv continuous --factor 1.2` with re-runs of flagged
#           benchmarks: it still sees what counts miss (syscalls, waiting, caches, memory).
# Both always run; the log ends with one line per gate (pass / FIRED), and a Markdown summary (per
# gate: verdict, benchmarks that moved and their ratios, accepting tags) is appended to
# $GITHUB_STEP_SUMMARY when set, else written to ASV_LOG_DIR/summary.md. A commit in BASE..HEAD_REV
# accepts a deliberate slowdown with a trailer `asv-accept: GATE PATTERN +N%: REASON` (see
# benchmarks/gate.py). Exits 0 with one line when there is no previous commit or it predates the
# benchmark suite.
#
# The judge of a change is the guard before it: started from the tree, this script runs
# scripts/asv_ci.sh and benchmarks/gate.py as they are at BASE, from a temporary folder
# (ASV_JUDGE_DIR); HEAD_REV's copies judge the next change. Bootstrap: a BASE whose asv_ci.sh
# lacks the line `# asv-judge-protocol: 1` predates this rule, and HEAD_REV's guard judges.
#
# Wall gate: a benchmark flagged at --factor is measured again, up to ASV_RETRIES (2) more
# times with more rounds, and fires only if every pass flags it: on this noisy 2-core machine a
# one-off 20-40% shift happens between identical commits, while a real slowdown repeats.
set -euo pipefail
[ -n "${ASV_JUDGE_DIR:-}" ] || cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
FACTOR=${ASV_FACTOR:-1.2}
COUNT_FACTOR=${ASV_COUNT_FACTOR:-1.015}
GATES=${ASV_GATES:-counts wall}
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
COUNTS=${ASV_COUNT_BENCH:-^bench_instructions\.}
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
BASE=$(git rev-parse --verify "$BASE^{commit}")
HEAD_REV=$(git rev-parse --verify "$HEAD_REV^{commit}")
JUDGE_FILES=(scripts/asv_ci.sh benchmarks/gate.py)

if [ -z "${ASV_JUDGE_DIR:-}" ]; then  # started from the tree: hand over to the judge
    judge=$BASE
    base_script=$'\n'$(git show "$BASE:scripts/asv_ci.sh" 2>/dev/null || true)$'\n'
    if [[ $base_script != *$'\n# asv-judge-protocol: 1\n'* ]]; then
        judge=$HEAD_REV
        echo "asv: BASE ${BASE:0:8} predates the judge-from-BASE rule: the guard of HEAD ${HEAD_REV:0:8} judges (bootstrap)"
    fi
    ASV_JUDGE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/asv-judge.XXXXXX") ASV_JUDGE_REV=$judge
    export ASV_JUDGE_DIR ASV_JUDGE_REV
    trap 'rm -rf "$ASV_JUDGE_DIR"' EXIT
    for path in "${JUDGE_FILES[@]}"; do
        git show "$judge:$path" > "$ASV_JUDGE_DIR/${path##*/}"
    done
    echo "asv: the guard of ${judge:0:8} judges ${BASE:0:8}..${HEAD_REV:0:8}"
    bash "$ASV_JUDGE_DIR/asv_ci.sh" "$BASE" "$HEAD_REV"
    exit 0
fi
changed=$(git diff --name-only "$BASE" "$HEAD_REV" -- "${JUDGE_FILES[@]}" .ci/run | tr '\n' ' ')
if [ -n "$changed" ]; then
    echo "asv: this range changes the guard ($changed): judged by the guard of ${ASV_JUDGE_REV:0:8}; the change judges the next one"
fi
GATE=("$PY" "$ASV_JUDGE_DIR/gate.py")

"$PY" -m asv --version >/dev/null 2>&1 || "$PY" -m pip install -q "asv==0.6.6"
# NOTE: asv builds its environments with pip; an unset PIP_NO_CACHE_DIR keeps pip's cache in use.
unset PIP_NO_CACHE_DIR
"$PY" -m asv machine --yes --machine "$MACHINE" >/dev/null
continuous() {  # continuous FACTOR BENCH_REGEX LOG [ASV ARGS...]: one asv continuous run, teed to LOG
    local factor=$1 bench=$2 out=$3
    shift 3
    "$PY" -m asv continuous --factor "$factor" --split --machine "$MACHINE" -b "$bench" "$@" \
        "$BASE" "$HEAD_REV" 2>&1 | tee "$out"
    return "${PIPESTATUS[0]}"
}
counts_gate() {  # deterministic: one measurement per commit
    echo "=== asv gate counts: instruction counts, factor $COUNT_FACTOR ==="
    if ! command -v valgrind >/dev/null; then
        echo "asv gate counts: skipped, valgrind is not installed (apt-get install valgrind)" | tee "$1"
        return 0
    fi
    continuous "$COUNT_FACTOR" "$COUNTS" "$1"
}
wall_gate() {  # noisy: flagged benchmarks are measured again
    echo "=== asv gate wall: wall time, factor $FACTOR ==="
    local status=0 try again
    continuous "$FACTOR" "$FAST" "$1" || status=$?
    for (( try = 1; status != 0 && try <= RETRIES; try++ )); do
        again=$("${GATE[@]}" flagged "$1")
        [ -n "$again" ] || break
        echo "asv: measuring the flagged benchmarks again ($try of $RETRIES, $RETRY_ROUNDS rounds) to rule out noise: $again"
        status=0
        continuous "$FACTOR" "$again" "$1" --attribute rounds="$RETRY_ROUNDS" || status=$?
    done
    return "$status"
}
logdir=${ASV_LOG_DIR:-$(mktemp -d)}
mkdir -p "$logdir"
statuses=() logs=()
for gate in $GATES; do
    start=$(date +%s)
    status=0
    "${gate}_gate" "$logdir/$gate.log" || status=$?
    echo "asv: gate $gate, ${BASE:0:8}..${HEAD_REV:0:8}, took $(( $(date +%s) - start )) s, exit $status"
    statuses+=("$gate=$status") logs+=(--log "$gate=$logdir/$gate.log")
done
echo "=== asv gates: ${BASE:0:8}..${HEAD_REV:0:8} ==="
"${GATE[@]}" verdict "$BASE" "$HEAD_REV" "${statuses[@]}" "${logs[@]}" --results ".asv/results/$MACHINE" \
    --summary "${GITHUB_STEP_SUMMARY:-$logdir/summary.md}"
