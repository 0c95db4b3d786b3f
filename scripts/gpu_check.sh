#!/usr/bin/env bash
# One command for a GPU machine with no network (torch + Triton in its image, nothing else
# fetched): the CUDA tests, the torch engine benchmark on a Llama-3-8B-shaped model with seeded
# random weights, then the server on that model under `loadgen --concurrency 2048`.
#
#   scripts/gpu_check.sh --download-wheels   # HERE (with PyPI): wheels the GPU image lacks -> .whl/
#   scripts/gpu_check.sh [all|tests|bench|serve]   # THERE: installs .whl/*.whl if present, runs
#
# Results go to $OUT (the device tool's folder) or ./gpu_check_out: pytest.log, engine.json,
# server.log, loadgen.json. Run the phases one by one where a call is limited to 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PHASE=${1:-all}
RESULTS=${OUT:-$PWD/gpu_check_out}
SHAPE=${SHAPE:-llama3-8b}
MODEL_DIR=${MODEL_DIR:-/tmp/$SHAPE-random}  # written unless it already holds a config.json
PORT=${PORT:-30000}
CONCURRENCY=${CONCURRENCY:-2048}
NUM_PROMPTS=${NUM_PROMPTS:-4096}
WHEEL_DIR=${WHEEL_DIR:-.whl}
STATUS=0
# What the GPU image (torch 2.11, Triton 3.6, httpx, uvloop, tokenizers, ...) lacks.
WHEELS="msgspec pyzmq pydantic pydantic-core annotated-types typing-inspection fastapi starlette
        uvicorn httptools opentelemetry-api"

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

run_tests() {
  echo "== CUDA tests (Triton kernels on the GPU vs SDPA, graphs, 100K-token prefill)"
  "$PY" -m pytest -q -p no:cacheprovider tests/reference_impl/engine/torch_engine/test_cuda.py \
    tests/reference_impl/engine/torch_engine/test_attention_backend.py 2>&1 \
    | tee "$RESULTS/pytest.log" || { echo "CUDA tests FAILED (pytest.log); going on"; STATUS=1; }
}

run_bench() {
  echo "== engine benchmark, $SHAPE shape, seeded random weights"
  PYTHONUNBUFFERED=1 "$PY" benchmarks/torch_engine.py --shape "$SHAPE" \
    --json "$RESULTS/engine.json"
}

run_serve() {
  echo "== server on $MODEL_DIR, loadgen --concurrency $CONCURRENCY"
  [[ -f $MODEL_DIR/config.json ]] \
    || "$PY" -m reference_impl.engine.torch_engine.random_model --shape "$SHAPE" --out "$MODEL_DIR"
  "$PY" -m reference_impl --engine torch --model-path "$MODEL_DIR" --port "$PORT" \
    --log-level info > "$RESULTS/server.log" 2>&1 &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null || true' EXIT
  for _ in $(seq 300); do
    "$PY" -c "import httpx, sys; sys.exit(httpx.get(sys.argv[1]).status_code != 200)" \
      "http://127.0.0.1:$PORT/health" 2> /dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -50 "$RESULTS/server.log"; exit 1; }
    sleep 2
  done
  grep -E "KV cache|CUDA graphs" "$RESULTS/server.log" | head -3 || true
  "$PY" -m loadgen --base-url "http://127.0.0.1:$PORT" --concurrency "$CONCURRENCY" \
    --num-prompts "$NUM_PROMPTS" \
    --random-input-len 128 --random-output-len 128 --ignore-eos --timeout 600 \
    --output "$RESULTS/loadgen.json"
}

if [[ $PHASE == --download-wheels ]]; then
  download_wheels
  exit 0
fi
mkdir -p "$RESULTS"
install_wheels
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
case $PHASE in
  all) run_tests; run_bench; run_serve ;;
  tests) run_tests ;;
  bench) run_bench ;;
  serve) run_serve ;;
  *) echo "usage: $0 [--download-wheels|all|tests|bench|serve]" >&2; exit 2 ;;
esac
exit $STATUS
