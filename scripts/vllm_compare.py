"""loadgen next to `vllm bench serve` on a real vLLM server, interleaved, on identical prompts.

    python scripts/vllm_compare.py                       # C = 32 and 128, 3 pairs each
    python scripts/vllm_compare.py --loadgen-ref 1ff7288 # also an older loadgen, in the same rotation
    python scripts/vllm_compare.py --show-requests       # both clients' request bytes, side by side
    python scripts/vllm_compare.py --dataset random      # each client builds its own prompts from --seed 0

Installs vLLM's CPU build and a tiny random Llama from ../shared/peers/vllm-cpu/recipe.sh when
`--peer-dir` lacks them (about 2 min, 3.4 GB), serves it pinned to `--server-cpu` with prefix
caching off, and writes `--prompts-per-stream` x C prompts with vLLM's own RandomDataset (seed 0)
to a JSONL file. `vllm bench serve --dataset-name custom --skip-chat-template --disable-shuffle`
and `loadgen --dataset custom --disable-shuffle` then send that file's prompts in the same order,
both pinned to `--client-cpu`. With `--dataset random` each client builds its own random prompts
from `--seed 0` (`loadgen --flags-from vllm --dataset-name random --tokenizer <the model's
tokenizer.json>`), and the server's prompt-token counter shows whether they were the same. The order of the clients rotates from pair to pair, so neither
always runs first. Each run also reads the server's own counters (vLLM's /metrics) before and
after: engine steps, tokens per step and the server-side inter-token latency, which tell whether
the server ran differently or the clients measure differently. Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import harness
from harness import Load, RunError
from loadgen.measure.prometheus import scrape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "..", "shared", "peers", "vllm-cpu", "recipe.sh")
METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms", "mean_itl_ms",
           "p99_itl_ms", "mean_tpot_ms")
SERVER_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:iteration_tokens_total_count",
                   "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count")
VLLM_FLAGS = ":vllm-flags"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
       "DO_NOT_TRACK": "1", "VLLM_TARGET_DEVICE": "cpu"}

GEN_PROMPTS = """
import json, sys
from vllm.benchmarks.datasets import RandomDataset
from vllm.tokenizers import get_tokenizer
model, out, num, in_len, out_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tok = get_tokenizer(model)
reqs = RandomDataset(random_seed=0).sample(tokenizer=tok, num_requests=num, input_len=in_len, output_len=out_len)
with open(out, "w") as f:
    for r in reqs:
        f.write(json.dumps({"prompt": r.prompt, "output_tokens": r.expected_output_len}) + "\\n")
"""


def ensure_peer(peer: str) -> None:
    """Install vLLM's CPU build and the tiny model with the shared recipe when missing."""
    if not (os.path.exists(f"{peer}/venv/bin/vllm") and os.path.exists(f"{peer}/tiny/config.json")):
        print(f"installing the vLLM CPU peer into {peer} (about 2 min)", flush=True)
        subprocess.run(["bash", RECIPE], env={**ENV, "BASE": peer, "STEPS": "install model"}, check=True)
    # NOTE: vLLM's custom dataset reads JSONL with pandas, which the recipe does not install.
    if subprocess.run([f"{peer}/venv/bin/python", "-c", "import pandas"], capture_output=True).returncode:
        subprocess.run([f"{peer}/venv/bin/pip", "install", "-q", "pandas"], check=True)


def start_server(peer: str, port: int, cpu: int, log_path: str) -> subprocess.Popen:
    """`vllm serve` of the tiny model pinned to one CPU; returns once /health answers."""
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
        raise SystemExit(f"something already serves 127.0.0.1:{port}; stop it or pass --port")
    except OSError:
        pass
    cmd = ["taskset", "-c", str(cpu), f"{peer}/venv/bin/vllm", "serve", f"{peer}/tiny", "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "bfloat16", "--max-model-len", "2048", "--no-enable-prefix-caching"]
    env = {**ENV, "VLLM_CPU_OMP_THREADS_BIND": str(cpu), "VLLM_CPU_KVCACHE_SPACE": "2"}
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited {proc.returncode}; see {log_path}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            time.sleep(1)
    stop(proc)
    raise SystemExit(f"vllm serve not ready in 240 s; see {log_path}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group we started, SIGKILL after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def server_counters(port: int) -> dict[str, float]:
    """The summed values of SERVER_COUNTERS from vLLM's /metrics."""
    metrics = scrape(f"http://127.0.0.1:{port}", timeout=10)
    return {name: metrics.total(name) for name in SERVER_COUNTERS}


def server_view(before: dict, after: dict, duration_s: float) -> dict:
    """Engine steps, tokens per step and server-side ITL over one run."""
    d = {k: after[k] - before[k] for k in SERVER_COUNTERS}
    steps = d["vllm:iteration_tokens_total_count"]
    n_itl = d["vllm:inter_token_latency_seconds_count"]
    return {"server_steps": steps, "server_prompt_tokens": d["vllm:prompt_tokens_total"],
            "server_gen_tokens": d["vllm:generation_tokens_total"],
            "server_tokens_per_step": d["vllm:generation_tokens_total"] / steps if steps else None,
            "server_mean_itl_ms": 1e3 * d["vllm:inter_token_latency_seconds_sum"] / n_itl if n_itl else None,
            "server_steps_per_s": steps / duration_s if duration_s else None}


def write_prompts(peer: str, path: str, num: int, in_len: int, out_len: int) -> None:
    """vLLM's own random prompts (RandomDataset, seed 0) as custom JSONL and as ShareGPT JSON."""
    subprocess.run([f"{peer}/venv/bin/python", "-c", GEN_PROMPTS, f"{peer}/tiny", path, str(num), str(in_len),
                    str(out_len)], env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(path)]
    with open(path.replace(".jsonl", ".sharegpt.json"), "w") as f:
        json.dump([{"conversations": [{"from": "human", "value": r["prompt"]}, {"from": "gpt", "value": "x"}]}
                   for r in rows], f)


def run_vllm(a, port: int, prompts: str, conc: int, num: int, out: str) -> dict:
    """One `vllm bench serve` run on the custom prompts; its result JSON."""
    d, name = os.path.dirname(out), os.path.basename(out)
    if a.dataset == "random":
        data = ["--dataset-name", "random", "--random-input-len", str(a.input_len),
                "--random-output-len", str(a.output_len)]
    else:
        data = ["--dataset-name", "custom", "--dataset-path", prompts, "--custom-output-len", str(a.output_len),
                "--skip-chat-template", "--disable-shuffle"]
    cmd = ["taskset", "-c", str(a.client_cpu), f"{a.peer_dir}/venv/bin/vllm", "bench", "serve",
           "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", f"http://127.0.0.1:{port}",
           "--model", f"{a.peer_dir}/tiny", "--tokenizer", f"{a.peer_dir}/tiny", *data,
           "--num-prompts", str(num), "--max-concurrency", str(conc), "--ignore-eos",
           "--seed", "0", "--save-result", "--save-detailed", "--percentile-metrics", "ttft,tpot,itl,e2el",
           "--metric-percentiles", "50,90,95,99,99.9", "--result-dir", d, "--result-filename", name, "--disable-tqdm",
           "--ready-check-timeout-sec", "0"]
    _run_logged(cmd, out + ".log", ENV)
    return json.load(open(out))


def run_loadgen(a, port: int, prompts: str, conc: int, num: int, out: str, client: str, tree: str | None) -> dict:
    """One loadgen run (this checkout, or the older tree at --loadgen-ref).

    A plain client sends the same prompts as vLLM; a `:vllm-flags` client builds its own random
    prompts from the flags a vLLM user would copy (what a user moving from `vllm bench serve` gets)."""
    # NOTE: `python -m` puts the working directory first on sys.path, so an older tree's loadgen
    # runs from that tree as the working directory.
    cwd = tree or ROOT
    if client.endswith(VLLM_FLAGS) or a.dataset == "random":
        data = ("--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len))
        data += ("--flags-from", "vllm") if _loadgen_has(cwd, "--flags-from") else ()
    elif _loadgen_has(cwd, "custom"):
        data = ("--dataset", "custom", "--dataset-path", prompts, "--custom-output-len", str(a.output_len),
                "--disable-shuffle")
    else:  # an older loadgen has no custom dataset: the same prompts as ShareGPT
        data = ("--dataset", "sharegpt", "--dataset-path", prompts.replace(".jsonl", ".sharegpt.json"),
                "--sharegpt-output-len", str(a.output_len))
    load = Load(conc, num, a.input_len, a.output_len, seed=0, dataset=data,
                extra=("--model", f"{a.peer_dir}/tiny", "--tokenizer", f"{a.peer_dir}/tiny/tokenizer.json"))
    try:
        r = harness.run_loadgen(f"http://127.0.0.1:{port}", load, Path(out), cwd=cwd,
                        preexec_fn=lambda: os.sched_setaffinity(0, {a.client_cpu}))
    except RunError as error:
        raise SystemExit(f"loadgen ({client}): {error}") from None
    return {**r, **{k: r["summary"].get(k) for k in METRICS if r.get(k) is None}}


def _loadgen_has(cwd: str, word: str) -> bool:
    help_text = subprocess.run([sys.executable, "-m", "loadgen", "--help"], cwd=cwd,
                               env={**os.environ, "PYTHONPATH": cwd}, capture_output=True, text=True)
    return word in help_text.stdout


def _run_logged(cmd: list[str], log_path: str, env: dict, cwd: str | None = None) -> None:
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, timeout=900).returncode
    if rc != 0:
        raise SystemExit(f"{cmd[3]} ... exited {rc}; see {log_path}")


def compare(a, port: int, prompts: str, out_dir: str, trees: dict[str, str | None]) -> dict:
    """All runs, the client order rotating from pair to pair; {conc: {client: [rows]}}."""
    clients = ["vllm", *trees]
    rows: dict = {}
    for conc in a.concurrency:
        num = a.prompts_per_stream * conc
        rows[conc] = {c: [] for c in clients}
        for pair in range(a.pairs):
            k = pair % len(clients)
            for client in clients[k:] + clients[:k]:
                out = os.path.join(out_dir, f"c{conc}_p{pair}_{re.sub('[@:]', '_', client)}.json")
                before, t0 = server_counters(port), time.perf_counter()
                r = (run_vllm(a, port, prompts, conc, num, out) if client == "vllm"
                     else run_loadgen(a, port, prompts, conc, num, out, client, trees[client]))
                row = {m: r.get(m) for m in METRICS}
                row.update(server_view(before, server_counters(port), r.get("duration") or time.perf_counter() - t0))
                rows[conc][client].append(row)
                print(json.dumps({"conc": conc, "pair": pair, "client": client, **row}), flush=True)
    return rows


def print_table(rows: dict) -> None:
    """Medians over the pairs, one column per client, then each loadgen's ratio to vllm."""
    keys = (*METRICS, "server_mean_itl_ms", "server_tokens_per_step", "server_steps_per_s", "server_prompt_tokens",
            "server_gen_tokens")
    for conc, by_client in rows.items():
        clients = list(by_client)
        print(f"\nC={conc}: median over {len(by_client['vllm'])} runs each; ratios are client/vllm")
        for i, c in enumerate(clients):
            print(f"  [{i}] {c}")
        head = "".join(f"{f'[{i}]':>10}" for i in range(len(clients)))
        print(f"{'metric':24}{head}" + "".join(f"{f'[{i}]/[0]':>10}" for i in range(1, len(clients))))
        for k in keys:
            med = [statistics.median(v) if (v := [r[k] for r in by_client[c] if r[k] is not None]) else None
                   for c in clients]
            cells = "".join(f"{m:>10.2f}" if m is not None else f"{'-':>10}" for m in med)
            ratios = "".join(f"{m / med[0]:>10.3f}" if m and med[0] else f"{'-':>10}" for m in med[1:])
            print(f"{k:24}{cells}{ratios}")


_SSE = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]},
    {"object": "chat.completion.chunk", "choices": [],
     "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})) + b"data: [DONE]\n\n"


class _Capture(socketserver.StreamRequestHandler):
    """Keeps every request's raw bytes (`server.seen`) and answers a one-token SSE stream."""

    def handle(self) -> None:
        while head := self._head():
            n = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")), 0)
            self.server.seen.append(head + self.rfile.read(n))
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
                             % len(_SSE) + _SSE)

    def _head(self) -> bytes:
        lines = []
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            lines.append(line)
        return b"".join(lines) + b"\r\n" if lines else b""


def show_requests(a, prompts: str, out_dir: str) -> None:
    """Send the first prompt once with each client to a capturing server; print both requests."""
    for client in ("vllm", "loadgen"):
        with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Capture) as srv:
            srv.seen, srv.daemon_threads = [], True
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            out = os.path.join(out_dir, f"capture_{client}.json")
            port = srv.server_address[1]
            if client == "vllm":
                run_vllm(a, port, prompts, 1, 1, out)
            else:
                run_loadgen(a, port, prompts, 1, 1, out, "loadgen", None)
            srv.shutdown()
        posts = [r for r in srv.seen if r.startswith(b"POST /v1/chat")]
        print(f"----- {client}: {len(srv.seen)} requests, first chat completion:")
        print(posts[0].decode(errors="replace") if posts else "(none)")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python scripts/vllm_compare.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-dir", default="/tmp/peer")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[32, 128])
    p.add_argument("--pairs", type=int, default=3, help="runs of each client per concurrency")
    p.add_argument("--prompts-per-stream", type=int, default=4)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--server-cpu", type=int, default=1)
    p.add_argument("--client-cpu", type=int, default=0)
    p.add_argument("--loadgen-ref", action="append", default=[], help="also run loadgen at this git ref")
    p.add_argument("--dataset", choices=("custom", "random"), default="custom",
                   help="custom: both send vLLM's prompts from one file; random: each builds its own from --seed 0")
    p.add_argument("--copied-flags", action="store_true",
                   help="also run each loadgen on its own random prompts from the flags a vLLM user copies")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--show-requests", action="store_true", help="print both clients' request bytes and stop")
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse_args(argv)
    ensure_peer(a.peer_dir)
    out_dir = a.out_dir or tempfile.mkdtemp(prefix="vllm-compare-")
    os.makedirs(out_dir, exist_ok=True)
    prompts = os.path.join(out_dir, "prompts.jsonl")
    write_prompts(a.peer_dir, prompts, a.prompts_per_stream * max(a.concurrency), a.input_len, a.output_len)
    if a.show_requests:
        show_requests(a, prompts, out_dir)
        return
    trees = {"loadgen": None}
    for ref in a.loadgen_ref:
        trees[f"loadgen@{ref}"] = tree = os.path.join(out_dir, f"tree-{ref}")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, ref], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if a.copied_flags:
        trees.update({name + VLLM_FLAGS: tree for name, tree in list(trees.items())})
    server = start_server(a.peer_dir, a.port, a.server_cpu, os.path.join(out_dir, "serve.log"))
    try:
        print_table(compare(a, a.port, prompts, out_dir, trees))
    finally:
        stop(server)
        for tree in set(trees.values()):
            if tree is not None:
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=False)
    print(f"\nruns and logs in {out_dir}")


if __name__ == "__main__":
    main()
