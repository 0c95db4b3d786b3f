"""Regenerate tests/loadgen/fixtures/upstream/prompts.json: the upstream tools' own random prompts, made
by their own code, which tests/loadgen/test_upstream.py checks loadgen's rebuild against.

    python scripts/upstream_prompts.py --vllm-python /tmp/peer/venv/bin/python
    python scripts/upstream_prompts.py --vllm-python ... --sglang-python PY [--sglang-source DIR]

`--vllm-python` is an interpreter with vLLM installed (the CPU peer: ../shared/peers/vllm-cpu/recipe.sh);
it runs `vllm.benchmarks.datasets.RandomDataset(random_seed=S).sample(...)` with the tokenizer from
`vllm.tokenizers.get_tokenizer`, as `vllm bench serve` does. `--sglang-python` is one where SGLang's
`sglang.benchmark.datasets.random` imports (with `--sglang-source`, an unpacked SGLang wheel whose
package `__init__`s are skipped, so that its benchmark modules run without the server's
dependencies); it seeds `random` and `numpy.random` with S and calls `sample_random_requests`, as
bench_serving does. Without `--sglang-python` the file's SGLang cases are kept. Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "loadgen", "fixtures", "upstream")
OUT = os.path.join(FIXTURES, "prompts.json")
#: Tokenizer directories, relative to the repository: the vLLM CPU peer's tiny Llama (its recipe's
#: make_tiny.py) and the reference server's embedded byte-level one (special ids past its vocabulary).
TOKENIZERS = {"tiny_llama": "tests/loadgen/fixtures/upstream/tiny_llama",
              "reference": "reference_impl/tokenizer/embedded"}
SHAREGPT = "tests/loadgen/fixtures/upstream/sharegpt.json"
#: (seed, num_prompts, input_len, output_len, range_ratio, prefix_len); the first is the end-to-end test's.
VLLM_CASES = [(0, 4, 32, 8, 0.0, 0), (0, 6, 128, 128, 0.0, 0), (1, 6, 64, 16, 0.5, 0), (7, 5, 48, 32, 0.25, 16),
              (12345, 8, 6, 3, 0.9, 4), (3, 3, 400, 5, 0.1, 0)]
#: (seed, num_prompts, input_len, output_len, range_ratio); random-ids, and random from SHAREGPT.
SGLANG_CASES = [(1, 6, 64, 16, 0.0), (42, 6, 128, 32, 1.0), (7, 8, 3, 5, 0.25), (0, 20, 40, 8, 0.5)]

VLLM_RUN = """
import json, sys, transformers, vllm
from vllm.benchmarks.datasets import RandomDataset
from vllm.tokenizers import get_tokenizer
job = json.load(sys.stdin)
out = {"versions": {"vllm": vllm.__version__, "transformers": transformers.__version__}, "tokenizers": {}, "cases": []}
for name, path in job["tokenizers"].items():
    tok = get_tokenizer(path)
    out["tokenizers"][name] = {"vocab_size": tok.vocab_size, "all_special_ids": sorted(tok.all_special_ids),
                               "num_special_tokens_to_add": tok.num_special_tokens_to_add()}
    for seed, num, in_len, out_len, ratio, prefix in job["cases"]:
        reqs = RandomDataset(random_seed=seed).sample(tokenizer=tok, num_requests=num, prefix_len=prefix,
                                                      range_ratio=ratio, input_len=in_len, output_len=out_len)
        out["cases"].append({"tool": "vllm", "dataset": "random", "tokenizer": name, "seed": seed,
                             "num_prompts": num, "input_len": in_len, "output_len": out_len,
                             "range_ratio": ratio, "prefix_len": prefix, "prompts": [r.prompt for r in reqs],
                             "input_lens": [r.prompt_len for r in reqs],
                             "output_lens": [r.expected_output_len for r in reqs]})
print(json.dumps(out))
"""

SGLANG_RUN = """
import json, random, sys, types
job = json.load(sys.stdin)
if job["source"]:
    for name, sub in (("sglang", ""), ("sglang.benchmark", "/benchmark"), ("sglang.benchmark.datasets", "/benchmark/datasets")):
        module = types.ModuleType(name)
        module.__path__ = [job["source"] + "/sglang" + sub]
        sys.modules[name] = module
import numpy as np, transformers
from sglang.benchmark.datasets.random import sample_random_requests
from sglang.benchmark.utils import get_tokenizer
from sglang.version import __version__
out = {"versions": {"sglang": __version__, "transformers": transformers.__version__}, "cases": []}
for name, path in job["tokenizers"].items():
    tok = get_tokenizer(path)
    for dataset, dataset_path in (("random-ids", ""), ("random", job["sharegpt"])):
        for seed, num, in_len, out_len, ratio in job["cases"]:
            random.seed(seed)
            np.random.seed(seed)
            rows = sample_random_requests(input_len=in_len, output_len=out_len, num_prompts=num, range_ratio=ratio,
                                          tokenizer=tok, dataset_path=dataset_path,
                                          random_sample=dataset == "random", return_text=True)
            out["cases"].append({"tool": "sglang", "dataset": dataset, "tokenizer": name, "seed": seed,
                                 "num_prompts": num, "input_len": in_len, "output_len": out_len,
                                 "range_ratio": ratio, "prompts": [r.prompt for r in rows],
                                 "input_lens": [int(r.prompt_len) for r in rows],
                                 "output_lens": [int(r.output_len) for r in rows]})
print(json.dumps(out))
"""


def run_upstream(python: str, code: str, job: dict) -> dict:
    """Run `code` in `python` (the upstream tool's interpreter) with `job` on stdin; its JSON answer."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu"}
    done = subprocess.run([python, "-c", code], input=json.dumps(job), capture_output=True, text=True,
                          env=env, cwd=ROOT, check=False)
    if done.returncode:
        raise SystemExit(f"{python} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", required=True, help="an interpreter with vLLM installed")
    p.add_argument("--sglang-python", default=None, help="an interpreter where SGLang's benchmark imports")
    p.add_argument("--sglang-source", default=None, help="an unpacked SGLang wheel (skips its package __init__s)")
    a = p.parse_args(argv)
    vllm = run_upstream(a.vllm_python, VLLM_RUN, {"tokenizers": TOKENIZERS, "cases": VLLM_CASES})
    old = json.load(open(OUT, encoding="utf-8")) if os.path.exists(OUT) else {"versions": {}, "cases": []}
    sglang = {"versions": {"sglang": old["versions"].get("sglang")},
              "cases": [c for c in old["cases"] if c["tool"] == "sglang"]}
    if a.sglang_python:
        sglang = run_upstream(a.sglang_python, SGLANG_RUN, {"tokenizers": TOKENIZERS, "cases": SGLANG_CASES,
                                                            "sharegpt": SHAREGPT, "source": a.sglang_source})
    fixture = {"versions": {**vllm["versions"], "sglang": sglang["versions"]["sglang"]},
               "tokenizers": vllm["tokenizers"], "sharegpt": SHAREGPT, "cases": vllm["cases"] + sglang["cases"]}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {OUT}: {len(fixture['cases'])} cases, {sum(len(c['prompts']) for c in fixture['cases'])} prompts")


if __name__ == "__main__":
    main()
