"""Server configuration: one frozen dataclass, validated once; argparse only at the edge.

Every hot path (H1-H6, registered in ``reference_impl.hot_paths``) is a field here whose value
picks its legacy or optimized form once at start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_impl.hot_paths import HOT_PATHS, all_legacy_flags

ENGINES = ("sim", "torch")
SIM_TIMES = ("real", "virtual")
DEVICES = ("auto", "cuda", "cpu")
DTYPES = ("auto", "bfloat16", "float16", "float32")
DISAGGREGATION_MODES = ("null", "decode")
ATTENTION_BACKENDS = ("auto", "triton", "torch_native")
IPC_RECV_MODES = ("yield", "no-yield")
SIM_CONTEXT_LENGTH = 131072
API_KEY_ENV = "VLLM_API_KEY"  # as vLLM: the key without a command line that `ps` shows
MAX_API_KEY_FILE_BYTES = 4096
EMBEDDED_MODEL_CONTEXT_LENGTH = 8192


@dataclass(frozen=True)
class ServerArgs:
    """Everything the three server processes need to know, validated in ``__post_init__``."""

    # HTTP
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = field(default=None, repr=False)
    served_model_name: str | None = None
    log_level: str = "warning"
    timeout_keep_alive: float = 60.0
    timeout_request_read: float = 30.0
    timeout_response_write: float = 10.0
    max_queued_output_bytes: int = 64 * 2**20
    limit_concurrency: int | None = None
    health_check_timeout: float = 5.0
    ipc_recv: str = "yield"
    # Request limits (400 past them; 413 for the body)
    max_request_body_bytes: int = 16 * 2**20
    max_request_header_bytes: int = 64 * 2**10
    max_prompts_per_request: int = 64
    max_request_prompt_tokens: int = 2**20
    max_stop_strings: int = 16
    max_stop_str_len: int = 1024
    max_stop_token_ids: int = 256
    max_content_parts: int = 8192
    # Model, tokenizer and engine
    engine: str = "sim"
    tokenizer_path: str | None = None
    context_length: int | None = None
    sim_profile: str = "h100-llama-8b"
    sim_time: str = "real"
    sim_seed: int = 0
    model_path: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    mem_fraction_static: float | None = None
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int = 512
    attention_backend: str = "auto"
    chunked_prefill_size: int = 8192
    # Scheduler
    max_running_requests: int = 4096
    max_prefill_tokens: int = 16384
    max_total_tokens: int | None = None
    max_n: int = 16
    stream_interval: int = 1
    prefill_max_requests: int | None = None
    # Data parallelism (sim engine only): N lockstep scheduler ranks behind a round-robin router.
    dp_size: int = 1
    enable_dp_attention: bool = False
    # PD disaggregation: "decode" models a decode node whose requests' KV comes from a prefill node
    disaggregation_mode: str = "null"
    disaggregation_transfer_ms: float = 6.0
    disaggregation_transfer_per_token_us: float = 42.0
    # H1: batched wake-ups
    wakeup: str = "batched"
    batch_notify_size: int = 16
    # H2: SSE chunk encoding
    sse_encoder: str = "msgspec"
    # H3: non-incremental streaming outputs
    stream_output: str = "reference"
    incremental_streaming_output: bool = False
    # H4: token id storage
    token_storage: str = "array"
    # H5: prefill delayer
    enable_prefill_delayer: bool = False
    prefill_delayer_max_delay_passes: int = 30
    prefill_delayer_token_usage_low_watermark: float | None = None
    prefill_delayer_queue_min_ratio: float | None = None
    prefill_delayer_max_delay_ms: float | None = None
    # H6: stream delta tracking
    stream_delta: str = "offset"
    # Internal: where the processes' IPC sockets live (set by the launcher).
    ipc_dir: str = field(default="", metadata={"cli": False})

    def __post_init__(self) -> None:
        _check_choice("engine", self.engine, ENGINES)
        if self.model_path is not None and not (Path(self.model_path) / "config.json").is_file():
            raise ValueError(f"model_path {self.model_path!r} holds no config.json")
        if self.tokenizer_path is None and self.model_path is not None:
            if (Path(self.model_path) / "tokenizer.json").is_file():
                object.__setattr__(self, "tokenizer_path", self.model_path)
        if self.served_model_name is None:
            object.__setattr__(self, "served_model_name", self._default_model_name())
        if self.context_length is None:
            object.__setattr__(self, "context_length", self._default_context_length())
        _check_choice("sim_time", self.sim_time, SIM_TIMES)
        _check_choice("device", self.device, DEVICES)
        _check_choice("dtype", self.dtype, DTYPES)
        self._check_disaggregation()
        _check_choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        _check_choice("ipc_recv", self.ipc_recv, IPC_RECV_MODES)
        for hp in HOT_PATHS.values():
            hp.form_of(getattr(self, hp.field))
        _check_positive("port", self.port, allow_zero=True)
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty")
        for name in ("context_length", "max_running_requests", "max_prefill_tokens", "max_n",
                     "stream_interval", "prefill_delayer_max_delay_passes", "cuda_graph_max_bs",
                     "chunked_prefill_size",
                     "timeout_keep_alive", "timeout_request_read", "timeout_response_write",
                     "health_check_timeout",
                     "max_request_body_bytes", "max_request_header_bytes", "max_prompts_per_request",
                     "max_request_prompt_tokens", "max_stop_strings", "max_stop_str_len",
                     "max_stop_token_ids", "max_content_parts", "max_queued_output_bytes"):
            _check_positive(name, getattr(self, name))
        _check_positive("batch_notify_size", self.batch_notify_size, allow_zero=True)
        if self.limit_concurrency is not None:
            _check_positive("limit_concurrency", self.limit_concurrency)
        if self.max_total_tokens is not None:
            _check_positive("max_total_tokens", self.max_total_tokens)
        if self.prefill_max_requests is not None:
            _check_positive("prefill_max_requests", self.prefill_max_requests)
        self._check_data_parallel()
        fraction = self.mem_fraction_static
        if fraction is not None and not (0 < fraction < 1):
            raise ValueError(f"mem_fraction_static must be in (0, 1), got {fraction}")
        ratio = self.prefill_delayer_queue_min_ratio
        if ratio is not None and not (0 < ratio <= 1):
            raise ValueError(f"prefill_delayer_queue_min_ratio must be in (0, 1], got {ratio}")
        watermark = self.prefill_delayer_token_usage_low_watermark
        if watermark is not None and not (0 <= watermark <= 1):
            raise ValueError(f"prefill_delayer_token_usage_low_watermark must be in [0, 1], got {watermark}")

    def _check_data_parallel(self) -> None:
        _check_positive("dp_size", self.dp_size)
        if self.dp_size > 1 and not self.enable_dp_attention:
            raise ValueError("dp_size > 1 is modelled only with --enable-dp-attention")
        if self.enable_dp_attention and self.engine != "sim":
            raise ValueError("--enable-dp-attention needs the sim engine")

    def _check_disaggregation(self) -> None:
        _check_choice("disaggregation_mode", self.disaggregation_mode, DISAGGREGATION_MODES)
        for name in ("disaggregation_transfer_ms", "disaggregation_transfer_per_token_us"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.disaggregation_mode == "decode":
            if self.engine != "sim":
                raise ValueError("disaggregation_mode 'decode' needs the sim engine (no KV to receive)")
            if self.enable_prefill_delayer:
                raise ValueError("a decode node runs no prefill: drop enable_prefill_delayer")
            if self.dp_size > 1:
                raise ValueError("a decode node with --dp-size > 1 is not modelled")

    def _default_model_name(self) -> str:
        if self.model_path is not None:
            return Path(self.model_path).resolve().name
        return f"reference-{self.engine}"

    def _default_context_length(self) -> int:
        if self.engine == "sim":
            return SIM_CONTEXT_LENGTH
        if self.model_path is None:
            return EMBEDDED_MODEL_CONTEXT_LENGTH
        config = json.loads((Path(self.model_path) / "config.json").read_text())
        return int(config.get("max_position_embeddings", 4096))

    @property
    def max_running_requests_per_rank(self) -> int:
        """Each DP-attention rank's share of ``max_running_requests`` (rounded up)."""
        return -(-self.max_running_requests // self.dp_size)

    @property
    def effective_max_delay_ms(self) -> float:
        """Wall-clock cap on a queue-triggered delay (upstream default 5 s)."""
        return 5000.0 if self.prefill_delayer_max_delay_ms is None else self.prefill_delayer_max_delay_ms

    def hot_path_forms(self) -> dict[str, str]:
        """``{"H1": "optimized", ...}``: which form each hot path runs in (a variant by its name)."""
        forms = {}
        for hp in HOT_PATHS.values():
            form = hp.form_of(getattr(self, hp.field))
            forms[hp.id] = {hp.legacy: "legacy", hp.optimized: "optimized"}.get(form, form)
        if not self.enable_prefill_delayer:
            forms["H5"] = "off (no --enable-prefill-delayer)"
        return forms

    def all_legacy(self) -> ServerArgs:
        """A copy with every hot path in its legacy form."""
        return dataclasses.replace(self, **{hp.field: hp.value(hp.legacy) for hp in HOT_PATHS.values()})


def _check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_positive(name: str, value: int, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


_HELP = {
    "host": "Address to bind (loopback unless told otherwise).",
    "port": "HTTP port.",
    "served_model_name": "Model name reported by /v1/models and accepted in requests "
                         "(default: the model directory's name, else reference-<engine>).",
    "log_level": "Logging level of every process.",
    "timeout_keep_alive": "Seconds an idle keep-alive connection stays open between requests (uvicorn).",
    "timeout_request_read": "Seconds a connection has to send a whole request (from connecting, or "
                            "from a request's first byte); one that sends nothing or half a request "
                            "is closed then.",
    "timeout_response_write": "Seconds a response's write buffer may stay full (a client that "
                              "stopped reading) before the connection is closed; a stream ends "
                              "as a 499.",
    "max_queued_output_bytes": "Bytes of outputs one stream may leave untaken (its client not "
                               "reading) before it ends as a 499; a reader that keeps up takes "
                               "its outputs at every wake-up (estimated; the legacy H3 'copy' "
                               "form holds a copy of all ids and text per output).",
    "api_key": "Require 'Authorization: Bearer API_KEY' on every /v1/* request (401 otherwise), as "
               "vLLM; /health, /metrics, /tokenize and /detokenize stay open. A command line is "
               f"visible to every user in `ps`: prefer --api-key-file or ${API_KEY_ENV} (the flags "
               "win over the variable).",
    "limit_concurrency": "Connections plus tasks past which uvicorn answers 503 (default: no limit).",
    "health_check_timeout": "Seconds /health and /metrics wait for the scheduler's stats; /health "
                            "answers 503 when it does not answer in time.",
    "ipc_recv": "How the HTTP process receives engine steps from the detokenizer, as upstream's "
                "two IPC regimes: 'yield' (upstream's default pickle IPC, SGLANG_USE_PICKLE_IPC "
                "on: pyzmq's recv_pyobj resolves through a chained future, so the event loop gets "
                "a turn per message and woken streams run once per step) or 'no-yield' "
                "(SGLANG_USE_PICKLE_IPC=0: msgpack over recv, which does not yield while a "
                "backlog lasts, so immediate wake-ups find several steps queued and send them "
                "as one chunk; disconnects are seen only once the backlog is gone).",
    "max_request_body_bytes": "Largest request body in bytes (413 past it, checked before parsing).",
    "max_request_header_bytes": "Largest request head (request line plus headers) in bytes; "
                                "431 past it (uvicorn's h11 default).",
    "max_content_parts": "Most chat messages plus content parts in one chat or /tokenize "
                         "request (counted before validation).",
    "max_prompts_per_request": "Most prompts in one completions request (a batch).",
    "max_request_prompt_tokens": "Most prompt tokens one request may send to the scheduler: the sum "
                                 "of every prompt's length times n.",
    "max_stop_strings": "Most stop strings per request.",
    "max_stop_str_len": "Longest stop string, in characters.",
    "max_stop_token_ids": "Most stop_token_ids per request (each sub-request checks every new "
                          "token against them).",
    "engine": "Model engine: 'sim' (seeded tokens, step times from a latency model) or 'torch' "
              "(a Llama-family model in torch; the embedded default without --model-path).",
    "tokenizer_path": "Local tokenizer.json or directory holding one; default: --model-path when "
                      "it holds a tokenizer.json, else the embedded byte-level tokenizer.",
    "context_length": "Maximum prompt + output tokens per request (default: 131072 for sim, the "
                      "model's max_position_embeddings for torch).",
    "sim_profile": "Latency profile of the sim engine (see reference_impl.engine.sim.PROFILES).",
    "sim_time": "Sim engine clock: 'real' sleeps for each step, 'virtual' advances a virtual clock.",
    "sim_seed": "Seed of the sim engine's token streams.",
    "model_path": "[torch] Local HF model directory (config.json + *.safetensors); default: an "
                  "embedded small Llama with seeded random weights over the byte-level tokenizer.",
    "device": "[torch] 'auto' (CUDA when available), 'cuda' or 'cpu'.",
    "dtype": "[torch] Weights and KV cache dtype; 'auto': bfloat16 on CUDA, float32 on the CPU.",
    "mem_fraction_static": "[torch] Fraction of device memory (GPU; host RAM on the CPU) for weights "
                           "plus KV cache, sizing the KV pool when --max-total-tokens is unset "
                           "(default 0.85 on CUDA; 131072 tokens on the CPU).",
    "disable_cuda_graph": "[torch] Run decode eagerly instead of replaying CUDA graphs.",
    "cuda_graph_max_bs": "[torch] Largest decode batch replayed from a CUDA graph (graphs for "
                         "1, 2, 4, 8, then every 16 up to it, captured at start-up).",
    "attention_backend": "[torch] Paged attention: 'triton' kernels, 'torch_native' SDPA, or "
                         "'auto' (triton on CUDA when importable, else torch_native).",
    "chunked_prefill_size": "[torch] Most tokens in one forward; longer prompts prefill in "
                            "chunks of this size.",
    "max_running_requests": "Maximum requests in the running batch.",
    "max_prefill_tokens": "Maximum prompt tokens admitted in one prefill step.",
    "max_total_tokens": "KV-cache budget in tokens (default: what the engine reports); the torch "
                        "engine's KV pool size.",
    "max_n": "Largest accepted 'n' (choices per request).",
    "stream_interval": "Send streaming outputs every N decode steps.",
    "prefill_max_requests": "Maximum requests admitted in one prefill step (default: no limit); "
                            "also caps the H5 queue trigger's threshold.",
    "dp_size": "[sim] Data-parallel scheduler ranks, stepping in lockstep in one scheduler "
               "process behind a round-robin router (needs --enable-dp-attention).",
    "enable_dp_attention": "[sim] DP attention: an extend on any rank makes every rank run an "
                           "eager step; the prefill delayer negotiates over all ranks.",
    "disaggregation_mode": "PD disaggregation role: 'null' (aggregated) or 'decode' (a decode node: "
                           "each request's KV and first token arrive from a modelled prefill node "
                           "after a delay; no prefill compute here).",
    "disaggregation_transfer_ms": "[decode] Fixed part of the modelled delay from KV preallocation "
                                  "to the KV landing (the prefill node's step plus the handshake).",
    "disaggregation_transfer_per_token_us": "[decode] Per-prompt-token part of that delay (the "
                                            "prefill node's compute plus the RDMA copy).",
    "batch_notify_size": "[H1] Requests per wake-up group in the batched form (0 or 1: every request).",
    "incremental_streaming_output": "Queue only new ids/text per output instead of the cumulative ones.",
    "enable_prefill_delayer": "[H5] Consult the prefill delayer before each prefill.",
    "prefill_delayer_max_delay_passes": "[H5] Passes a mixed-rank delay may last before 'wait_timeout'.",
    "prefill_delayer_token_usage_low_watermark": "[H5] KV usage below which prefill is always allowed.",
    "prefill_delayer_max_delay_ms": "[H5] Wall-clock cap of a queue-triggered delay (default 5000).",
}


def build_parser(prog: str = "python -m reference_impl") -> argparse.ArgumentParser:
    """An argparse parser whose flags and defaults come from ``ServerArgs``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Reference OpenAI-compatible serving stack carrying hot paths H1-H6 "
                    "in legacy and optimized forms (defaults: optimized).",
    )
    for f in dataclasses.fields(ServerArgs):
        if not f.metadata.get("cli", True):
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", help=_HELP.get(f.name))
            continue
        kwargs: dict[str, Any] = {"default": f.default, "help": _HELP.get(f.name), "type": _parse_type(f.type)}
        hp = next((h for h in HOT_PATHS.values() if h.field == f.name), None)
        if hp is not None:
            kwargs["help"] = hp.cli_help
            if hp.id != "H5":  # H5's flag takes a ratio; unset is its legacy form
                kwargs["choices"] = hp.choices
        elif f.name == "engine":
            kwargs["choices"] = ENGINES
        elif f.name == "sim_time":
            kwargs["choices"] = SIM_TIMES
        elif f.name == "device":
            kwargs["choices"] = DEVICES
        elif f.name == "dtype":
            kwargs["choices"] = DTYPES
        elif f.name == "disaggregation_mode":
            kwargs["choices"] = DISAGGREGATION_MODES
        elif f.name == "attention_backend":
            kwargs["choices"] = ATTENTION_BACKENDS
        elif f.name == "ipc_recv":
            kwargs["choices"] = IPC_RECV_MODES
        parser.add_argument(flag, **kwargs)
    parser.add_argument("--api-key-file", type=read_api_key_file, metavar="PATH",
                        help="Read --api-key from this file: a regular file of one line (surrounding "
                             f"whitespace stripped), at most {MAX_API_KEY_FILE_BYTES} bytes.")
    parser.add_argument("--all-legacy", action="store_true",
                        help="Select the legacy form of every hot path (H1-H6) at once: "
                             + " ".join(all_legacy_flags()) + ".")
    return parser


def read_api_key_file(path: str) -> str:
    """The API key in ``path`` (argparse type): a regular, readable file of one line, at most
    ``MAX_API_KEY_FILE_BYTES``; a FIFO, a device or a folder is refused before it is opened."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise argparse.ArgumentTypeError(f"{path!r} is not a regular file")
        if info.st_size > MAX_API_KEY_FILE_BYTES:
            raise argparse.ArgumentTypeError(f"{path!r} holds {info.st_size} bytes, more than "
                                             f"{MAX_API_KEY_FILE_BYTES} (one line with the key)")
        with open(path, "rb") as f:
            key = f.read(MAX_API_KEY_FILE_BYTES + 1).decode().strip()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise argparse.ArgumentTypeError(f"{path!r} is not UTF-8 text") from None
    if not key or len(key) > MAX_API_KEY_FILE_BYTES or any(c in key for c in "\r\n\0"):
        raise argparse.ArgumentTypeError(f"{path!r} must hold one line with the key (it is empty "
                                         "or holds several lines)")
    return key


def _parse_type(type_name: Any):
    text = str(type_name)
    if "float" in text:
        return float
    if "int" in text:
        return int
    return str


def from_cli(argv: list[str] | None = None) -> ServerArgs:
    """Parse command-line flags into a validated ``ServerArgs``."""
    parser = build_parser()
    ns = vars(parser.parse_args(argv))
    all_legacy = ns.pop("all_legacy")
    key_from_file = ns.pop("api_key_file")
    if key_from_file is not None and ns["api_key"] is not None:
        parser.error("give --api-key or --api-key-file, not both")
    ns["api_key"] = ns["api_key"] or key_from_file
    if ns["api_key"] is None and os.environ.get(API_KEY_ENV):
        ns["api_key"] = os.environ[API_KEY_ENV]
        print(f"reference_impl: /v1/* requires the API key in ${API_KEY_ENV}", file=sys.stderr, flush=True)
    try:
        args = ServerArgs(**ns)
    except ValueError as exc:
        parser.error(str(exc))
    return args.all_legacy() if all_legacy else args

