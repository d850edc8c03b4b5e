"""`llaisys serve --ray`: the same server on Ray Serve, N engine replicas behind one endpoint.

    llaisys serve MODEL --ray --replicas 2                  # a local Ray cluster on this machine
    ray start --head --port 6379                            # or: a cluster over several machines
    ray start --address HEAD:6379                           #     (on each other machine)
    llaisys serve MODEL --ray --address HEAD:6379 --replicas 4

Every other `llaisys serve` option means what it means there (engine options apply to each
replica). This module imports ray only when the command runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import threading

log = logging.getLogger("llaisys.ray")

APP_NAME = "llaisys"


def ray_options(args):
    """RayOptions from parsed arguments (ValueError naming the bad option)."""
    from .app import RayOptions

    autoscaling = None
    if args.autoscaling_config is not None:
        try:
            autoscaling = json.loads(args.autoscaling_config)
        except ValueError as e:
            raise ValueError(f"--autoscaling-config is not valid JSON: {e}") from None
    if getattr(args, "device_id", 0) != 0:
        raise ValueError("--device-id does not combine with --ray: Ray gives each replica its own GPU, which the "
                         "replica sees as device 0")
    gpus = 1.0 if args.device == "nvidia" else 0.0
    opts = RayOptions(replicas=args.replicas, autoscaling=autoscaling, replica_cpus=args.replica_cpus,
                      replica_gpus=gpus, threads=args.threads, pin_cores=args.pin_cores, router=args.router,
                      imbalance=args.route_imbalance, stats_period_s=args.routing_stats_period,
                      max_ongoing_requests=args.replica_max_ongoing_requests, drain_timeout=args.drain_timeout)
    opts.check()
    return opts


def ingress_settings(st, args):
    """IngressSettings from the ServerState `llaisys serve` would run with."""
    from .ingress import IngressSettings

    shipped = {"registry", "limits", "request_limits", "api_keys", "cors_origins", "sessions", "cancels", "draining"}
    options = {f.name: getattr(st, f.name) for f in dataclasses.fields(st) if f.name not in shipped}
    return IngressSettings(options=options, specs=[m.spec for m in st.registry.models.values()], limits=st.limits,
                           request_limits=st.request_limits, api_keys=tuple(st.api_keys),
                           cors_origins=tuple(st.cors_origins), max_sessions=args.max_sessions,
                           session_ttl=args.session_ttl, drain_timeout=args.drain_timeout, log_level=args.log_level)


def run_serve_ray(args) -> int:
    from ..server.serve import build_state

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.port == 0:
            raise ValueError("--port 0 cannot be used with --ray (Serve's HTTP proxy needs a fixed port)")
        st = build_state(args)  # validates every server option; loads nothing
        opts = ray_options(args)
    except ValueError as e:
        print(f"llaisys serve: error: {e}", file=sys.stderr)
        return 2
    try:
        import ray
        from ray import serve
    except ImportError:
        print("llaisys serve: error: --ray needs Ray Serve: pip install 'llaisys[ray]'", file=sys.stderr)
        return 2
    from .app import build_app

    started = not ray.is_initialized()
    if started:
        ray.init(address=args.address, logging_level=logging.WARNING)
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(build_app(ingress_settings(st, args), st.registry.engine_kwargs, opts), name=APP_NAME,
                  route_prefix="/")
        shown = f"[{args.host}]" if ":" in args.host else args.host
        how = f"autoscaling {opts.autoscaling}" if opts.autoscaling else f"{opts.replicas} replicas per model"
        print(f"llaisys: serving {', '.join(st.registry.models)} on http://{shown}:{args.port}/ (Ray Serve, {how}, "
              f"{opts.router} routing)", file=sys.stderr, flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        while not stop.wait(1.0):
            pass
        log.info("stopping: replicas get up to %.0f s to finish their requests", args.drain_timeout)
        serve.delete(APP_NAME)  # graceful: each replica drains (graceful_shutdown_timeout_s)
    finally:
        if started:
            if args.address is None:
                serve.shutdown()
            ray.shutdown()
    return 0
