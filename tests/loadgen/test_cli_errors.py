"""Bad flags are usage errors (exit 2, no traceback); failed runs exit non-zero; setup errors are one
line; output paths are checked before the run; a failed run's client health is not judged."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.cli import main

POS_INT = ("--concurrency", "--num-prompts", "--random-input-len", "--random-output-len",
           "--sharegpt-output-len", "--shared-prefix-groups", "--shared-prefix-len",
           "--max-response-bytes", "--workers")
BAD_FLAGS = [
    *[[flag, value] for flag in POS_INT for value in ("0", "-1", "abc", "1.5")],
    *[[flag, value] for flag in ("--warmup", "--seed") for value in ("-1", "abc")],
    *[[flag, value] for flag in ("--duration", "--timeout") for value in ("0", "-1", "abc", "nan", "inf")],
    *[[flag, value] for flag in ("--request-rate", "--burstiness") for value in ("0", "-1", "abc", "nan")],
    *[[flag, value] for flag in ("--random-range-ratio", "--max-error-rate")
      for value in ("-0.1", "1.5", "abc", "nan")],
    *[["--base-url", url] for url in ("notaurl", "ftp://host:1", "http://", "http://h:99999")],
    *[["--percentiles", v] for v in ("abc", "0", "101", "50,,90")],
    *[["--slo", v] for v in ("ttft", "foo=1", "ttft=abc", "ttft=-1")],
    ["--header", "novalue"], ["--header", ": x"],
    ["--extra-request-body", "{bad"], ["--extra-request-body", "[1]"],
    ["--backend", "grpc"], ["--transport", "h3"], ["--dataset", "nope"],
    ["--dataset-path", "/nonexistent/sg.json"], ["--tokenizer", "/nonexistent/tokenizer.json"],
    ["--output", "/nonexistent/dir/r.json"], ["--records", "/nonexistent/dir/r.jsonl"], ["--output", "/tmp"],
    ["--dataset", "sharegpt"],
    ["--dataset", "random-ids"],
    ["--vocab-size", "100"], ["--dataset", "random-ids", "--backend", "openai-completions", "--vocab-size", "0"],
    ["--dataset", "random-ids", "--backend", "openai-completions", "--vocab-size", "100", "--tokenizer",
     str(Path(__file__).parents[2] / "reference_impl/tokenizer/embedded")],
    ["--flags-from", "tgi"], ["--endpoint", "v1/chat"], ["--backend", "sglang"], ["--host", "127.0.0.1"],
    *[["--goodput", v] for v in ("ttft", "foo:1", "ttft:-1", "e2e:5")],
    ["--slo", "ttft=1,ttft=2"], ["--slo", "tpot=5,e2e=9,tpot=5"], ["--goodput", "ttft:1", "ttft:2"],
    ["--goodput", "e2el:1", "tpot:3", "e2el:1"], ["--slo", "ttft=1", "--goodput", "tpot:1"],
    ["--metadata", "novalue"], ["--custom-output-len", "0"], ["--custom-output-len", "-2"],
    ["--flags-from", "vllm", "--random-range-ratio", "1.0"], ["--ca-cert", "/nonexistent/ca.pem"],
    ["--temperature", "inf"], ["--top-k", "-2"], ["--logprobs", "-1"], ["--dataset", "custom"],
    ["--dataset", "burstgpt"], ["--random-prefix-len", "-1"], ["--port", "0"],
    ["--ramp-up", "-1"], ["--ramp-up-strategy", "cubic"], ["--ramp-up-strategy", "linear"],
    ["--ramp-up-start-rps", "1"], ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
                                   "--ramp-up-end-rps", "5", "--request-rate", "3"],
    ["--ray-strategy", "PACK"], ["--ray-address", "local", "--ray-strategy", "ROUND"],
]


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _base(url: str) -> list[str]:
    return ["--base-url", url, "--model", "m", "--concurrency", "2", "--num-prompts", "4",
            "--random-input-len", "4", "--random-output-len", "4", "--no-server-tokenize", "--quiet"]


@pytest.mark.parametrize("bad", BAD_FLAGS, ids=lambda b: " ".join(b))
def test_every_bad_flag_is_a_usage_error(bad, capsys):
    # NOTE: the base run is valid (it would reach a dead port and exit 4), so only the bad flag
    # can make argparse exit 2.
    with pytest.raises(SystemExit) as exc:
        main([*_base(_dead_url()), *bad])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "usage:" in err and "error:" in err, err


def test_duration_without_concurrency_or_rate_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--base-url", _dead_url(), "--model", "m", "--duration", "2", "--quiet"])
    assert exc.value.code == 2 and "--concurrency" in capsys.readouterr().err


def test_num_prompts_alone_sends_every_request_at_once_as_vllm_at_rate_inf(start_server, tmp_path):
    server = start_server("--ttft-ms", "1500", "--gap-ms", "1", "--num-tokens", "4")
    out, records = tmp_path / "r.json", tmp_path / "r.jsonl"
    assert main(["--base-url", server.base_url, "--num-prompts", "4", "--random-input-len", "4",
                 "--random-output-len", "4", "--quiet", "--output", str(out), "--records", str(records)]) == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 4 and all(row["ok"] for row in rows), rows
    # NOTE: all four are scheduled for the same instant (rate inf), whatever the machine's speed.
    assert len({row["intended_ms"] for row in rows}) == 1, rows
    config = json.loads(out.read_text())["config"]
    assert config["concurrency"] is None and config["request_rate"] in ("inf", "Infinity", None), config


@pytest.mark.parametrize("flags, percentiles", [(["--metric-percentiles", "25,50,75"], [25.0, 50.0, 75.0]),
                                                (["--percentile-metrics", "ttft,itl,e2el"], None)])
def test_vllms_percentile_flags_are_accepted(flags, percentiles):
    from loadgen.flags import build_parser, config_from_args

    args = build_parser().parse_args([*_base(_dead_url()), *flags])
    cfg, _ = config_from_args(args)
    assert percentiles is None or list(cfg.percentiles) == percentiles


def test_percentile_metrics_loadgen_does_not_measure_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([*_base(_dead_url()), "--percentile-metrics", "ttft,client_queue_time"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "'client_queue_time' not among ttft, tpot, itl, e2el" in err, err


def test_sweep_is_in_the_usage_line(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "loadgen sweep (--concurrency LIST | --request-rate LIST)" in capsys.readouterr().out


def test_all_failed_run_exits_4_and_is_not_judged_client_bound(capsys):
    rc = main([*_base(_dead_url())][:-1])
    out = capsys.readouterr()
    assert rc == 4
    assert "4 of 4 requests failed" in out.err
    assert "not judged" in out.out and "YES" not in out.out


def test_max_error_rate_sets_the_threshold(start_server):
    server = start_server("--ttft-ms", "1", "--gap-ms", "1", "--num-tokens", "4", "--faults", "ok,http_500")
    base = [*_base(server.base_url)]
    assert main(base) == 0  # half failed: below the default "all failed"
    assert main([*base, "--max-error-rate", "0.6"]) == 0
    assert main([*base, "--max-error-rate", "0.25"]) == 4


def test_dead_port_without_model_prints_one_line():
    url = _dead_url()
    proc = subprocess.run([sys.executable, "-m", "loadgen", "--base-url", url, "--concurrency", "1",
                           "--num-prompts", "1", "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot list models" in lines[0] and "--model" in lines[0], proc.stderr


def test_output_to_a_missing_folder_fails_before_any_request(start_server, tmp_path, capsys):
    server = start_server("--ttft-ms", "1", "--gap-ms", "1")
    with pytest.raises(SystemExit) as exc:
        main([*_base(server.base_url), "--output", str(tmp_path / "missing" / "r.json")])
    assert exc.value.code == 2 and "does not exist" in capsys.readouterr().err
    assert server.stats()["num_requests"] == 0


def test_help_mentions_compare_and_compare_reports_unreadable_files(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "loadgen compare A.json B.json" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_compare_names_the_file_and_refuses_a_json_array(tmp_path, capsys):
    broken, array = tmp_path / "broken.json", tmp_path / "array.json"
    broken.write_text("")
    array.write_text("[1, 2]")
    assert main(["compare", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "broken.json" in err and "Expecting value" in err, err
    assert main(["compare", str(array)]) == 2
    err = capsys.readouterr().err
    assert "array.json" in err and "not a loadgen results file" in err and "Traceback" not in err, err


def test_memory_bound_is_in_help_and_checked_at_start(start_server, capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--concurrency x this" in " ".join(capsys.readouterr().out.split())
    server = start_server("--ttft-ms", "1", "--gap-ms", "1")
    assert main([*_base(server.base_url), "--max-response-bytes", str(1 << 60)]) == 0
    err = capsys.readouterr().err
    assert "--concurrency 2 x --max-response-bytes" in err and "GiB available" in err, err
    assert main(_base(server.base_url)) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("streams, available, cap", [(2048, 100 << 30, 25 << 20), (2048, 4 << 30, 4 << 20),
                                                      (2, 100 << 30, 64 << 20), (None, 1 << 30, 64 << 20),
                                                      (2048, None, 64 << 20)])
def test_the_default_response_cap_is_sized_to_the_streams_and_memory(streams, available, cap):
    from loadgen.flags import default_max_response_bytes

    assert default_max_response_bytes(streams, available) == cap


def test_a_2048_stream_run_with_default_caps_does_not_warn_about_memory():
    from loadgen.flags import available_memory_bytes, build_parser, config_from_args, memory_note

    available = available_memory_bytes()
    if available is None or available < 2048 * (5 << 20):
        pytest.skip("needs /proc/meminfo and 10 GiB available: 2048 streams at the 4 MiB floor")
    cfg, dcfg = config_from_args(build_parser().parse_args(["--concurrency", "2048", "--num-prompts", "1"]))
    assert cfg.max_response_bytes <= max(4 << 20, available // 2 // 2048)
    assert memory_note(cfg, dcfg, available) is None
    explicit = build_parser().parse_args(["--concurrency", "2048", "--num-prompts", "1",
                                          "--max-response-bytes", str(64 << 20)])
    assert "GiB may be held" in memory_note(*config_from_args(explicit), 2048 * (32 << 20))


def test_a_reset_tls_handshake_says_why():
    import struct
    import threading

    from loadgen.plan.config import RunConfig
    from loadgen.plan.datasets import DatasetConfig
    from loadgen.run.runner import run

    listener = socket.create_server(("127.0.0.1", 0))

    def reset_each() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # the test closed the listener
            conn.recv(100)  # the ClientHello
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # RST

    threading.Thread(target=reset_each, daemon=True).start()
    cfg = RunConfig(base_url=f"https://127.0.0.1:{listener.getsockname()[1]}", model="m", concurrency=1,
                    num_prompts=2, insecure=True, timeout_s=30.0)
    try:
        errors = run(cfg, DatasetConfig(random_input_len=4, random_output_len=4,
                                        use_server_tokenize=False)).summary["errors"]
    finally:
        listener.close()
    assert errors["connection"]["count"] == 2
    example = errors["connection"]["example"]
    assert example.startswith("ConnectError: ") and len(example) > len("ConnectError: ") + 5, example


def test_ray_address_without_ray_installed_is_a_usage_error(tmp_path):
    # a `ray` package that cannot be imported stands in for ray not being installed
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-m", "loadgen", *_base(_dead_url()), "--ray-address", "local"],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert "--ray-address needs ray" in proc.stderr and "serving-hotpaths[ray]" in proc.stderr
