"""vLLM / SGLang compatibility: length conventions, datasets, flags, saved results, https."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from loadgen.cli import main
from loadgen.flags import build_parser, config_from_args, convention_note
from loadgen.plan.datasets import DatasetConfig, build_prompts
from loadgen.plan.texts import length_range, sample_lengths


def _parse(*flags: str):
    return config_from_args(build_parser().parse_args(["--concurrency", "1", *flags]))


def test_range_ratio_follows_the_chosen_convention():
    assert length_range(128, 0.0, "sglang") == (1, 128)
    assert length_range(128, 0.0, "vllm") == (128, 128)
    assert length_range(128, 0.5, "sglang") == (64, 128)
    assert length_range(128, 0.25, "vllm") == (96, 160)
    lens = sample_lengths(random.Random(0), 100, 0.25, 3000, "vllm")
    assert min(lens) == 75 and max(lens) == 125
    assert length_range(100, 0.1, "vllm") == (90, 111)  # as vLLM: ceil(100 * 1.1) is 111 in floats
    assert set(sample_lengths(random.Random(0), 128, 0.0, 200, "vllm")) == {128}


def test_flags_from_vllm_switches_defaults_and_meaning():
    cfg, dcfg = _parse("--flags-from", "vllm")
    assert (dcfg.convention, dcfg.random_output_len, dcfg.seed, cfg.seed) == ("vllm", 128, 0, 0)
    assert convention_note(dcfg) is None
    cfg, dcfg = _parse()
    assert (dcfg.convention, dcfg.random_output_len, dcfg.seed) == ("sglang", 1024, 1)
    note = convention_note(dcfg)
    assert "[1, 1024]" in note and "mean 512.5" in note and "--flags-from vllm" in note
    prompts = build_prompts(DatasetConfig(num_prompts=50, random_input_len=8, random_output_len=40,
                                          convention="vllm"))
    assert {p.output_len for p in prompts} == {40}


def test_vllm_flag_names_reach_the_config():
    cfg, dcfg = _parse("--host", "127.0.0.1", "--port", "8100", "--endpoint", "/v1/chat/completions",
                       "--backend", "vllm-chat", "--served-model-name", "served", "--model", "tok",
                       "--temperature", "0", "--top-k", "5", "--logprobs", "2", "--goodput", "ttft:500",
                       "e2el:2000", "--random-prefix-len", "4", "--request-id-prefix", "bench-")
    assert cfg.base_url == "http://127.0.0.1:8100" and cfg.endpoint == "/v1/chat/completions"
    assert cfg.backend == "openai-chat" and cfg.model == "served"
    assert cfg.sampling == {"temperature": 0.0, "top_k": 5, "logprobs": True, "top_logprobs": 2}
    assert (cfg.slo.ttft_ms, cfg.slo.tpot_ms, cfg.slo.e2e_ms) == (500.0, None, 2000.0)
    assert dcfg.random_prefix_len == 4 and cfg.request_id_prefix == "bench-"
    assert _parse("--backend", "vllm", "--logprobs", "3")[0].sampling == {"logprobs": 3}


def test_random_prefix_is_shared(tmp_path):
    ids = build_prompts(DatasetConfig(name="random-ids", num_prompts=3, random_input_len=5,
                                      random_prefix_len=4, convention="vllm", vocab_size=100))
    assert all(p.prompt[:4] == ids[0].prompt[:4] and p.input_len == 9 for p in ids)


def _custom_file(tmp_path, rows) -> str:
    path = tmp_path / "custom.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_custom_dataset_keeps_order_text_and_lengths(tmp_path):
    rows = [{"prompt": f"question {i} ~)~.", "output_tokens": 10 + i} for i in range(6)]
    path = _custom_file(tmp_path, rows)
    kept = build_prompts(DatasetConfig(name="custom", dataset_path=path, num_prompts=6, disable_shuffle=True))
    assert [p.prompt for p in kept] == [r["prompt"] for r in rows]
    assert [p.output_len for p in kept] == [10, 11, 12, 13, 14, 15]
    fixed = build_prompts(DatasetConfig(name="custom", dataset_path=path, num_prompts=4, custom_output_len=7))
    assert {p.output_len for p in fixed} == {7} and len(fixed) == 4
    assert sorted(p.prompt for p in build_prompts(DatasetConfig(name="custom", dataset_path=path,
                                                                num_prompts=6))) == sorted(r["prompt"] for r in rows)
    with pytest.raises(ValueError, match="output_tokens"):
        build_prompts(DatasetConfig(name="custom", dataset_path=_custom_file(tmp_path, [{"prompt": "x"}])))


def test_burstgpt_uses_gpt4_rows_with_responses(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "1,ChatGPT,500,20,520,Conversation log\n2,GPT-4,12,30,42,Conversation log\n"
                    "3,GPT-4,40,0,40,Conversation log\n4,GPT-4,25,5,30,API log\n")
    prompts = build_prompts(DatasetConfig(name="burstgpt", dataset_path=str(path), num_prompts=2))
    assert sorted((p.input_len, p.output_len) for p in prompts) == [(12, 30), (25, 5)]


def _tiny_tokenizer_dir(tmp_path, with_template: bool = True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    words = "the model server token request stream chat user hello world".split()
    corpus = [" ".join(random.Random(i).choice(words) for _ in range(12)) for i in range(300)]
    tok.train_from_iterator(corpus, trainer=trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>", "<|user|>", "<|assistant|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}}
    if with_template:
        config["chat_template"] = ("{{ bos_token }}{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
                                   "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_tokenizer_directory_and_its_chat_template(tmp_path):
    from loadgen.plan.lengths import FileTokenizer

    tok = FileTokenizer(str(_tiny_tokenizer_dir(tmp_path)))
    text = "hello world model"
    assert tok.num_special_tokens == 1
    assert tok.chat_len(text) == len(tok.encode(text)) + 3  # <s>, <|user|>, <|assistant|>
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        FileTokenizer(str(empty))


def test_run_with_a_tokenizer_directory_counts_the_template(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "1")
    out = tmp_path / "r.json"
    (tmp_path / "tok").mkdir()
    tok_dir = _tiny_tokenizer_dir(tmp_path / "tok")
    rc = main(["--base-url", server.base_url, "--concurrency", "2", "--num-prompts", "4", "--quiet",
               "--tokenizer", str(tok_dir), "--flags-from", "vllm", "--random-input-len", "12",
               "--random-output-len", "3", "--output", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0 and data["completed"] == 4
    assert "chat template" in data["dataset"]["input_lengths"]
    from loadgen.plan.lengths import FileTokenizer

    tok = FileTokenizer(str(tok_dir))
    prompts = build_prompts(DatasetConfig(num_prompts=4, random_input_len=12, random_output_len=3, seed=0,
                                          convention="vllm", tokenizer_path=str(tok_dir)))
    # about 11 tokens of text each (12 minus the BOS the tokenizer adds, as vLLM counts), rendered by hand
    assert all(p.input_len == len(tok.encode(p.prompt)) for p in prompts)
    rendered = ["<s><|user|>" + p.prompt + "<|assistant|>" for p in prompts]
    assert data["total_input_tokens_dataset"] == sum(len(tok.encode(r)) for r in rendered)
    # each of the 4 responses is the scripted server's 3 tokens " tok", re-tokenised without specials
    from tokenizers import Tokenizer

    per_response = len(Tokenizer.from_file(str(tok_dir / "tokenizer.json")).encode(
        " tok" * 3, add_special_tokens=False).ids)
    assert data["total_output_tokens"] == 4 * 3
    assert data["total_output_tokens_retokenized"] == 4 * per_response


def test_request_body_headers_and_saved_results(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "1")
    rc = main(["--base-url", server.base_url, "--concurrency", "1", "--num-prompts", "3", "--quiet",
               "--flags-from", "vllm", "--random-input-len", "8", "--random-output-len", "4",
               "--temperature", "0.5", "--top-p", "0.9", "--request-id-prefix", "lg-", "--continuous-usage",
               "--save-result", "--result-dir", str(tmp_path / "res"), "--result-filename", "r.json",
               "--label", "mine", "--metadata", "gpu=none", "--save-detailed"])
    assert rc == 0
    last = httpx.get(server.base_url + "/last_request").json()
    assert last["headers"]["x-request-id"].startswith("lg-")
    body = last["body"]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.5, 0.9, 4)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    saved = json.loads((tmp_path / "res" / "r.json").read_text())
    assert saved["label"] == "mine" and saved["gpu"] == "none"
    assert saved["total_token_throughput"] == saved["total_throughput"]
    assert saved["mean_e2el_ms"] == saved["mean_e2e_latency_ms"]
    assert len(saved["ttfts"]) == len(saved["itls"]) == len(saved["input_lens"]) == 3
    # vLLM's token events (--flags-from vllm): the role chunk, 4 tokens and the finish chunk: 5 gaps
    assert saved["output_lens"] == [4, 4, 4] and all(len(itl) == 5 for itl in saved["itls"])
    main(["--base-url", server.base_url, "--concurrency", "1", "--num-prompts", "1", "--quiet",
          "--result-dir", str(tmp_path / "res"), "--result-filename", "r.json", "--append-result"])
    docs = (tmp_path / "res" / "r.json").read_text().split("\n")
    assert len(docs) == 2 and all(json.loads(d)["completed"] >= 1 for d in docs)


def test_https_verified_insecure_and_refused(start_server, certificate, tmp_path):
    cert, key = certificate
    server = start_server("--ttft-ms", "5", "--gap-ms", "1", "--certfile", cert, "--keyfile", key)
    url = f"https://127.0.0.1:{server.port}"
    base = ["--base-url", url, "--concurrency", "2", "--num-prompts", "4", "--quiet",
            "--random-input-len", "8", "--random-output-len", "3", "--random-range-ratio", "1"]
    for extra, stamps in ((["--ca-cert", cert], "kernel"), (["--insecure"], "kernel"),
                          (["--insecure", "--transport", "httpx"], "loop")):
        out = tmp_path / f"r{len(extra)}.json"
        assert main([*base, *extra, "--output", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["completed"] == 4 and data["dataset"]["input_lengths"] == "server /tokenize"
        # NOTE: the lean transport runs TLS on its own socket, so https keeps the kernel's stamps.
        assert data["summary"]["client_health"]["stamp_source"] == stamps, extra
    out = tmp_path / "refused.json"
    assert main([*base, "--model", "scripted-model", "--no-server-tokenize", "--output", str(out)]) == 4
    errors = json.loads(out.read_text())["summary"]["errors"]
    assert list(errors) == ["connection"] and "CERTIFICATE_VERIFY_FAILED" in errors["connection"]["example"]


def test_ramp_up_opens_streams_over_the_ramp(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5")
    out = tmp_path / "r.json"
    assert main(["--base-url", server.base_url, "--concurrency", "8", "--ramp-up", "0.7", "--duration", "2.5",
                 "--quiet", "--random-input-len", "8", "--random-output-len", "20", "--random-range-ratio", "1",
                 "--output", str(out)]) == 0
    worker = json.loads(out.read_text())["summary"]["client_health"]["workers"][0]
    # the eighth stream may not start before 7/8 of the ramp; the burst ends a grace second later
    assert worker["startup_burst_s"] >= 0.7 * 7 / 8 + 1.0
    rate = tmp_path / "rate.json"
    assert main(["--base-url", server.base_url, "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "20",
                 "--ramp-up-end-rps", "60", "--num-prompts", "6", "--quiet", "--random-input-len", "8",
                 "--random-output-len", "2", "--output", str(rate)]) == 0
    assert json.loads(rate.read_text())["completed"] == 6
