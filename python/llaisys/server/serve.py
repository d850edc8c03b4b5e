"""`llaisys serve`: bind, load the models in the background, serve until SIGTERM/SIGINT,
then drain.

If loading fails the process exits 1. Shutdown: /health and new requests answer 503 at once; requests in flight get up to
--drain-timeout seconds to finish; the rest are aborted (a stream ends with an error event
and [DONE]); the engines stop and the process exits 0. A second signal skips the drain.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from ..cli_args import THREADS_HELP, add_quant_arguments, add_ray_arguments
from .openai.reasoning import PARSERS as REASONING_PARSERS

log = logging.getLogger("llaisys.server")


def add_serve_parser(sub):
    """Adds the `serve` subcommand's arguments and returns its parser (llaisys.cli sets its handler, which
    runs run_serve here or, with --ray, llaisys.ray.cli.run_serve_ray)."""
    p = sub.add_parser("serve", help="run the OpenAI-compatible server and the web page",
                       description="Serve models over an OpenAI-compatible HTTP API (and the chat page at /). "
                                   "With no model, the default model is downloaded (first run) and served.")
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="model directory, .gguf file or known name (served under its base name, a GGUF without "
                        ".gguf); NAME_OR_PATH=SERVED_NAME renames it")
    p.add_argument("--model", action="append", default=[], metavar="NAME_OR_PATH[=SERVED_NAME]",
                   help="a model to serve (repeatable; the first is the default for requests without 'model')")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 exposes the server)")
    p.add_argument("--port", type=int, default=8000, help="port to bind (0: any free port, printed)")
    e = p.add_argument_group("engine")
    e.add_argument("--device", default="cpu", choices=["cpu", "nvidia"], help="where the model runs")
    e.add_argument("--device-id", type=int, default=0,
                   help="which GPU with --device nvidia (default: %(default)s; the CPU is device 0 only)")
    e.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    e.add_argument("--dtype", default=None, choices=["bf16", "f16", "f32"], help="weight dtype (default: checkpoint's)")
    add_quant_arguments(e)
    e.add_argument("--kv-layout", default="block", choices=["block", "slot"],
                   help="KV cache layout: paged blocks (prefix caching), or llama.cpp-style cells")
    from ..engine.config import DEFAULT_KV_DTYPE, KV_DTYPES

    e.add_argument("--kv-dtype", default=DEFAULT_KV_DTYPE, choices=list(KV_DTYPES),
                   help="K/V storage dtype (default: %(default)s, chosen by measurement: doc/benchmarks.md)")
    e.add_argument("--kv-cache-memory", default="1GiB", help="KV cache budget per model, e.g. 512MiB, 2GB")
    e.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="with --device nvidia: size the KV cache so the process uses this fraction of the GPU's "
                        "memory (default there: 0.9; replaces --kv-cache-memory)")
    e.add_argument("--max-num-seqs", type=int, default=32, help="most sequences per engine step")
    e.add_argument("--max-num-batched-tokens", type=int, default=2048, help="token budget of one engine step")
    from ..engine.config import DEFAULT_DECODE_GAP_MS

    e.add_argument("--decode-gap-ms", type=float, default=DEFAULT_DECODE_GAP_MS,
                   help="while requests decode, prefill chunks are cut so a step takes about this long, by the "
                        "step times measured (default: %(default)s; 0: the token budget alone)")
    e.add_argument("--async-output", action="store_true",
                   help="make a step's outputs (text, stop strings, streams) while the next step computes, on a "
                        "thread of its own (off by default: see doc/engine.md for when it pays)")
    e.add_argument("--async-scheduling", action="store_true",
                   help="also plan each step while the one before computes, its sampled ids handed over on that "
                        "thread (vLLM's async scheduling; implies --async-output; off by default: doc/engine.md)")
    e.add_argument("--max-model-len", type=int, default=None, help="context length (default: model and KV limit)")
    e.add_argument("--no-prefix-caching", action="store_true", help="turn the prefix cache off")
    e.add_argument("--prompt-cache-dir", default=None, metavar="DIR",
                   help="keep prefix-cache KV blocks in DIR across restarts: evicted ones and, on shutdown, all "
                        "(doc/engine.md, 'Prompt cache on disk')")
    e.add_argument("--prompt-cache-max-bytes", default="4GiB",
                   help="size cap of --prompt-cache-dir, least recently used files go first (default: %(default)s)")
    e.add_argument("--cache-reuse", type=int, default=0, metavar="N",
                   help="take runs of >= N cached tokens at a new position (llama-server's --cache-reuse: an "
                        "editor's moved ring of chunks); an approximation, BLOCK layout (default: 0, off)")
    e.add_argument("--seed", type=int, default=None, help="seeds the per-request seeds of unseeded requests")
    e.add_argument("--speculative", default=None, metavar="ngram|draft:MODEL",
                   help="speculative decoding: n-gram prompt lookup, or a draft model with the same tokenizer "
                        "(doc/engine.md); a request opts out with \"speculative\": false")
    e.add_argument("--num-speculative-tokens", type=int, default=None, metavar="K",
                   help="most draft tokens verified per request and step (1-16, default 4; adaptive below)")
    s = p.add_argument_group("access and limits")
    s.add_argument("--api-key", action="append", default=[], help="require this key (repeatable; default: "
                                                                    "$LLAISYS_API_KEY if set, else no key)")
    s.add_argument("--cors-origin", action="append", default=[], help="allow this browser origin ('*': any); "
                                                                        "no CORS headers without it")
    s.add_argument("--max-concurrent-requests", type=int, default=64, help="requests in the engine at once")
    s.add_argument("--max-queue", type=int, default=256, help="requests waiting for a slot; beyond: 429")
    s.add_argument("--per-user-concurrency", type=int, default=None, help="requests in flight per user")
    s.add_argument("--per-user-token-budget", type=int, default=None,
                   help="prompt + completion tokens per user per --token-budget-window")
    s.add_argument("--token-budget-window", type=float, default=60.0, help="seconds")
    s.add_argument("--max-tracked-users", type=int, default=10_000,
                   help="identities whose token budget is remembered; beyond, the least recently charged is "
                        "forgotten (bounds the admission state whatever `user` values clients send)")
    s.add_argument("--max-body-bytes", type=int, default=4 << 20, help="request body limit (413 beyond)")
    s.add_argument("--request-timeout", type=float, default=600.0, help="seconds before a request is aborted")
    s.add_argument("--max-n", type=int, default=8, help="most completions per prompt (n)")
    s.add_argument("--max-tokens-cap", type=int, default=None,
                   help="most tokens a request may ask for; also the default (default: up to the context)")
    s.add_argument("--max-sessions", type=int, default=1024,
                   help="server-side sessions and stored responses kept in all; beyond, one of the tenant holding "
                        "the most is evicted")
    s.add_argument("--max-sessions-per-tenant", type=int, default=256,
                   help="sessions and stored responses one tenant (API key, else `user`, else client address) "
                        "keeps; beyond, its own least recently used is evicted")
    s.add_argument("--max-session-bytes", default="4MiB",
                   help="most bytes of messages one session or stored response holds (400 beyond)")
    s.add_argument("--session-memory", default="512MiB",
                   help="most bytes of messages all sessions and stored responses hold; beyond, the tenant "
                        "holding the most loses its least recently used")
    s.add_argument("--session-ttl", type=float, default=3600.0, help="seconds an idle session is kept")
    s.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a connection has to send its request line and headers (408 or closed beyond)")
    s.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds a request body may stall with no byte arriving (408 beyond)")
    s.add_argument("--max-connections-per-client", type=int, default=128,
                   help="connections open at once from one client address (beyond: 429 and closed; 0: no cap)")
    s.add_argument("--drain-timeout", type=float, default=30.0, help="seconds in-flight requests get on shutdown")
    s.add_argument("--reasoning-parser", default="auto", choices=list(REASONING_PARSERS),
                   help="split <think> reasoning into reasoning_content: auto (by the chat template), deepseek_r1, "
                        "qwen3, none")
    s.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="least severe log messages shown on stderr")
    add_ray_arguments(p)
    return p


def build_state(args):
    """ServerState from parsed arguments (ValueError for bad values)."""
    from ..models import hub
    from .app import ServerState
    from .state.limits import ServerLimits
    from .protocol.parse import Limits
    from .state.registry import ModelSpec, Registry, parse_model_arg
    from ..engine.worker import as_device, check_device_id, parse_bytes
    from .state.sessions import SessionStore

    specs = [parse_model_arg(m) for m in list(args.models) + list(args.model)]
    if not specs:
        specs = [ModelSpec(hub.DEFAULT_MODEL, hub.DEFAULT_MODEL)]
    for name, v in (("--max-n", args.max_n), ("--max-tokens-cap", args.max_tokens_cap)):
        if v is not None and v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if args.threads is not None:  # process-wide; ValueError naming threads when out of range
        from .. import runtime

        runtime.set_num_threads(args.threads)
    check_device_id(as_device(args.device), args.device_id)  # before any load (ValueError: exit 2)
    engine_kwargs = dict(device=args.device, device_id=args.device_id, dtype=args.dtype, quant=args.quant,
                         quantize=args.quantize, kv_layout=args.kv_layout,
                         kv_dtype=args.kv_dtype,
                         kv_cache_memory=args.kv_cache_memory, max_num_seqs=args.max_num_seqs,
                         max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
                         decode_gap_ms=args.decode_gap_ms, seed=args.seed,
                         async_output=args.async_output, async_scheduling=args.async_scheduling,
                         batch_invariant=args.batch_invariant)
    if args.speculative is not None or args.num_speculative_tokens is not None:
        from ..engine.spec import parse_speculative

        parse_speculative(args.speculative, args.num_speculative_tokens)  # a bad value fails before any load
        engine_kwargs.update(speculative=args.speculative, num_speculative_tokens=args.num_speculative_tokens)
    if args.device == "nvidia":
        engine_kwargs["gpu_memory_utilization"] = 0.9 if args.gpu_memory_utilization is None \
            else args.gpu_memory_utilization
    elif args.gpu_memory_utilization is not None:
        raise ValueError("--gpu-memory-utilization needs --device nvidia (use --kv-cache-memory on the CPU)")
    if args.no_prefix_caching:
        engine_kwargs["enable_prefix_caching"] = False
    if args.prompt_cache_dir is not None:  # checked here, before any load (ValueError: exit 2)
        from ..engine.prompt_cache import check_options

        check_options(args.prompt_cache_dir, args.prompt_cache_max_bytes, args.kv_layout,
                      False if args.no_prefix_caching else None)
        engine_kwargs.update(prompt_cache_dir=args.prompt_cache_dir,
                             prompt_cache_max_bytes=args.prompt_cache_max_bytes)
    if args.cache_reuse:  # checked here, before any load (ValueError: exit 2)
        from ..engine.cache_reuse import check_cache_reuse

        engine_kwargs["cache_reuse"] = check_cache_reuse(args.cache_reuse, args.kv_layout,
                                                         False if args.no_prefix_caching else None, args.device)
    if args.async_scheduling and (args.prompt_cache_dir is not None or args.cache_reuse):
        raise ValueError("--async-scheduling does not combine with --prompt-cache-dir or --cache-reuse")
    keys = list(args.api_key) or ([os.environ["LLAISYS_API_KEY"]] if os.environ.get("LLAISYS_API_KEY") else [])
    if any(not k for k in keys):
        raise ValueError("--api-key must not be empty")
    limits = ServerLimits(max_concurrent_requests=args.max_concurrent_requests, max_queue=args.max_queue,
                          per_user_concurrency=args.per_user_concurrency,
                          per_user_token_budget=args.per_user_token_budget,
                          token_budget_window_s=args.token_budget_window, max_body_bytes=args.max_body_bytes,
                          request_timeout_s=args.request_timeout, max_tracked_users=args.max_tracked_users)
    return ServerState(Registry(specs, engine_kwargs), limits=limits,
                       request_limits=Limits(max_n=args.max_n, max_tokens_cap=args.max_tokens_cap),
                       api_keys=tuple(keys), cors_origins=tuple(args.cors_origin),
                       sessions=SessionStore(args.max_sessions, args.session_ttl,
                                             max_per_tenant=args.max_sessions_per_tenant,
                                             max_session_bytes=parse_bytes(args.max_session_bytes),
                                             max_total_bytes=parse_bytes(args.session_memory)),
                       reasoning_parser=args.reasoning_parser)


class _Shutdown:
    """Runs the drain once, on its own thread (serve_forever keeps answering meanwhile)."""

    def __init__(self, st, server, drain_timeout: float):
        self.st, self.server, self.drain_timeout = st, server, drain_timeout
        self.started = False
        self.force = threading.Event()

    def on_signal(self, signum, frame) -> None:
        if self.started:
            log.warning("second signal: aborting in-flight requests now")
            self.force.set()
            return
        self.started = True
        log.info("%s received: draining (up to %.0f s)", signal.Signals(signum).name, self.drain_timeout)
        threading.Thread(target=self.run, name="llaisys-shutdown", daemon=True).start()

    def run(self) -> None:
        st = self.st
        st.draining = True
        st.admission.close()
        deadline = time.monotonic() + self.drain_timeout
        while st.admission.num_active and time.monotonic() < deadline and not self.force.is_set():
            time.sleep(0.05)
        if st.admission.num_active:
            log.warning("drain timeout: aborting %d requests", st.admission.num_active)
        st.registry.shutdown(drain_timeout=0.0)  # aborts the rest; their streams end with an error event
        end = time.monotonic() + 5.0  # let the aborted responses be written
        while st.admission.num_active and time.monotonic() < end:
            time.sleep(0.05)
        self.server.shutdown()


def run_serve(args) -> int:
    """Serve in this process (`llaisys serve` without --ray)."""
    from .app import create_app
    from .state.connections import ConnectionLimits, LimitedWSGIServer

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server writes its own request lines
    try:
        st = build_state(args)
        conn_limits = ConnectionLimits(args.header_timeout, args.body_timeout, args.max_connections_per_client)
    except ValueError as e:
        print(f"llaisys serve: error: {e}", file=sys.stderr)
        return 2
    app = create_app(st)
    try:
        server = LimitedWSGIServer(args.host, args.port, app, conn_limits)
    except OSError as e:
        print(f"llaisys serve: cannot bind {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    names = ", ".join(st.registry.models)
    print(f"llaisys: serving {names} on http://{shown}:{port}/ (loading the model; /health answers 503 until "
          f"ready)", file=sys.stderr, flush=True)
    def load() -> None:
        st.registry.load()
        if st.registry.state == "failed":  # nothing to serve: say why and exit 1
            log.error("cannot serve: %s", st.registry.error)
            server.shutdown()
            return
        # What start-up made lives as long as the process: frozen, the garbage collector's full
        # collections skip it (5 ms of a 7 ms pause here).
        from ..engine.async_engine import freeze_startup_objects

        freeze_startup_objects()

    threading.Thread(target=load, name="llaisys-load", daemon=True).start()
    shutdown = _Shutdown(st, server, args.drain_timeout)
    signal.signal(signal.SIGTERM, shutdown.on_signal)
    signal.signal(signal.SIGINT, shutdown.on_signal)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    log.info("server stopped")
    return 0 if st.registry.state != "failed" else 1
