#!/usr/bin/env bash
# Proof that the CI asv guard's two gates work, in a scratch clone (the repository itself is
# never touched). Each scenario is one commit on top of a base commit; the CI step
# (scripts/asv_ci.sh BASE REV) runs both gates on it:
#   aa1..aaN   a README-only change (N = ASV_PROOF_AA, default 10)       counts pass,  wall pass
#   comment    a comment in reference_impl                               counts pass,  wall pass
#   legacy     H3's default switched to its legacy form (copy)           counts fire,  wall fire
#   slow       a 25% busy-wait slowdown of the msgspec SSE encoder (H2)  counts fire,  wall fire
#   inject5    +5% instructions in the msgspec SSE encoder (H2)          counts fire,  wall pass
#   inject2    +2% instructions in the msgspec SSE encoder (H2)          counts fire,  wall pass
#   accept     inject5 with `asv-accept: counts h2- +6%: ...`            step passes, counts accepted
#   accept-other inject5 with a tag naming another benchmark (h4-)       counts fire,  wall pass
#   accept-bound inject5 with a tag of +2% on the +5% benchmarks         counts fire,  wall pass
#   history    main gets README, inject2, README commits; `asv run` counts them and `asv publish`
#              must list a regression at the inject2 commit only (regressions_thresholds)
# Usage: bash scripts/asv_guard_proof.sh [SCENARIO...]   (default: all of the above)
# Prints a table: scenario -> each gate's verdict and largest ratio, expected, OK/UNEXPECTED;
# exits non-zero if any verdict differs from the expected one. Logs land next to the clone.
set -euo pipefail
SRC=${ASV_PROOF_SRC:-$(cd "$(dirname "$0")/.." && pwd)}  # the source repository
WORK=${ASV_PROOF_DIR:-$(mktemp -d /tmp/asv-guard-proof.XXXXXX)}
NUM_AA=${ASV_PROOF_AA:-10}
SCENARIOS=("$@")
if [ ${#SCENARIOS[@]} -eq 0 ]; then
    for (( k = 1; k <= NUM_AA; k++ )); do SCENARIOS+=("aa$k"); done
    SCENARIOS+=(comment legacy slow inject5 inject2 accept accept-other accept-bound history)
fi
GIT=(git -c user.name=asv-proof -c user.email=asv-proof@localhost)
# Statements of about 38 instructions each in front of the msgspec encoder's ~11.9K per chunk:
# 6 -> +1.9-2.0%, 16 -> +5.2% (measured with python -m benchmarks.instructions --only h2-).
INJECT2=${ASV_PROOF_INJECT2:-6}
INJECT5=${ASV_PROOF_INJECT5:-16}

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

inject() {  # inject N: N cheap statements in front of every msgspec chunk encode
    local lines
    lines=$(for (( i = 0; i < $1; i++ )); do printf '        _proof = 0  # proof: extra instructions\n'; done)
    patch_file reference_impl/server/sse.py '        delta = _StreamDelta(reasoning_content' \
        "$lines
        delta = _StreamDelta(reasoning_content"
}

make_commit() {  # make_commit NAME: a commit on top of BASE carrying one scenario
    local message="proof: $1"
    git checkout -q "$BASE"
    case "$1" in
        aa*) printf '\nA/A proof line %s.\n' "${1#aa}" >> README.md ;;
        comment) printf '# A comment and nothing else.\n' >> reference_impl/__init__.py ;;
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
        inject5) inject "$INJECT5" ;;
        inject2) inject "$INJECT2" ;;
        accept) inject "$INJECT5"
                message+=$'\n\nasv-accept: counts h2- +6%: the proof of the accept tag' ;;
        accept-other) inject "$INJECT5"
                      message+=$'\n\nasv-accept: counts h4- +6%: names another benchmark' ;;
        accept-bound) inject "$INJECT5"
                      message+=$'\n\nasv-accept: counts h2- +2%: a bound below the change' ;;
        *) echo "unknown scenario $1" >&2; exit 2 ;;
    esac
    "${GIT[@]}" commit -qam "$message"
    git rev-parse HEAD
}

expect() {  # expect SCENARIO: "<counts> <wall> <step>" verdicts
    case "$1" in
        aa*|comment) echo "pass pass pass" ;;
        legacy|slow) echo "FIRED FIRED fail" ;;
        inject5|inject2|accept-other|accept-bound) echo "FIRED pass fail" ;;
        accept) echo "accepted pass pass" ;;
    esac
}

gate_verdict() {  # gate_verdict LOG GATE: pass / FIRED / accepted, from the step's verdict lines
    local line
    line=$(grep "^asv gate $2: " "$1" | tail -1)
    case "$line" in
        *"FIRED, accepted"*) echo accepted ;;
        *FIRED*) echo FIRED ;;
        *pass*) echo pass ;;
        *) echo "?" ;;
    esac
}

history() {  # a linear count history on main with a 2% step; prints what asv publish finds
    local machine=${ASV_MACHINE:-serving-hotpaths-2core} step
    git checkout -q main
    printf '\nHistory proof line 1.\n' >> README.md && "${GIT[@]}" commit -qam "history: README"
    inject "$INJECT2" && "${GIT[@]}" commit -qam "history: +2% instructions in the msgspec encoder"
    step=$(git rev-parse HEAD)
    printf '\nHistory proof line 2.\n' >> README.md && "${GIT[@]}" commit -qam "history: README"
    python3 -m asv run --machine "$machine" --skip-existing-commits -b '^bench_instructions\.' "$BASE^..main"
    python3 -m asv publish >/dev/null
    python3 - "$step" <<'PY'
import json, sys
step = sys.argv[1]
index = json.load(open(".asv/html/index.json"))
to_hash = index["revision_to_hash"]
found = []
for name, _, params, _, _, _, jumps in json.load(open(".asv/html/regressions.json"))["regressions"]:
    if not name.startswith("bench_instructions."):
        continue
    for _, after, old, new in jumps:
        commit = to_hash[str(after)]
        found.append((commit == step, f"{name} {params or ''} at {commit[:8]}: "
                                      f"{old:,.0f} -> {new:,.0f} ({new / old - 1:+.2%})"))
print("asv publish, regressions in the count history:")
print("\n".join("  " + text for _, text in found) or "  none")
ok = bool(found) and all(at_step for at_step, _ in found)
print("history:", "OK (every regression at the +2% commit)" if ok else "UNEXPECTED")
sys.exit(0 if ok else 1)
PY
}

rows=("| scenario | counts gate | counts: largest ratio | wall gate | wall: largest ratio | step | expected (counts wall step) | |"
      "|---|---|---|---|---|---|---|---|")
bad=0
history_status=
for name in "${SCENARIOS[@]}"; do
    if [ "$name" = history ]; then
        set +e
        history 2>&1 | tee "$WORK/history.log"
        history_status=${PIPESTATUS[0]}
        set -e
        [ "$history_status" -eq 0 ] || bad=1
        continue
    fi
    rev=$(make_commit "$name")
    echo "=== $name: scripts/asv_ci.sh ${BASE:0:8} ${rev:0:8} ==="
    mkdir -p "$WORK/$name"
    start=$(date +%s)
    set +e
    ASV_LOG_DIR="$WORK/$name" bash scripts/asv_ci.sh "$BASE" "$rev" 2>&1 | tee "$WORK/$name.log"
    status=${PIPESTATUS[0]}
    set -e
    took=$(( $(date +%s) - start ))
    step=$([ "$status" -eq 0 ] && echo pass || echo fail)
    counts=$(gate_verdict "$WORK/$name.log" counts)
    wall=$(gate_verdict "$WORK/$name.log" wall)
    # Every benchmark's exact ratio (asv continuous prints a table only when something changed).
    results=.asv/results/${ASV_MACHINE:-serving-hotpaths-2core}
    counts_ratio=$(python3 -m benchmarks.gate exact "$results" "$BASE" "$rev" --match '^bench_instructions[.]')
    wall_ratio=$(python3 -m benchmarks.gate exact "$results" "$BASE" "$rev" --match '^bench_(?!instructions[.])')
    want=$(expect "$name")
    ok=$([ "$counts $wall $step" = "$want" ] && echo OK || echo UNEXPECTED)
    [ "$ok" = OK ] || bad=1
    rows+=("| $name | $counts | $counts_ratio | $wall | $wall_ratio | $step (${took} s) | $want | $ok |")
done
echo "=== summary (logs in $WORK) ==="
printf '%s\n' "${rows[@]}" | tee "$WORK/summary.md"
[ -z "$history_status" ] || grep -A100 "^asv publish, regressions" "$WORK/history.log" | tee -a "$WORK/summary.md"
exit "$bad"
