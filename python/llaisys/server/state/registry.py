"""The models a server serves: served name -> (LLM, AsyncEngine), loaded in the background.

The server binds its socket first and loads afterwards, so /health can answer 503 "loading"
while weights are read. A request's `model` field picks the entry; an unknown name is a 404
``model_not_found``; a request before loading finished, or after an engine loop died, a 503.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..protocol.errors import not_found, unavailable

log = logging.getLogger(__name__)


@dataclass
class ModelSpec:
    """One model to serve."""

    source: str  # a model directory, a .gguf file or a known model name
    served_name: str  # the name clients put in `model`


def parse_model_arg(arg: str) -> ModelSpec:
    """`NAME_OR_PATH[=SERVED_NAME]`; without a served name, the directory's base name, the GGUF
    file's name without `.gguf`, or the name."""
    source, sep, served = arg.partition("=")
    if not source or (sep and not served):
        raise ValueError(f"--model takes NAME_OR_PATH or NAME_OR_PATH=SERVED_NAME, got {arg!r}")
    base = Path(source.rstrip("/"))
    default = base.stem if base.suffix.lower() == ".gguf" else base.name
    return ModelSpec(source, served if sep else default or source)


@dataclass
class ServedModel:
    spec: ModelSpec
    llm: object = None  # engine.LLM once loaded
    engine: object = None  # engine.AsyncEngine once loaded
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def name(self) -> str:
        return self.spec.served_name

    @property
    def max_model_len(self) -> Optional[int]:
        return self.engine.config.max_model_len if self.engine is not None else None


class Registry:
    """Served models by name; load() fills them in (call it on a background thread)."""

    def __init__(self, specs: list, engine_kwargs: Optional[dict] = None):
        names = [s.served_name for s in specs]
        if not specs:
            raise ValueError("at least one model must be served")
        if len(set(names)) != len(names):
            raise ValueError(f"served model names must be unique, got {names}")
        self.models = {s.served_name: ServedModel(s) for s in specs}  # in command-line order
        self.engine_kwargs = dict(engine_kwargs or {})  # LLM(...) keyword arguments
        self.state = "loading"  # "loading" | "ready" | "failed" | "stopped"
        self.error: Optional[str] = None  # why loading failed
        self.ready = threading.Event()  # set once loading ended (well or not)

    @property
    def default_name(self) -> str:
        return next(iter(self.models))

    def load(self) -> None:
        """Load every model and start its engine loop; on failure record why (state "failed")."""
        from ...engine import LLM
        from ...engine.async_engine import AsyncEngine
        from ...engine.structured_matcher import warm_structured

        try:
            for m in self.models.values():
                t0 = time.monotonic()
                m.llm = LLM(m.spec.source, **self.engine_kwargs)
                m.engine = AsyncEngine(m.llm.engine, name=f"llaisys-engine-{m.name}")
                warm_structured(m.llm.engine.structured, m.name)
                c = m.llm.config
                log.info("model %s loaded from %s in %.1f s: max_model_len %d, KV pool %d blocks x %d tokens",
                         m.name, m.llm.worker.path, time.monotonic() - t0, c.max_model_len, c.num_blocks,
                         c.block_size)
            if self.state == "loading":
                self.state = "ready"
        except Exception as e:  # reported by /health and every request; the process stays up to say so
            self.state, self.error = "failed", f"{type(e).__name__}: {e}"
            if isinstance(e, ValueError):  # a bad model argument or file: the message says it all
                log.error("loading the models failed: %s", e)
            else:
                log.exception("loading the models failed")
        finally:
            self.ready.set()

    def engines(self) -> dict:
        """served name -> AsyncEngine, for the models loaded so far."""
        return {name: m.engine for name, m in self.models.items() if m.engine is not None}

    def health(self) -> Optional[str]:
        """None if every model can take requests, else why not ("loading", ...)."""
        if self.state != "ready":
            return self.state
        dead = [name for name, m in self.models.items() if not m.engine.is_alive]
        return f"engine loop of {', '.join(dead)} died" if dead else None

    def get(self, name: Optional[str]) -> ServedModel:
        """The model named `name` (None: the first one), ready to take requests; 404 or 503 otherwise."""
        m = self.models.get(self.default_name if name is None else name)
        if m is None:
            raise not_found(f"the model {name!r} does not exist; served models: {', '.join(self.models)}",
                            code="model_not_found", param="model")
        if self.state == "loading":
            raise unavailable("the model is still loading", code="loading", retry_after=5)
        if self.state == "stopped":
            raise unavailable("the server is shutting down", code="shutting_down")
        if self.state != "ready":
            raise unavailable(f"the server could not load its models: {self.error}", code="load_failed")
        if not m.engine.is_alive:
            raise unavailable(f"the engine of {m.name!r} has stopped: {m.engine.error or 'shut down'}",
                              code="engine_dead")
        return m

    def shutdown(self, drain_timeout: float = 0.0) -> None:
        """Drain every engine (up to drain_timeout s in all), abort the rest, stop the loops."""
        if self.state != "failed":
            self.state = "stopped"
        deadline = time.monotonic() + drain_timeout
        for m in self.models.values():
            if m.engine is not None:
                m.engine.shutdown(drain_timeout=max(0.0, deadline - time.monotonic()))
        for m in self.models.values():
            if m.llm is not None:
                m.llm.close()
