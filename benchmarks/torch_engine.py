"""Torch engine figures: decode tokens/s and step time by batch size, prefill tokens/s by
prompt length, parameter and KV bytes, and on a GPU the memory-bandwidth floor per decode step
(parameter bytes + the batch's KV bytes over peak HBM bandwidth) and the fraction of it reached.

A script, not an asv suite (asv imports this module; all work runs under ``__main__``)::

    python benchmarks/torch_engine.py                        # CPU: embedded default, small sizes
    python benchmarks/torch_engine.py --shape llama3-8b      # GPU: Llama-3-8B shape, seeded
                                                             # random weights (no download)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

# Peak HBM bandwidth (bytes/s) by device-name substring, for the decode floor.
_PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "L40S": 0.864e12, "A10": 0.6e12}
_CPU_DEFAULTS = {"batch_sizes": "1,8,64,512,2048", "context_len": 64, "decode_steps": 3,
                 "prefill_lens": "128,512,2048"}
_GPU_DEFAULTS = {"batch_sizes": "1,64,256,1024", "context_len": 256, "decode_steps": 16,
                 "prefill_lens": "512,2048,8192,32768"}


def _parse(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"))
    p.add_argument("--model-path", default=None, help="HF model directory (default: embedded)")
    p.add_argument("--shape", default=None, help="a random_model shape (e.g. llama3-8b) with "
                   "seeded random weights, instead of --model-path")
    p.add_argument("--batch-sizes", default=None, help="comma-separated decode batch sizes")
    p.add_argument("--context-len", type=int, default=None, help="prompt tokens per decode request")
    p.add_argument("--decode-steps", type=int, default=None, help="timed decode steps per batch size")
    p.add_argument("--prefill-lens", default=None, help="comma-separated prefill prompt lengths")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int, default=512)
    p.add_argument("--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--peak-bandwidth-gbs", type=float, default=None,
                   help="device memory bandwidth in GB/s (default: from the device name)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    return p.parse_args(argv)


def _engine(ns, num_tokens: int):
    from reference_impl.config import ServerArgs
    from reference_impl.engine.torch_engine import TorchEngine
    from reference_impl.hot_paths import HOT_PATHS
    from reference_impl.tokenizer import ByteLevelTokenizer

    args = ServerArgs(engine="torch", device=ns.device, dtype=ns.dtype, model_path=ns.model_path,
                      max_total_tokens=num_tokens, disable_cuda_graph=ns.disable_cuda_graph,
                      cuda_graph_max_bs=ns.cuda_graph_max_bs, context_length=ns.context_length,
                      chunked_prefill_size=ns.chunked_prefill_size,
                      max_running_requests=max(ns.max_batch, 1))
    storage = HOT_PATHS["H4"].create("array")
    return TorchEngine(args, ByteLevelTokenizer(), storage), storage


def _reqs(storage, n: int, prompt_len: int, max_new: int, vocab: int, tag: str):
    from reference_impl.messages import SamplingParams, TokenizedGenerateReq
    from reference_impl.scheduler.request import Req

    rng = random.Random(n * 7919 + prompt_len)
    return [Req(TokenizedGenerateReq(f"{tag}{i}", [rng.randrange(min(vocab, 256)) for _ in range(prompt_len)],
                                     SamplingParams(max_new_tokens=max_new, temperature=0), stream=False),
                storage, 0) for i in range(n)]


def _timed_step(engine, batch) -> tuple[list[int], float]:
    start = time.perf_counter()
    ids = engine.forward(batch)  # ends in .tolist(): the device has finished
    return ids, time.perf_counter() - start


def _decode_figures(engine, storage, ns, batch_sizes: list[int]) -> list[dict]:
    from reference_impl.engine.base import ForwardBatch

    max_new = (ns.decode_steps + 1) * len(batch_sizes) + 2
    reqs = _reqs(storage, max(batch_sizes), ns.context_len, max_new, engine.config.vocab_size, "d")
    for req, tok in zip(reqs, engine.forward(ForwardBatch(True, reqs)), strict=True):
        req.output_ids.append(tok)  # the engine prefills them in --chunked-prefill-size forwards
    rows = []
    for bs in batch_sizes:
        batch = ForwardBatch(False, reqs[:bs])
        times = []
        for step in range(ns.decode_steps + 1):  # the first step warms up (and captures a graph)
            ids, seconds = _timed_step(engine, batch)
            for req, tok in zip(batch.reqs, ids, strict=True):
                req.output_ids.append(tok)
            if step:
                times.append(seconds)
        kv_tokens = sum(r.seq_len for r in batch.reqs)
        step_s = statistics.median(times)
        rows.append({"batch_size": bs, "step_ms": step_s * 1e3, "tok_per_s": bs / step_s,
                     "kv_tokens": kv_tokens})
    for req in reqs:
        engine.release(req)
    return rows


def _prefill_figures(engine, storage, lens: list[int], repeats: int) -> list[dict]:
    from reference_impl.engine.base import ForwardBatch

    rows = []
    for length in lens:
        times = []
        for r in range(repeats + 1):
            engine.prefix_cache.clear()
            (req,) = _reqs(storage, 1, length, 1, engine.config.vocab_size, f"p{length}-{r}-")
            _, seconds = _timed_step(engine, ForwardBatch(True, [req]))
            engine.release(req)
            if r:
                times.append(seconds)
        seconds = statistics.median(times)
        rows.append({"prompt_len": length, "ms": seconds * 1e3, "tok_per_s": length / seconds})
    return rows


def _peak_bandwidth(ns, engine) -> float | None:
    import torch

    if ns.peak_bandwidth_gbs:
        return ns.peak_bandwidth_gbs * 1e9
    if engine.device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(engine.device)
    return next((bw for key, bw in _PEAK_BANDWIDTH.items() if key in name), None)


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    import tempfile

    import torch

    if ns.shape:
        from reference_impl.engine.torch_engine.random_model import write_random_model_dir

        ns.model_path = str(write_random_model_dir(ns.shape, tempfile.mkdtemp(prefix=ns.shape)))

    from reference_impl.engine.torch_engine import KVCache, resolve_device

    device = resolve_device(ns.device)
    defaults = _GPU_DEFAULTS if device.type == "cuda" else _CPU_DEFAULTS
    for key, value in defaults.items():
        if getattr(ns, key) is None:
            setattr(ns, key, value)
    batch_sizes = [int(x) for x in ns.batch_sizes.split(",")]
    prefill_lens = [int(x) for x in ns.prefill_lens.split(",")]
    per_req = ns.context_len + (ns.decode_steps + 1) * len(batch_sizes) + 2
    num_tokens = max(max(batch_sizes) * per_req, max(prefill_lens) + 1)
    ns.max_batch, ns.context_length = max(batch_sizes), max(per_req, max(prefill_lens) + 1)
    engine, storage = _engine(ns, num_tokens)
    params = sum(p.nbytes for p in engine.model.parameters())
    kv_per_token = KVCache.bytes_per_token(engine.config, engine.dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    print(f"device: {name}; {engine.memory_report()}")
    print(f"model: {ns.shape or ns.model_path or 'embedded default'}; parameter bytes {params:,}; "
          f"KV bytes per token {kv_per_token:,}")
    bandwidth = _peak_bandwidth(ns, engine)
    decode = _decode_figures(engine, storage, ns, batch_sizes)
    print(f"\ndecode (context {ns.context_len} tokens, median of {ns.decode_steps} steps, sampling included)")
    print(f"{'batch':>6} {'step ms':>9} {'tok/s':>11} {'bytes/step':>15}"
          + (f" {'floor ms':>9} {'of floor':>8}" if bandwidth else ""))
    for row in decode:
        row["bytes_per_step"] = params + row["kv_tokens"] * kv_per_token
        line = (f"{row['batch_size']:>6} {row['step_ms']:>9.2f} {row['tok_per_s']:>11.1f} "
                f"{row['bytes_per_step']:>15,}")
        if bandwidth:
            row["floor_ms"] = row["bytes_per_step"] / bandwidth * 1e3
            row["fraction_of_floor"] = row["floor_ms"] / row["step_ms"]
            line += f" {row['floor_ms']:>9.3f} {row['fraction_of_floor']:>8.1%}"
        print(line)
    prefill = _prefill_figures(engine, storage, prefill_lens, repeats=3 if device.type == "cuda" else 1)
    print("\nprefill (one request, no cached prefix)")
    print(f"{'tokens':>7} {'ms':>9} {'tok/s':>11}")
    for row in prefill:
        print(f"{row['prompt_len']:>7} {row['ms']:>9.2f} {row['tok_per_s']:>11.1f}")
    print(f"\n{engine.memory_report()}")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"device": name, "dtype": str(engine.dtype), "param_bytes": params,
                       "kv_bytes_per_token": kv_per_token, "peak_bandwidth": bandwidth,
                       "decode": decode, "prefill": prefill}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
