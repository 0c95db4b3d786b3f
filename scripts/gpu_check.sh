#!/usr/bin/env bash
# One command for a GPU machine with no network (torch + Triton in its image, nothing else
# fetched): the CUDA tests, the torch engine benchmark on a Llama-3-8B-shaped model with seeded
# random weights, then the server on that model under `loadgen --concurrency 2048`, 128/128.
#
#   scripts/gpu_check.sh --download-wheels   # HERE (with PyPI): wheels the GPU image lacks -> .whl/
#   scripts/gpu_check.sh [--budget-s S] [all|tests|bench|serve ...]   # THERE: installs .whl/*.whl
#
# Each phase runs under `timeout` (its own limit, cut to what is left of the budget, default
# 480 s); a phase that fails or times out is recorded and the next one still runs. As each phase
# ends, its line (phase, exit status, seconds) is appended to phases.tsv. Results go to $OUT (the
# device tool's folder) or ./gpu_check_out: phases.tsv, pytest.log, engine.json, server.log,
# loadgen.json. Exit status: 0 when every phase passed, 1 when one failed or was skipped, 2 for
# bad usage or missing packages.
set -uo pipefail  # NOTE: no -e: a phase's failure is recorded and the next phase still runs
cd "$(dirname "$0")/.."
SELF="$PWD/scripts/gpu_check.sh"
PY=${PYTHON:-python3}
RESULTS=${OUT:-$PWD/gpu_check_out}
SHAPE=${SHAPE:-llama3-8b}
MODEL_DIR=${MODEL_DIR:-/tmp/$SHAPE-random}  # written unless it already holds a config.json
PORT=${PORT:-30000}
CONCURRENCY=${CONCURRENCY:-2048}
NUM_PROMPTS=${NUM_PROMPTS:-4096}
WHEEL_DIR=${WHEEL_DIR:-.whl}
BUDGET_S=${BUDGET_S:-480}
# Each phase's own limit in seconds (cut to the budget left when it starts).
TESTS_TIMEOUT_S=${TESTS_TIMEOUT_S:-240}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-240}
SERVE_TIMEOUT_S=${SERVE_TIMEOUT_S:-360}
MIN_PHASE_S=20        # a phase with less budget left than this is skipped (recorded as such)
MIN_EVENT_RATIO=0.5   # serve fails when content events < this x output tokens (usage)
# What the GPU image (torch 2.11, Triton 3.6, httpx, uvloop, tokenizers, ...) lacks.
WHEELS="msgspec pyzmq pydantic pydantic-core annotated-types typing-inspection typing-extensions
        fastapi starlette uvicorn httptools opentelemetry-api"

download_wheels() {
  # The versions installed here (known to work with this code), for CPython 3.12 on x86-64.
  local specs=() name
  for name in $WHEELS; do
    specs+=("$name==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
  done
  if [[ $WHEEL_DIR == .whl ]]; then  # never committed: the device tool carries it by name
    grep -qx '/.whl/' "$(git rev-parse --git-path info/exclude)" 2>/dev/null \
      || echo '/.whl/' >> "$(git rev-parse --git-path info/exclude)"
  fi
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$WHEEL_DIR" "${specs[@]}"
  ls -la "$WHEEL_DIR"
}

install_wheels() {
  if compgen -G "$WHEEL_DIR/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/gpu_check_site "$WHEEL_DIR"/*.whl
    export PYTHONPATH="$PWD:/tmp/gpu_check_site"
  else
    export PYTHONPATH="$PWD"
  fi
  "$PY" -c "import fastapi, msgspec, pydantic, uvicorn, zmq" \
    || { echo "missing packages: run scripts/gpu_check.sh --download-wheels where pip works" >&2; exit 2; }
}

raise_open_files() {
  # NOTE: one HTTP process holds every connection; past the soft limit the server accepts and
  # closes them (it only warns), so lift the soft limit to the hard one and say what it is.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 1048576 2>/dev/null || true
  echo "open files: soft limit $(ulimit -n), hard $(ulimit -Hn); concurrency $CONCURRENCY"
}

phase_tests() {
  echo "== CUDA tests (Triton kernels on the GPU vs SDPA and vs the torch fallback in bf16, graphs)"
  "$PY" -m pytest -q -p no:cacheprovider tests/reference_impl/engine/torch_engine/test_cuda.py \
    tests/reference_impl/engine/torch_engine/test_attention_backend.py 2>&1 | tee "$RESULTS/pytest.log"
}

phase_bench() {
  echo "== engine benchmark, $SHAPE shape, seeded random weights"
  PYTHONUNBUFFERED=1 "$PY" benchmarks/torch_engine.py --shape "$SHAPE" --json "$RESULTS/engine.json"
}

phase_serve() {
  # PHASE_DEADLINE (epoch seconds) is when the phase's timeout strikes; loadgen is interrupted
  # (SIGINT: it writes what it measured) ``margin`` seconds before that.
  local margin=15 left rc
  echo "== server on $MODEL_DIR, loadgen --concurrency $CONCURRENCY, $NUM_PROMPTS prompts of 128/128"
  [[ -f $MODEL_DIR/config.json ]] \
    || "$PY" -m reference_impl.engine.torch_engine.random_model --shape "$SHAPE" --out "$MODEL_DIR" \
    || return 1
  "$PY" -m reference_impl --engine torch --model-path "$MODEL_DIR" --port "$PORT" \
    --log-level info > "$RESULTS/server.log" 2>&1 &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null' EXIT
  until "$PY" -c "import httpx, sys; sys.exit(httpx.get(sys.argv[1]).status_code != 200)" \
      "http://127.0.0.1:$PORT/health" 2> /dev/null; do
    kill -0 "$SERVER_PID" 2>/dev/null \
      || { echo "the server exited (server.log):"; tail -20 "$RESULTS/server.log"; return 1; }
    sleep 2
  done
  grep -E "KV pool|KV cache|CUDA graphs|sampling restricted" "$RESULTS/server.log" | head -4
  left=$((PHASE_DEADLINE - $(date +%s) - margin))
  ((left > 0)) || { echo "no time left for the load"; return 1; }
  timeout -s INT -k "$margin" "$left" "$PY" -m loadgen --base-url "http://127.0.0.1:$PORT" \
    --concurrency "$CONCURRENCY" --num-prompts "$NUM_PROMPTS" --random-input-len 128 \
    --random-output-len 128 --random-range-ratio 1 --ignore-eos --timeout 600 \
    --output "$RESULTS/loadgen.json" 2>&1 | tee "$RESULTS/loadgen.log"
  rc=${PIPESTATUS[0]}
  echo "loadgen exit status $rc"
  check_load "$RESULTS/loadgen.json"
}

check_load() {
  # Fails when the load was not measured, a request failed, or the client saw far fewer content
  # events than the server reported output tokens (outputs that do not decode to text).
  "$PY" - "$1" "$MIN_EVENT_RATIO" <<'EOF'
import json, sys
path, min_ratio = sys.argv[1], float(sys.argv[2])
try:
    run = json.load(open(path))
except (OSError, ValueError) as exc:
    sys.exit(f"serve: no results in {path}: {exc}")
done, failed = run.get("completed") or 0, run.get("failed") or 0
tokens, events = run.get("total_output_tokens") or 0, run.get("total_output_tokens_client") or 0
ratio = events / tokens if tokens else 0.0
print(f"serve: {done} completed, {failed} failed, {events} content events for {tokens} output "
      f"tokens ({ratio:.2f}), {run.get('output_throughput') or 0:.0f} tok/s"
      + (", interrupted" if run.get("interrupted") else ""))
if failed or not done or run.get("interrupted"):
    sys.exit("serve: FAILED: requests failed, none completed, or the load was cut short")
if ratio < min_ratio:
    sys.exit(f"serve: FAILED: content events are {ratio:.2f} of the output tokens (< {min_ratio})")
EOF
}

run_phase() {
  # Runs one phase under its timeout (cut to the budget left), prints and records how it ended.
  local phase=$1 limit start rc elapsed note
  local -n own_limit="${phase^^}_TIMEOUT_S"
  limit=$((BUDGET_END - $(date +%s)))
  if ((limit < MIN_PHASE_S)); then
    echo "== $phase: SKIPPED, ${limit}s of the ${BUDGET_S}s budget left"
    printf '%s\t%s\t%s\t%s\n' "$phase" skipped 0 "budget spent" >> "$RESULTS/phases.tsv"
    STATUS=1
    return
  fi
  ((limit > own_limit)) && limit=$own_limit
  start=$(date +%s)
  PHASE_DEADLINE=$((start + limit)) timeout -k 10 "$limit" "$SELF" --phase "$phase"
  rc=$?
  elapsed=$(($(date +%s) - start))
  case $rc in
    0) note=ok ;;
    124 | 137) note="TIMED OUT after ${limit}s" ;;
    *) note="FAILED" ;;
  esac
  ((rc == 0)) || STATUS=1
  echo "== $phase: $note (exit status $rc) in ${elapsed}s"
  printf '%s\t%s\t%s\t%s\n' "$phase" "$rc" "$elapsed" "$note" >> "$RESULTS/phases.tsv"
}

PHASES=()
while (($#)); do
  case $1 in
    --download-wheels) download_wheels; exit ;;
    --phase) "phase_$2"; exit ;;  # one phase, inside run_phase's timeout
    --budget-s) BUDGET_S=${2:?--budget-s needs seconds}; shift 2 ;;
    all) PHASES+=(tests bench serve); shift ;;
    tests | bench | serve) PHASES+=("$1"); shift ;;
    *) echo "usage: $0 [--download-wheels | [--budget-s S] [all|tests|bench|serve ...]]" >&2; exit 2 ;;
  esac
done
((${#PHASES[@]})) || PHASES=(tests bench serve)
[[ $BUDGET_S =~ ^[0-9]+$ ]] || { echo "--budget-s: not a number of seconds: $BUDGET_S" >&2; exit 2; }
BUDGET_END=$(($(date +%s) + BUDGET_S))
mkdir -p "$RESULTS"
printf 'phase\texit_status\tseconds\tnote\n' > "$RESULTS/phases.tsv"
install_wheels
raise_open_files
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
  || echo "nvidia-smi: no GPU seen"
STATUS=0
for phase in "${PHASES[@]}"; do
  run_phase "$phase"
done
echo "== phases ($RESULTS/phases.tsv):"
column -t -s $'\t' "$RESULTS/phases.tsv" 2>/dev/null || cat "$RESULTS/phases.tsv"
exit $STATUS
