"""The flags: the run's and the sweep's argument tables and the step from parsed flags to the frozen
configs (defaults read from the config dataclasses). Only loadgen/api.py and loadgen/cli.py use it.
"""

from __future__ import annotations

import argparse
import math

from loadgen import argtypes as at
from loadgen.plan.config import (
    BACKEND_ALIASES,
    CONVENTIONS,
    DATASETS,
    IMAGE_FORMATS,
    RAY_STRATEGIES,
    SERVER_METRICS_INTERVAL_RANGE_S,
    SLO,
    STAMP_SOURCES,
    TOKEN_EVENT_RULES,
    TRACE_DATASETS,
    TRANSPORTS,
    DatasetConfig,
    RayConfig,
    RunConfig,
    auto_workers,
)
from loadgen.plan.datasets import upstream_prompts
from loadgen.plan.texts import length_range
from loadgen.sweep.driver import EXIT_STOPPED

_RC, _DC = RunConfig(concurrency=1, num_prompts=1), DatasetConfig()
# Defaults that differ between the two upstream tools (--flags-from picks the set).
CONVENTION_DEFAULTS = {"sglang": {"random_output_len": 1024, "seed": 1},
                       "vllm": {"random_output_len": 128, "seed": 0}}
SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                  "repetition_penalty")


MIN_DEFAULT_RESPONSE_BYTES = 4 << 20
USAGE_EPILOG = """\
subcommands:
  loadgen compare A.json B.json ...   print saved runs side by side, with ratios (loadgen's --output
                                      files, vllm bench serve --save-result, SGLang --output-file),
                                      and bootstrap intervals of the differences (runs with --records)
  loadgen report A.json ... --output report.html
                                      one self-contained HTML page of saved runs, with plots
  loadgen sweep --concurrency 1,8,64 [--repeats N] [--slo ...] [run flags]
                                      full runs at each value, an SLO search, early stop

exit codes: 0 done; 1 the run could not start (server unreachable, dataset unreadable);
2 bad flags; 3 client-bound under --strict; 4 failed requests above --max-error-rate
(default: only when every request failed); 5 a worker process died (its requests are missing);
130 interrupted (results still written, unless Ctrl-C came before the load started)."""


TOOL_CHOICES = ("auto", "required", "none")


def build_parser() -> argparse.ArgumentParser:
    """The run parser (flag names follow SGLang's bench_serving where it has one)."""
    p = argparse.ArgumentParser(
        prog="loadgen", usage="%(prog)s [run flags]\n       %(prog)s compare A.json B.json ...\n"
        "       %(prog)s report A.json ... --output report.html\n"
        "       %(prog)s sweep (--concurrency LIST | --request-rate LIST) [sweep flags] [run flags]",
        description="Load generator for OpenAI-compatible servers.", epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    pos_int, nonneg_int = at.int_at_least(1), at.int_at_least(0)
    _add_config_flag(p)
    a("--base-url", type=at.weighted(at.base_url), action="append", default=None, metavar="URL[=W]",
      help=f"server root (default {_RC.base_url}); repeatable: requests go round-robin over the URLs, "
      "in proportion to their weights W")
    a("--model", type=at.weighted(str), action="append", default=None, metavar="NAME[=W]",
      help="model name (default: the first one /v1/models lists); repeatable: a seeded mix in "
      "proportion to the weights W (LoRA adapter names are models)")
    a("--backend", choices=sorted(BACKEND_ALIASES), default=_RC.backend,
      help="openai-chat, openai-completions, openai-embeddings (/v1/embeddings, not streamed) or "
      "openai-responses (/v1/responses, streamed); vLLM's and SGLang's names for the first two are accepted")
    a("--no-stream", action="store_true", help="ask for whole responses instead of SSE streams")
    a("--concurrency", "--max-concurrency", type=pos_int, default=None, help="requests in flight at most")
    a("--request-rate", type=at.positive_float(allow_inf=True), default=math.inf,
      help="open-loop arrival rate (req/s)")
    a("--burstiness", type=at.positive_float(allow_inf=True), default=_RC.burstiness,
      help="gamma shape: 1 Poisson, inf constant")
    a("--num-prompts", type=pos_int, default=None,
      help="number of measured requests; alone (no --concurrency, --request-rate inf) all are sent at once")
    a("--duration", type=at.positive_float(), default=None, help="seconds of sending new requests")
    a("--warmup", type=nonneg_int, default=0, help="requests sent first and left out of the statistics")
    a("--workers", type=at.workers, default="auto", help="worker processes: auto or a number")
    a("--timeout", type=at.positive_float(), default=_RC.timeout_s, help="seconds per request, end to end")
    a("--transport", choices=TRANSPORTS, default=_RC.transport, help="httpx transport behind the client")
    a("--stamps", choices=STAMP_SOURCES, default=_RC.stamps,
      help="event times from the kernel's receive stamps (default, lean transport on Linux) or the "
           "event loop's clock (loop); the results say which was used (stamp_source)")
    a("--max-response-bytes", type=pos_int, default=None,
      help="cut a response past this many bytes while reading it (error too_large; default 64 MiB, "
      "lowered so that the streams at once fit in half the memory available, to 4 MiB at least). "
      "Memory is bounded by --concurrency x this (plus the header cap): each stream in flight may "
      "hold that much; loadgen warns at start when the product passes the memory available "
      "(--request-rate without --concurrency bounds nothing)")
    a("--max-response-header-bytes", type=pos_int, default=_RC.max_response_header_bytes,
      help="cut a response whose head (1xx heads included) passes this many bytes (error bad_response)")
    a("--max-error-rate", type=at.fraction, default=None,
      help="exit 4 when the failed fraction passes this (default: only when all failed)")
    a("--ignore-eos", action="store_true", help="send ignore_eos: true (always with --flags-from vllm --dataset random)")
    a("--min-tokens", action="store_true", help="send min_tokens equal to the output length")
    a("--no-usage", action="store_true", help="do not ask for stream_options.include_usage")
    a("--extra-request-body", type=at.json_object, default={}, help="JSON object merged into every request body")
    # issue 32: reasoning and tool calls
    a("--tools", type=at.tools_file, default=None, metavar="FILE",
      help="JSON list of OpenAI tool definitions sent as every chat request's `tools` (the server "
      "then streams tool_calls deltas, timed apart: README \"Reasoning and tool calls\")")
    a("--tool-choice", choices=TOOL_CHOICES, default=None,
      help="the chat request's tool_choice (with --tools; default: the server's, usually auto)")
    a("--header", type=at.header, action="append", default=[], help="'Name: value', repeatable")
    a("--dataset", "--dataset-name", dest="dataset", choices=DATASETS, default=_DC.name)
    a("--dataset-path", type=at.existing_file, default=None,
      help="the dataset's file: ShareGPT JSON (sharegpt, multi-turn), JSONL (custom, mooncake), CSV (burstgpt)")
    a("--random-input-len", type=pos_int, default=_DC.random_input_len)
    a("--random-output-len", type=pos_int, default=None, help="default 1024 (sglang) or 128 (vllm)")
    a("--random-range-ratio", type=at.fraction, default=_DC.random_range_ratio,
      help="sglang: lengths in [max(int(L*r),1), L]; vllm: in [floor(L*(1-r)), ceil(L*(1+r))]")
    a("--sharegpt-output-len", type=pos_int, default=None)
    a("--shared-prefix-groups", type=pos_int, default=_DC.shared_prefix_groups)
    a("--shared-prefix-len", type=pos_int, default=_DC.shared_prefix_len)
    a("--tokenizer", type=at.existing_path, default=None,
      help="tokenizer.json, or a model directory holding one (and tokenizer_config.json)")
    a("--vocab-size", type=pos_int, default=None, metavar="N",
      help="--dataset random-ids: draw ids from [0, N) (default: the --tokenizer file's vocabulary, "
      "else the size the server's /detokenize accepts)")
    a("--no-server-tokenize", action="store_true",
      help="without --tokenizer, estimate prompt lengths instead of calibrating them via /tokenize")
    a("--seed", type=nonneg_int, default=None, help="default 1 (sglang) or 0 (vllm)")
    a("--percentiles", "--metric-percentiles", type=at.percentiles, default=_RC.percentiles,
      help="e.g. 50,90,99 (--metric-percentiles: vLLM's name)")
    a("--slo", type=at.slo, default=SLO(), help="goodput bounds in ms: ttft=...,tpot=...,e2e=...")
    a("--output", type=at.writable_path, default=None, help="results JSON path")
    a("--records", type=at.writable_path, default=None, help="per-request JSONL path")
    a("--csv", type=at.writable_path, default=None, metavar="PATH", help="per-request CSV path (one row per request)")
    a("--strict", action="store_true", help="exit 3 when the run was client-bound")
    a("--quiet", action="store_true", help="no live display and no table")
    a("--ramp-up", type=at.nonneg_float, default=0.0,
      help="concurrency mode: open the streams evenly over this many seconds")
    a("--continuous-usage", action="store_true",
      help="ask for usage in every chunk (stream_options.continuous_usage_stats; vLLM, SGLang)")
    a("--no-server-metrics", action="store_true",
      help="do not scrape the server's Prometheus /metrics during the run")
    a("--server-metrics-interval", type=at.float_between(*SERVER_METRICS_INTERVAL_RANGE_S),
      default=_RC.server_metrics_interval_s, help="seconds between scrapes, 0.05 to 3600 (default 1)")
    # issue 32: server metrics from any server (several targets, every series up to a cap)
    a("--server-metrics-url", type=at.base_url, action="append", default=[],
      help="a Prometheus target to scrape (default: BASE_URL/metrics); repeatable, e.g. the server's "
      "and a dcgm-exporter's (GPU utilisation, memory, power, energy per output token)")
    a("--server-metrics-max-series", type=at.int_at_least(1), default=_RC.server_metrics_max_series,
      help=f"series kept per target, the rest counted (default {_RC.server_metrics_max_series:,})")
    a("--itl-sketch", action="store_true",
      help="ITL percentiles from a log histogram within 1%% (mean and max stay exact); automatic past "
      "20M ITL samples, where the exact lists would hold about 1.3 GiB")
    a("--timeline-interval", type=at.positive_float(), default=_RC.timeline_interval_s,
      help="width of the timeline's intervals in seconds (default 1)")
    _add_workload_flags(p)
    _add_api_flags(p)
    _add_plan_knob_flags(p)
    _add_run_side_flags(p)
    _add_ray_flags(p)
    _add_compat_flags(p)
    return p


def _add_config_flag(p: argparse.ArgumentParser) -> None:
    """`--config FILE`: read by loadgen/api.py before the parse; here for --help, and to refuse it
    abbreviated (argparse would take --conf for it)."""
    p.add_argument("--config", type=_unabbreviated_config, default=None, metavar="FILE",
                   help="YAML or JSON file of options, keys the long flag names (base-url: ...); flags "
                   "given here override it. A results JSON replays its run (its `flags`)")


def _unabbreviated_config(text: str) -> str:
    raise argparse.ArgumentTypeError("spell --config out in full")


def _add_workload_flags(p: argparse.ArgumentParser) -> None:
    """Trace replay (mooncake, burstgpt) and multi-turn sessions (see loadgen/README.md, "Workloads")."""
    g = p.add_argument_group("trace replay and multi-turn sessions")
    a = g.add_argument
    a("--trace-speedup", "--fixed-schedule-speedup", type=at.positive_float(), default=_RC.trace_speedup,
      help="replay: send at the trace's times divided by this (2: twice as fast)")
    a("--block-size", "--mooncake-block-size", type=at.int_at_least(1), default=_DC.block_size,
      help="mooncake: tokens per hash id (default 512, as the Mooncake traces)")
    a("--multi-turn-num-turns", "--multi-turn-turns", type=at.int_at_least(1), default=None,
      help="multi-turn: turns per session (default 3; with --dataset-path: at most this many human turns)")
    a("--multi-turn-user-len", type=at.int_at_least(1), default=_DC.multi_turn_user_len,
      help="multi-turn: tokens per synthetic user turn")
    a("--multi-turn-max-context-bytes", type=at.int_at_least(1), default=_DC.multi_turn_max_context_bytes,
      metavar="N", help="multi-turn: a session ends before a turn whose conversation (user turns and "
      "answers, UTF-8) would pass N bytes, recorded as failed (context_too_large; default 8 MiB)")
    think = g.add_mutually_exclusive_group()
    think.add_argument("--multi-turn-think-time", type=at.nonneg_float, default=None, metavar="S",
                       help="multi-turn: seconds between a turn's answer and the next turn (default 0)")
    think.add_argument("--multi-turn-delay-ms", type=at.nonneg_float, default=None, metavar="MS",
                       help="the same in milliseconds (vLLM's name)")


# issue 32: APIs (embeddings batch, synthetic images; names from vLLM bench and AIPerf)
def _add_api_flags(p: argparse.ArgumentParser) -> None:
    """Embeddings inputs per request and synthetic images per chat request (loadgen/README.md, "Workloads")."""
    g = p.add_argument_group("embeddings and images")
    a = g.add_argument
    a("--random-batch-size", "--batch-size-text", dest="embedding_batch_size", type=at.int_at_least(1),
      default=_RC.embedding_batch_size, metavar="N",
      help="openai-embeddings: inputs per request (vLLM's name; AIPerf's --batch-size-text)")
    a("--image-batch-size", "--batch-size-image", type=at.int_at_least(0), default=_RC.image_batch_size,
      metavar="N", help="openai-chat: synthetic images per request, as image_url data URLs (AIPerf's name)")
    a("--image-width-mean", type=at.int_at_least(1), default=_RC.image_width, metavar="PX",
      help="synthetic images' width in pixels (every image has this size; default 512)")
    a("--image-height-mean", type=at.int_at_least(1), default=_RC.image_height, metavar="PX",
      help="synthetic images' height in pixels (default 512)")
    a("--image-format", choices=IMAGE_FORMATS, default=_RC.image_format,
      help="synthetic images' encoding, via Pillow (default png)")


# issue 32: plan-side knobs (prefix-cache hit rate, cache bust, rate stages; loadgen/README.md, "Workloads").
def _add_plan_knob_flags(p: argparse.ArgumentParser) -> None:
    """The prefix-cache hit-rate control, the cache-bust tag and the piecewise rate series."""
    g = p.add_argument_group("prefix cache and rate stages")
    a = g.add_argument
    a("--prefix-cache-hit-rate", type=at.fraction, default=_DC.prefix_cache_hit_rate, metavar="F",
      help="--dataset random: each prompt's first round(F x its length) tokens come from one seeded "
      "text, so that share of its tokens is a prefix of earlier prompts (the planned hit rate is "
      "reported; --warmup 1 fills the cache first)")
    a("--cache-bust", nargs="?", const="", default=None, metavar="SALT",
      help="a 16-token tag before every prompt (each prompt's own; the run's one with a shared prefix), "
      "from SALT (default: a fresh one per run, recorded in the results), so no prefix-cache hits "
      "reach across runs")
    a("--request-rate-stages", "--request-rate-series", type=at.rate_stages, default=(), metavar="R:S,...",
      help="piecewise request rate: R req/s for S seconds, stage after stage (e.g. 10:30,50:60,20:30); "
      "replaces --request-rate and --duration; the achieved rate per stage is reported")


# issue 32: run-side knobs (cancellation, several URLs, model mix, prefill-concurrency cap)
def _add_run_side_flags(p: argparse.ArgumentParser) -> None:
    """Cancellation and the prefill-concurrency cap (see loadgen/README.md, "Workloads")."""
    a = p.add_argument_group("cancellation and prefill cap").add_argument
    a("--request-cancellation-rate", type=at.nonneg_float, default=_RC.request_cancellation_rate,
      metavar="PCT", help="percent of requests the client cancels (closes the connection), chosen by "
      "--seed; counted `cancelled`, not failed (AIPerf's name)")
    a("--request-cancellation-delay", type=at.nonneg_float, default=_RC.request_cancellation_delay_s,
      metavar="S", help="seconds after its send began that a request chosen for cancellation is "
      "cancelled if still unfinished (default 0)")
    a("--prefill-concurrency", type=at.int_at_least(1), default=None, metavar="N",
      help="at most N requests in flight before their first token; the rest wait to be sent, split "
      "over the workers (AIPerf's name)")


def _add_ray_flags(p: argparse.ArgumentParser) -> None:
    """Workers as Ray actors across a cluster's hosts (`pip install 'serving-hotpaths[ray]'`)."""
    g = p.add_argument_group("Ray cluster (workers on several hosts)")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="run the workers as Ray actors: auto (a running cluster), local (start one "
                   "here), ray://HOST:PORT (Ray Client) or a GCS HOST:PORT; --workers is then the total "
                   "(default: one per CPU of every alive node)")
    g.add_argument("--ray-strategy", choices=RAY_STRATEGIES, default=RayConfig.strategy,
                   help="placement of the workers over the nodes (default SPREAD)")


def ray_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> RayConfig | None:
    """The RayConfig for --ray-address (usage error when ray is not installed); None without it."""
    if args.ray_address is None:
        if args.ray_strategy != RayConfig.strategy:
            parser.error("--ray-strategy needs --ray-address")
        return None
    try:
        import ray  # noqa: F401 - only to say early and clearly that it is missing
    except ImportError as exc:
        parser.error(f"--ray-address needs ray ({exc}): pip install 'serving-hotpaths[ray]'")
    try:
        return RayConfig(address=args.ray_address, strategy=args.ray_strategy,
                         is_auto_workers=args.workers == "auto")
    except ValueError as exc:
        parser.error(str(exc))


def _add_compat_flags(p: argparse.ArgumentParser) -> None:
    """vLLM `bench serve` flags, with vLLM's names and meanings (see loadgen/README.md)."""
    g = p.add_argument_group("vLLM / SGLang compatibility")
    a = g.add_argument
    a("--flags-from", choices=CONVENTIONS, default=None,
      help="whose meaning --random-range-ratio and the length/seed defaults follow (default sglang), "
      "and, when given, whose token-event rule applies (see --token-events)")
    a("--token-events", choices=TOKEN_EVENT_RULES, default=None,
      help="which SSE events are token events (TTFT, ITL): loadgen's rule (every event with a text "
      "field, empty text too, but no role or finish announcement), or vllm bench serve's (every event "
      "with choices) or SGLang bench_serving's (non-empty text only); default: the --flags-from "
      "tool's when --flags-from is given, else loadgen")
    a("--host", default=None, help="with --port: the base URL http://HOST:PORT (vLLM)")
    a("--port", type=at.int_at_least(1), default=None)
    a("--endpoint", type=at.endpoint, default=None, help="request path (default from --backend)")
    a("--served-model-name", default=None, help="the model name sent in requests (default --model)")
    for name in SAMPLING_FLAGS:
        kind = at.int_at_least(-1) if name == "top_k" else at.finite_float
        a("--" + name.replace("_", "-"), type=kind, default=None, help="sent only when given")
    a("--logprobs", type=at.int_at_least(0), default=None, help="ask for N logprobs per token")
    a("--goodput", type=at.goodput_item, nargs="+", default=None, metavar="KEY:MS",
      help="vLLM's goodput bounds: ttft:MS tpot:MS e2el:MS (same as --slo)")
    a("--percentile-metrics", type=at.percentile_metrics, default=None, metavar="LIST",
      help="vLLM's: the metrics that get percentiles (ttft,tpot,itl,e2el); loadgen gives them all the "
      "--percentiles (--metric-percentiles)")
    a("--random-prefix-len", type=at.int_at_least(0), default=0, help="a fixed random prefix of N tokens on every prompt")
    a("--custom-output-len", type=at.custom_output_len, default=256,
      help="custom dataset output length; -1: each line's output_tokens")
    a("--skip-chat-template", action="store_true", help="accepted for vLLM: loadgen always sends prompts unchanged")
    a("--disable-shuffle", action="store_true", help="custom dataset: keep the file's order")
    a("--request-id-prefix", default=None, help="send x-request-id: PREFIX<index> with each request")
    a("--no-server-timing", action="store_true",
      help="do not send x-server-timing: 1 (asks the reference server for its per-request timing)")
    a("--ready-check-timeout-sec", type=at.int_at_least(0), default=0,
      help="wait up to this long for /v1/models to answer before the run (0: no wait)")
    a("--ramp-up-strategy", choices=("linear", "exponential"), default=None,
      help="rate mode: the request rate ramps from --ramp-up-start-rps to --ramp-up-end-rps")
    a("--ramp-up-start-rps", type=at.positive_float(), default=None)
    a("--ramp-up-end-rps", type=at.positive_float(), default=None)
    a("--insecure", action="store_true", help="https: do not verify the server's certificate")
    a("--ca-cert", type=at.existing_file, default=None, help="https: CA bundle to verify the server with")
    a("--save-result", action="store_true", help="write the results JSON into --result-dir")
    a("--result-dir", default=None)
    a("--result-filename", default=None)
    a("--append-result", action="store_true", help="append to the results file (one JSON per line)")
    a("--save-detailed", action="store_true", help="results JSON gets per-request ttfts, itls, lengths, errors")
    a("--metadata", type=at.key_value, nargs="+", default=[], metavar="KEY=VALUE", help="added to the results JSON")
    a("--label", default=None, help="the run's name in the results JSON and file name")


def config_from_args(args: argparse.Namespace) -> tuple[RunConfig, DatasetConfig]:
    """The frozen configs from parsed flags (ValueError on an incompatible combination)."""
    stages = args.request_rate_stages
    replay = (args.dataset in TRACE_DATASETS and math.isinf(args.request_rate)
              and args.ramp_up_strategy is None and not stages)
    num_prompts = args.num_prompts
    if num_prompts is None and args.duration is None and not replay and not stages:
        num_prompts = 1000
    streams = args.concurrency
    if streams is None and math.isinf(args.request_rate) and args.ramp_up_strategy is None and not replay \
            and not stages:
        streams = num_prompts  # NOTE: all --num-prompts streams open at once
    workers = auto_workers(streams) if args.workers == "auto" else args.workers
    max_response_bytes = args.max_response_bytes or default_max_response_bytes(streams, available_memory_bytes())
    _check_workload_flags(args)
    convention = args.flags_from or "sglang"
    defaults = CONVENTION_DEFAULTS[convention]
    seed = defaults["seed"] if args.seed is None else args.seed
    backend = BACKEND_ALIASES[args.backend]
    cfg = RunConfig(
        base_url=_base_url(args), model=args.served_model_name or _first(args.model), backend=backend,
        stream=not args.no_stream and backend != "openai-embeddings", concurrency=args.concurrency,
        request_rate=args.request_rate,
        burstiness=args.burstiness, num_prompts=num_prompts, duration_s=args.duration,
        warmup=args.warmup, workers=workers, timeout_s=args.timeout, ignore_eos=_ignore_eos(args),
        min_tokens=args.min_tokens, include_usage=not args.no_usage,
        extra_body=_with_tools(args), headers=dict(args.header), transport=args.transport,
        stamps=args.stamps,
        max_response_bytes=max_response_bytes,
        max_response_header_bytes=args.max_response_header_bytes, max_error_rate=args.max_error_rate,
        seed=seed, percentiles=args.percentiles, slo=at.run_slo(args.slo, args.goodput),
        strict=args.strict, endpoint_path=args.endpoint, sampling=_sampling(args, backend),
        request_id_prefix=args.request_id_prefix, server_timing=not args.no_server_timing, insecure=args.insecure, ca_cert=args.ca_cert,
        ramp_up_s=args.ramp_up, ramp_up_strategy=args.ramp_up_strategy, ramp_up_start_rps=args.ramp_up_start_rps,
        ramp_up_end_rps=args.ramp_up_end_rps, continuous_usage=args.continuous_usage,
        server_metrics=not args.no_server_metrics, server_metrics_urls=tuple(args.server_metrics_url),
        server_metrics_max_series=args.server_metrics_max_series,
        server_metrics_interval_s=args.server_metrics_interval, timeline_interval_s=args.timeline_interval,
        replay_trace=replay, trace_speedup=args.trace_speedup,
        itl_sketch=args.itl_sketch, token_event_rule=args.token_events or args.flags_from or "loadgen",
        embedding_batch_size=args.embedding_batch_size, image_batch_size=args.image_batch_size,
        image_width=args.image_width_mean, image_height=args.image_height_mean, image_format=args.image_format,
        rate_stages=stages,
        request_cancellation_rate=args.request_cancellation_rate,
        request_cancellation_delay_s=args.request_cancellation_delay, prefill_concurrency=args.prefill_concurrency,
        base_urls=_mix(args.base_url), models=() if args.served_model_name else _mix(args.model),
    )
    dcfg = DatasetConfig(
        name=args.dataset, num_prompts=None if replay else num_prompts or 1,
        random_input_len=args.random_input_len,
        random_output_len=args.random_output_len or defaults["random_output_len"],
        random_range_ratio=args.random_range_ratio, dataset_path=args.dataset_path,
        sharegpt_output_len=args.sharegpt_output_len, shared_prefix_groups=args.shared_prefix_groups,
        shared_prefix_len=args.shared_prefix_len, tokenizer_path=args.tokenizer, vocab_size=args.vocab_size,
        use_server_tokenize=not args.no_server_tokenize, seed=seed, convention=convention,
        random_prefix_len=args.random_prefix_len,
        custom_output_len=None if args.custom_output_len == -1 else args.custom_output_len,
        disable_shuffle=args.disable_shuffle, block_size=args.block_size, trace_timestamps=replay,
        multi_turn_num_turns=args.multi_turn_num_turns, multi_turn_user_len=args.multi_turn_user_len,
        multi_turn_think_time_s=_think_time_s(args), multi_turn_max_context_bytes=args.multi_turn_max_context_bytes,
        prefix_cache_hit_rate=args.prefix_cache_hit_rate, cache_bust=args.cache_bust,
    )
    if args.vocab_size is not None and (dcfg.name != "random-ids" or args.tokenizer is not None):
        raise ValueError("--vocab-size applies to --dataset random-ids without --tokenizer (the tokenizer "
                         "file gives the vocabulary)")
    if dcfg.name == "random-ids" and upstream_prompts(dcfg) is None and backend != "openai-completions":
        raise ValueError("--dataset random-ids sends token ids: it needs --backend openai-completions "
                         "(or --tokenizer with --flags-from sglang: SGLang's random-ids, sent as text)")
    return cfg, dcfg


def _ignore_eos(args: argparse.Namespace) -> bool:
    # NOTE: vllm bench serve (0.32.0) always sends ignore_eos with its random dataset.
    return args.ignore_eos or (args.flags_from == "vllm" and args.dataset == "random")


def _think_time_s(args: argparse.Namespace) -> float:
    if args.multi_turn_delay_ms is not None:
        return args.multi_turn_delay_ms / 1e3
    return args.multi_turn_think_time or 0.0


def _check_workload_flags(args: argparse.Namespace) -> None:
    """Combinations the trace and session modes cannot run (ValueError: a usage error)."""
    if args.dataset == "multi-turn" and args.duration is not None:
        raise ValueError("--dataset multi-turn counts sessions: give --num-prompts, not --duration")
    if args.dataset == "multi-turn" and args.request_rate_stages and args.num_prompts is None:
        raise ValueError("--dataset multi-turn with --request-rate-stages: give --num-prompts (sessions)")
    if args.trace_speedup != RunConfig.trace_speedup and args.dataset not in TRACE_DATASETS:
        raise ValueError("--trace-speedup applies to --dataset mooncake or burstgpt")
    if args.dataset == "multi-turn" and BACKEND_ALIASES[args.backend] not in ("openai-chat", "openai-completions"):
        raise ValueError("--dataset multi-turn needs --backend openai-chat or openai-completions")
    if args.embedding_batch_size > 1 and args.dataset in TRACE_DATASETS:
        raise ValueError("--random-batch-size > 1 groups prompts: it does not apply to a replayed trace")
    if args.image_batch_size:
        try:
            import PIL  # noqa: F401 - only to say early and clearly that it is missing
        except ImportError as exc:
            raise ValueError(f"--image-batch-size needs Pillow ({exc}): pip install 'serving-hotpaths[vision]'") from None


def _first(pairs: list[tuple[str, float]] | None) -> str | None:
    return pairs[0][0] if pairs else None


def _mix(pairs: list[tuple[str, float]] | None) -> tuple[tuple[str, float], ...]:
    """Several --base-url or --model values with their weights; () for one (the plain case)."""
    return tuple(pairs) if pairs and len(pairs) > 1 else ()


def _base_url(args: argparse.Namespace) -> str:
    if args.base_url is not None:
        if args.host is not None or args.port is not None:
            raise ValueError("give --base-url or --host/--port, not both")
        return args.base_url[0][0]
    if args.host is None and args.port is None:
        return RunConfig.base_url
    return at.base_url(f"http://{args.host or '127.0.0.1'}:{args.port or 8000}")


def _with_tools(args: argparse.Namespace) -> dict:
    """--extra-request-body with --tools and --tool-choice under it (its own keys win, as with the
    sampling flags); ValueError for --tool-choice without --tools or --tools without chat."""
    if args.tools is None:
        if args.tool_choice is not None:
            raise ValueError("--tool-choice needs --tools")
        return args.extra_request_body
    if BACKEND_ALIASES[args.backend] != "openai-chat":
        raise ValueError("--tools needs the chat backend (openai-chat)")
    tools = {"tools": args.tools} | ({"tool_choice": args.tool_choice} if args.tool_choice else {})
    return tools | args.extra_request_body


def _sampling(args: argparse.Namespace, backend: str) -> dict:
    body = {k: getattr(args, k) for k in SAMPLING_FLAGS if getattr(args, k) is not None}
    if args.logprobs is not None:
        body.update({"logprobs": True, "top_logprobs": args.logprobs} if backend == "openai-chat"
                    else {"logprobs": args.logprobs})
    return body


def convention_note(dcfg: DatasetConfig) -> str | None:
    """A warning when SGLang's meaning of --random-range-ratio shortens random lengths."""
    if dcfg.convention != "sglang" or dcfg.name not in ("random", "random-ids") or dcfg.random_range_ratio >= 1:
        return None
    low, high = length_range(dcfg.random_output_len, dcfg.random_range_ratio)
    return (f"loadgen: --random-range-ratio {dcfg.random_range_ratio:g} follows SGLang's meaning: output lengths "
            f"uniform in [{low}, {high}] (mean {(low + high) / 2:g}); for vLLM's (exactly "
            f"{dcfg.random_output_len} at 0) pass --flags-from vllm")


def prompts_note(dcfg: DatasetConfig) -> str | None:
    """A warning when --flags-from vllm cannot rebuild vLLM's random prompts (no tokenizer file)."""
    if dcfg.convention != "vllm" or dcfg.name != "random" or upstream_prompts(dcfg) is not None:
        return None
    return ("loadgen: the random prompts are loadgen's own, not vllm bench serve's: vLLM's are rebuilt "
            "from the model's tokenizer file (pass --tokenizer)")


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_max_response_bytes(streams: int | None, available: int | None) -> int:
    """The per-response cap when --max-response-bytes is not given: 64 MiB, lowered so that
    `streams` responses at that cap fit in half the memory available, but not under 4 MiB (a
    floor for long streams; memory_note warns where even that does not fit)."""
    if streams is None or available is None:
        return RunConfig.max_response_bytes
    return max(MIN_DEFAULT_RESPONSE_BYTES, min(RunConfig.max_response_bytes, available // 2 // streams))


def memory_note(cfg: RunConfig, dcfg: DatasetConfig, available: int | None) -> str | None:
    """A warning when the streams in flight could hold more than the memory available (a multi-turn
    session also holds its conversation twice: the history and the request carrying it)."""
    per_stream = cfg.max_response_bytes + cfg.max_response_header_bytes
    session = dcfg.name == "multi-turn"
    if session:
        per_stream += 2 * dcfg.multi_turn_max_context_bytes
    if cfg.concurrency is None:
        return None  # NOTE: rate mode alone does not bound the requests in flight (said in --help)
    bound = cfg.concurrency * per_stream
    if available is None or bound <= available:
        return None
    context = " + 2 x --multi-turn-max-context-bytes" if session else ""
    return (f"loadgen: warning: --concurrency {cfg.concurrency} x --max-response-bytes "
            f"{cfg.max_response_bytes} (+ headers{context}) = {bound / 2**30:,.1f} GiB may be held at once, "
            f"more than the {available / 2**30:,.1f} GiB available; a server sending endless bodies could "
            f"exhaust memory (lower --max-response-bytes{' or the context bound' if session else ''})")


def images_note(cfg: RunConfig, available: int | None) -> str | None:
    """issue 32: a warning when the request bodies' images, all built before the run, could hold more
    than half the memory available (random pixels barely compress; base64 adds a third)."""
    if not cfg.image_batch_size or available is None:
        return None
    if cfg.num_prompts is not None:
        num = cfg.num_prompts
    elif cfg.is_rate_mode and math.isfinite(cfg.request_rate):
        num = math.ceil(cfg.request_rate * (cfg.duration_s or 0))
    else:
        num = max(cfg.concurrency or 1, 64)  # NOTE: --duration repeats this many bodies (runner._num_items)
    bound = (num + cfg.warmup) * cfg.image_batch_size * cfg.image_width * cfg.image_height * 4
    if bound <= available // 2:
        return None
    return (f"loadgen: warning: {num + cfg.warmup:,} request bodies with {cfg.image_batch_size} "
            f"{cfg.image_width}x{cfg.image_height} image(s) each may hold up to {bound / 2**30:,.1f} GiB, "
            f"built before the run; {available / 2**30:,.1f} GiB is available (fewer or smaller images, "
            "or --num-prompts)")


SWEEP_UNSUPPORTED = ("records", "csv", "save_result", "result_dir", "result_filename", "append_result",
                     "save_detailed", "strict")


def build_sweep_parser() -> argparse.ArgumentParser:
    """The sweep's own flags; every other flag is a run flag (`loadgen --help`)."""
    p = argparse.ArgumentParser(
        prog="loadgen sweep", allow_abbrev=False,
        usage="%(prog)s (--concurrency LIST | --request-rate LIST) [sweep flags] [run flags]",
        description="Full runs at each listed concurrency or request rate, repeated; stops early on "
        "over-saturation; with --slo, bisects for the highest value meeting it. Every other flag is a "
        "run flag, as in `loadgen --help`; --output writes the sweep JSON.",
        epilog="exit codes: 0 done; 1 the first run could not start (nothing measured, no JSON); 2 bad "
        f"flags; {EXIT_STOPPED} stopped before its end: a run could not start, failed past --max-error-rate "
        "(default: every request failed) or lost a worker (the finished points are written; the JSON's "
        "`stopped` says where and why); 130 interrupted (the finished points are written).")
    a = p.add_argument
    _add_config_flag(p)
    a("--concurrency", "--max-concurrency", type=at.value_list(int), default=None, metavar="LIST",
      help="concurrencies to run, e.g. 1,8,64")
    a("--request-rate", type=at.value_list(float), default=None, metavar="LIST",
      help="request rates (req/s) to run, e.g. 1,2,4")
    a("--repeats", type=at.int_at_least(1), default=1, help="full runs per point (mean and, from 3 repeats, a 95%% t-interval; 2: min-max)")
    a("--slo-percentile", type=at.percentiles, default=(99.0,), metavar="P",
      help="the percentile the --slo bounds apply to (default 99)")
    a("--search-steps", type=at.int_at_least(0), default=8, help="at most this many bisection points")
    a("--rate-tolerance", type=at.fraction, default=0.05,
      help="--request-rate search: stop when (failing - passing) / passing <= this")
    a("--no-early-stop", action="store_true", help="run every listed point, even past over-saturation")
    a("--prompts-per-level", type=at.positive_float(), default=None, metavar="K",
      help="each point sends max(--num-prompts, K x its value) requests")
    return p
