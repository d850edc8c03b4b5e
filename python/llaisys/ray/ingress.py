"""The Serve ingress: ``llaisys serve``'s Flask app (same routes, SSE framing, API keys, limits,
sessions, error shapes, /metrics) over ReplicaEngines instead of local engines.

The seam is the server's Registry: its ``load()`` normally builds an LLM and an AsyncEngine
per model; RayRegistry's builds a ReplicaEngine per model from the model's Serve handle, and
everything above (``create_app``, the routes, Generation, Run) is the server's own code.
Sessions and admission live here, so the ingress runs as one replica (the replicas behind it
scale; ``llaisys serve --ray`` deploys it that way).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..server.state.registry import Registry

log = logging.getLogger("llaisys.ray")

INFO_TIMEOUT_S = 900.0  # how long the ingress waits for a replica of each model to load and answer


@dataclass
class IngressSettings:
    """What `llaisys serve` options give the ingress (picklable: Serve ships it to the actor)."""

    specs: list  # [registry.ModelSpec] served models, in command-line order
    limits: object = None  # server.state.limits.ServerLimits (None: defaults)
    request_limits: object = None  # server.protocol.parse.Limits (None: defaults)
    api_keys: tuple = ()  # accepted API keys; empty: no authentication
    cors_origins: tuple = ()  # allowed browser origins
    max_sessions: int = 1024  # server-side sessions kept
    session_ttl: float = 3600.0  # seconds an idle session is kept
    drain_timeout: float = 30.0  # seconds requests in flight get when the ingress stops
    log_level: str = "info"
    options: dict = None  # other plain ServerState fields as `llaisys serve` set them (e.g. reasoning_parser)


class RayRegistry(Registry):
    """Served models whose engines are ReplicaEngines over Serve handles (name -> handle)."""

    def __init__(self, specs: list, handles: dict, accept_timeout: float):
        super().__init__(specs)
        missing = [s.served_name for s in specs if s.served_name not in handles]
        if missing:
            raise ValueError(f"no replica deployment for models {missing}")
        self.handles = handles
        self.accept_timeout = accept_timeout

    def load(self) -> None:
        from .client import ReplicaEngine
        from .routing_log import ROUTING

        try:
            for m in self.models.values():
                t0 = time.monotonic()
                info = self.handles[m.name].info.remote().result(timeout_s=INFO_TIMEOUT_S)
                name = m.name

                def reports(name=name):
                    return {k: v for k, v in ROUTING.reports().items() if v.get("model") == name}

                m.engine = ReplicaEngine(self.handles[m.name], info, reports, accept_timeout=self.accept_timeout)
                c = info["config"]
                log.info("model %s: replicas ready in %.1f s: max_model_len %d, KV pool %d blocks x %d tokens "
                         "per replica", m.name, time.monotonic() - t0, c.max_model_len, c.num_blocks, c.block_size)
            if self.state == "loading":
                self.state = "ready"
        except Exception as e:  # reported by /health and every request
            self.state, self.error = "failed", f"{type(e).__name__}: {e}"
            log.exception("the replicas could not be reached")
        finally:
            self.ready.set()


class Ingress:
    """The Serve ingress deployment's class (wrapped by serve.deployment in app.py)."""

    def __init__(self, handles: dict, settings: IngressSettings):
        from ..server.app import ServerState, create_app
        from ..server.state.limits import ServerLimits
        from ..server.protocol.parse import Limits
        from ..server.state.sessions import SessionStore
        from .metrics import RayCollector

        logging.basicConfig(level=settings.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        limits = settings.limits or ServerLimits()
        self.settings = settings
        self.state = ServerState(RayRegistry(settings.specs, handles, limits.request_timeout_s), limits=limits,
                                 request_limits=settings.request_limits or Limits(), api_keys=tuple(settings.api_keys),
                                 cors_origins=tuple(settings.cors_origins),
                                 sessions=SessionStore(settings.max_sessions, settings.session_ttl),
                                 **(settings.options or {}))
        self.state.metrics.registry.register(RayCollector())
        self.app = create_app(self.state)
        threading.Thread(target=self.state.registry.load, name="llaisys-ray-load", daemon=True).start()

    async def __call__(self, request):
        from .wsgi import serve_wsgi

        return await serve_wsgi(self.app, request)

    def check_health(self) -> None:
        if self.state.registry.state == "failed":
            raise RuntimeError(f"the ingress could not reach its replicas: {self.state.registry.error}")

    def __del__(self):
        """Serve's graceful shutdown: requests in flight had graceful_shutdown_timeout_s; stop."""
        st = getattr(self, "state", None)
        if st is not None:
            st.draining = True
            st.registry.shutdown(drain_timeout=0.0)
