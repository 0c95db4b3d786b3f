"""loadgen rebuilds `vllm bench serve`'s and SGLang bench_serving's random prompts exactly.

fixtures/upstream/prompts.json holds the tools' own prompts, made by their own code (vLLM 0.32.0,
SGLang 0.5.23, transformers 5.19) with scripts/upstream_prompts.py; tiny_llama/ is the vLLM CPU peer's
tokenizer (../shared/peers/vllm-cpu/recipe.sh, make_tiny.py), sharegpt.json a small ShareGPT file.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from loadgen.cli import main
from loadgen.flags import config_from_args
from loadgen.plan.datasets import DatasetConfig, build_prompts
from loadgen.plan.lengths import FileTokenizer
from loadgen.plan.upstream import HfView

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "loadgen", "fixtures", "upstream", "prompts.json")
with open(FIXTURE, encoding="utf-8") as _f:
    GOLDEN = json.load(_f)
TOKENIZERS = {"tiny_llama": os.path.join(ROOT, "tests/loadgen/fixtures/upstream/tiny_llama"),
              "reference": os.path.join(ROOT, "reference_impl/tokenizer/embedded")}


def _case_id(case: dict) -> str:
    return "-".join(str(case[k]) for k in ("tool", "dataset", "tokenizer", "seed", "input_len", "range_ratio"))


def _config(case: dict) -> DatasetConfig:
    sharegpt = os.path.join(ROOT, GOLDEN["sharegpt"]) if case["dataset"] == "random" else None
    return DatasetConfig(
        name="random-ids" if case["dataset"] == "random-ids" else "random", num_prompts=case["num_prompts"],
        random_input_len=case["input_len"], random_output_len=case["output_len"],
        random_range_ratio=case["range_ratio"], random_prefix_len=case.get("prefix_len", 0), seed=case["seed"],
        convention=case["tool"], tokenizer_path=TOKENIZERS[case["tokenizer"]],
        dataset_path=sharegpt if case["tool"] == "sglang" else None)


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_tokenizer_facts_are_transformers(name):
    hf = HfView(FileTokenizer(TOKENIZERS[name]))
    facts = GOLDEN["tokenizers"][name]
    assert (hf.vocab_size, sorted(hf.all_special_ids), hf.num_special_tokens) == (
        facts["vocab_size"], facts["all_special_ids"], facts["num_special_tokens_to_add"])


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=_case_id)
def test_prompts_are_the_upstream_tools_own(case):
    prompts = build_prompts(_config(case))
    assert [p.prompt for p in prompts] == case["prompts"]
    assert [p.output_len for p in prompts] == case["output_lens"]
    tok = FileTokenizer(TOKENIZERS[case["tokenizer"]])
    assert all(p.is_exact_input_len and p.input_len == len(tok.encode(p.prompt)) for p in prompts)
    if case["tool"] == "vllm":  # NOTE: vLLM counts the text's tokens too; SGLang counts the drawn length
        assert [p.input_len for p in prompts] == case["input_lens"]


def test_vllm_refuses_what_vllm_refuses():
    cfg = DatasetConfig(name="random", num_prompts=2, random_input_len=1, random_range_ratio=0.5, seed=0,
                        convention="vllm", tokenizer_path=TOKENIZERS["tiny_llama"])
    with pytest.raises(ValueError, match="--random-input-len 1 is too small"):
        build_prompts(cfg)


def _args(*flags: str):
    from loadgen.flags import build_parser

    return config_from_args(build_parser().parse_args(["--concurrency", "1", *flags]))


def test_which_flags_rebuild_upstream_prompts():
    from loadgen.plan.datasets import upstream_prompts

    tok = ("--tokenizer", TOKENIZERS["tiny_llama"])
    assert upstream_prompts(_args("--flags-from", "vllm", *tok)[1]) == "vllm"
    assert upstream_prompts(_args("--flags-from", "vllm")[1]) is None
    assert upstream_prompts(_args("--dataset", "random-ids", "--backend", "openai-chat", *tok)[1]) == "sglang-random-ids"
    assert upstream_prompts(_args(*tok)[1]) is None  # SGLang's random needs its ShareGPT file
    assert upstream_prompts(_args("--dataset-path", os.path.join(ROOT, GOLDEN["sharegpt"]), *tok)[1]) == "sglang-random"
    with pytest.raises(ValueError, match="needs --backend openai-completions"):
        _args("--dataset", "random-ids", "--backend", "openai-chat")


def test_run_sends_vllm_bench_serves_prompts(start_server, tmp_path):
    case = GOLDEN["cases"][0]
    assert (case["tool"], case["tokenizer"], case["seed"], case["prefix_len"], case["range_ratio"]) == (
        "vllm", "tiny_llama", 0, 0, 0.0)
    server = start_server("--ttft-ms", "1", "--gap-ms", "1", "--log-requests")
    out = tmp_path / "r.json"
    rc = main(["--base-url", server.base_url, "--backend", "openai-chat", "--flags-from", "vllm",
               "--dataset-name", "random", "--seed", "0", "--tokenizer", TOKENIZERS["tiny_llama"],
               "--num-prompts", str(case["num_prompts"]), "--random-input-len", str(case["input_len"]),
               "--random-output-len", str(case["output_len"]), "--concurrency", "1", "--quiet",
               "--output", str(out)])
    assert rc == 0
    bodies = [entry["body"] for entry in httpx.get(server.base_url + "/requests", timeout=10).json()]
    assert [b["messages"] for b in bodies] == [[{"role": "user", "content": p}] for p in case["prompts"]]
    assert [b["max_completion_tokens"] for b in bodies] == case["output_lens"]
    assert all(b["ignore_eos"] is True for b in bodies)  # as vLLM sends it with its random dataset
    assert json.loads(out.read_text())["dataset"]["prompts_from"].startswith("vllm bench serve")


@pytest.mark.parametrize("content", ['{"conversations": []}', '["text"]', '[{"conversations": [{"value": 1}, {}]}]',
                                     '[{"conversations": [{"from": "human"}]}]'])
def test_sglang_random_refuses_a_file_that_is_not_sharegpt(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    cfg = DatasetConfig(name="random", num_prompts=2, random_input_len=8, seed=0, convention="sglang",
                        tokenizer_path=TOKENIZERS["tiny_llama"], dataset_path=str(path))
    with pytest.raises(ValueError, match="not a ShareGPT file|no string 'value'|no usable conversations"):
        build_prompts(cfg)
