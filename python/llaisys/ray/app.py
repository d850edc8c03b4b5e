"""The Serve application: one LLMReplica deployment per served model (N replicas, or Serve's
autoscaling) behind one Ingress.

    from llaisys.ray.app import RayOptions, build_app
    app = build_app(settings, engine_kwargs, RayOptions(replicas=2))
    serve.run(app, name="llaisys", route_prefix="/")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ROUTERS = {  # --router -> the request router class (importable path: Serve loads it by name)
    "prefix": "llaisys.ray.router.PrefixAwareRouter",
    "pow2": "llaisys.ray.router.ObservedPow2Router",
}


@dataclass
class RayOptions:
    """How the replicas are deployed."""

    replicas: int = 1  # replicas per model (ignored when autoscaling is given)
    autoscaling: Optional[dict] = None  # Serve autoscaling_config, passed as it is (min/max_replicas, ...)
    replica_cpus: float = 1.0  # Ray CPUs each replica reserves (scheduling; see threads)
    replica_gpus: float = 0.0  # Ray GPUs each replica reserves (--device nvidia: 1)
    threads: Optional[int] = None  # CPU kernel threads per replica (None: replica_cpus rounded, at least 1)
    pin_cores: bool = False  # pin each replica to its own cores of the node
    router: str = "prefix"  # "prefix" (ours) or "pow2" (Ray's default, observed)
    imbalance: int = 8  # requests in flight beyond the least-loaded replica's that void an affinity
    stats_period_s: float = 1.0  # how often Serve polls each replica's routing report
    max_ongoing_requests: int = 64  # requests one replica takes at once (the rest wait in the router)
    drain_timeout: float = 30.0  # seconds a replica being removed gives its requests (graceful shutdown)

    def check(self) -> None:
        """ValueError naming the option that is out of range."""
        if self.autoscaling is None and self.replicas < 1:
            raise ValueError(f"--replicas must be >= 1, got {self.replicas}")
        if self.autoscaling is not None and not isinstance(self.autoscaling, dict):
            raise ValueError("--autoscaling-config must be a JSON object")
        if self.replica_cpus < 0 or self.replica_gpus < 0:
            raise ValueError("--replica-cpus and --replica-gpus must be >= 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {self.threads}")
        if self.router not in ROUTERS:
            raise ValueError(f"--router must be one of {sorted(ROUTERS)}, got {self.router!r}")
        if self.imbalance < 0:
            raise ValueError(f"--route-imbalance must be >= 0, got {self.imbalance}")
        if self.stats_period_s <= 0:
            raise ValueError(f"--routing-stats-period must be > 0, got {self.stats_period_s}")
        if self.max_ongoing_requests < 1:
            raise ValueError(f"--replica-max-ongoing-requests must be >= 1, got {self.max_ongoing_requests}")


def replica_deployment(spec, engine_kwargs: dict, opts: RayOptions):
    """The bound LLMReplica deployment of one served model."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from .replica import LLMReplica

    threads = opts.threads if opts.threads is not None else max(1, round(opts.replica_cpus))
    scale = {"autoscaling_config": opts.autoscaling} if opts.autoscaling is not None else \
        {"num_replicas": opts.replicas}
    actor = {"num_cpus": opts.replica_cpus}
    if opts.replica_gpus:
        actor["num_gpus"] = opts.replica_gpus
    dep = serve.deployment(LLMReplica).options(
        name=f"llm-{spec.served_name}", ray_actor_options=actor, max_ongoing_requests=opts.max_ongoing_requests,
        graceful_shutdown_timeout_s=opts.drain_timeout, graceful_shutdown_wait_loop_s=0.5,
        health_check_period_s=5.0, health_check_timeout_s=60.0,
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTERS[opts.router],
            request_router_kwargs={"imbalance": opts.imbalance} if opts.router == "prefix" else {},
            request_routing_stats_period_s=opts.stats_period_s,
            request_routing_stats_timeout_s=max(5.0, 4 * opts.stats_period_s)),
        **scale)
    return dep.bind(spec.source, spec.served_name, dict(engine_kwargs), threads, opts.pin_cores)


def build_app(settings, engine_kwargs: dict, opts: RayOptions):
    """The application: an LLMReplica deployment per model in `settings.specs` and the ingress."""
    from ray import serve

    from .ingress import Ingress

    opts.check()
    replicas = {spec.served_name: replica_deployment(spec, engine_kwargs, opts) for spec in settings.specs}
    limits = settings.limits
    in_flight = (limits.max_concurrent_requests + limits.max_queue + 16) if limits is not None else 1024
    ingress = serve.deployment(Ingress).options(
        name="ingress", num_replicas=1, max_ongoing_requests=in_flight, ray_actor_options={"num_cpus": 0},
        graceful_shutdown_timeout_s=opts.drain_timeout, graceful_shutdown_wait_loop_s=0.5)
    return ingress.bind(replicas, settings)
