"""LLMReplica: one Serve replica = one full AsyncEngine (its own process, cores or GPU).

The ingress talks to it through a Serve handle (``client.ReplicaEngine``):

- ``generate(request_id, ids, params, prompt, pooling, route)`` is an async generator. Its
  first item says whether the engine took the request: ``("accepted", replica name)`` or
  ``("rejected", kind, message, param)`` (the checks of ``AsyncEngine.add_request``, so a bad
  request is a 400 at the ingress, never a retry). Then come lists of RequestOutputs (every
  output ready at that moment, so a fast engine costs one Ray message per wake-up, not per
  token; the engine thread wakes the waiting call, nothing polls) until the final one.
  Cancelling the call (the client left, the ingress aborted) aborts the engine request, which
  frees its KV blocks.
- ``record_routing_stats()`` is what Serve polls for the router (``router.py``): queue
  lengths, outstanding tokens, KV usage, counters, and the truncated hashes of the blocks
  in the prefix cache, so that routing uses the engine's own block hashes.
- ``info()`` gives the ingress the engine config and the tokenizer (the ingress tokenizes
  and applies chat templates itself, exactly as ``llaisys serve`` does).

Nothing here imports ray at module import; Serve wraps the class in ``app.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Optional

from ..engine.async_engine import AsyncEngine, EngineDeadError, freeze_startup_objects
from ..engine.sampling_params import SamplingParamsError
from ..engine.structured_matcher import warm_structured

log = logging.getLogger("llaisys.ray")

HASH_PREFIX_BYTES = 8  # bytes of each SHA-256 block hash sent to the router (collisions only cost a miss)
MAX_REPORTED_BLOCKS = 65536  # most cached block hashes one stats report carries (the newest)
# a waiting generate() sleeps until the engine thread queues an output (RequestStream.set_waker);
# this is only the longest it sleeps should a wake-up be lost
WAKE_TIMEOUT_S = 1.0


def short_hash(h: bytes) -> bytes:
    return h[:HASH_PREFIX_BYTES]


def pin_to_cores(cores: set) -> None:
    """Pin every thread of this process (those started later inherit it) to `cores`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that just ended
            pass


class LLMReplica:
    """One engine replica of `model` (a directory, .gguf file or known name) served as
    `served_name`. `engine_kwargs` are LLM(...) keyword arguments; `threads` the CPU kernel
    threads (None: leave the default); `pin_cores` pins the replica to `threads` cores of its
    node, chosen by its rank on the node (a benchmark's one core per replica)."""

    def __init__(self, model: str, served_name: str, engine_kwargs: dict, threads: Optional[int] = None,
                 pin_cores: bool = False):
        from ray import serve

        from .. import runtime
        from ..engine import LLM

        ctx = serve.get_replica_context()
        self.model = served_name
        self.name = ctx.replica_tag  # label of this replica in metrics and logs (Serve's replica id)
        if pin_cores:
            allowed = sorted(os.sched_getaffinity(0))
            width = max(1, threads or 1)
            first = (ctx.rank.local_rank * width) % len(allowed)
            pin_to_cores({allowed[(first + i) % len(allowed)] for i in range(width)})
        if threads is not None:
            runtime.set_num_threads(threads)
        t0 = time.monotonic()
        self.llm = LLM(model, **engine_kwargs)
        self.engine = AsyncEngine(self.llm.engine, name=f"llaisys-engine-{self.name}")
        warm_structured(self.llm.engine.structured, self.name)
        self._outstanding: dict = {}  # request id -> tokens it may still cost (prompt + max_tokens)
        freeze_startup_objects()  # as llaisys serve does once its models are loaded
        c = self.llm.config
        log.info("replica %s: %s loaded in %.1f s, KV pool %d blocks x %d tokens, cores %s", self.name, model,
                 time.monotonic() - t0, c.num_blocks, c.block_size, sorted(os.sched_getaffinity(0)))

    # ---- what the ingress and the router read ----------------------------------------------
    def info(self) -> dict:
        """The engine config and tokenizer (the same on every replica of a model)."""
        return {"config": self.engine.config, "tokenizer": self.engine.tokenizer, "replica": self.name}

    def record_routing_stats(self) -> dict:
        """Serve polls this for the router (request_routing_stats_period_s). Cheap: reads
        counters and copies the cache's hash keys (a C-level copy, atomic under the GIL)."""
        m = self.engine.snapshot()
        kv = self.llm.engine.scheduler.kv
        for _ in range(3):
            try:
                keys = list(kv.cached.keys())
                break
            except RuntimeError:  # resized by the engine thread mid-copy
                keys = []
        return {
            "replica": self.name,  # the replica's label
            "model": self.model,  # served model name
            "num_running": m.num_running,  # sequences holding KV
            "num_waiting": m.num_waiting,  # sequences queued
            "outstanding_tokens": sum(self._outstanding.values()),  # prompt + max_tokens in flight
            "kv_usage": m.kv_usage,  # fraction of KV blocks held
            "block_size": kv.block_size,  # tokens per block (the hashes' unit)
            "cached": frozenset(short_hash(h) for h in keys[-MAX_REPORTED_BLOCKS:]),  # prefix-cache blocks
            "metrics": m,  # EngineMetrics counters (AsyncEngine.snapshot carries no latency samples)
            "alive": self.engine.is_alive,
            "time": time.time(),  # when this report was made (wall clock)
        }

    def check_health(self) -> None:
        """Serve restarts a replica whose engine loop died."""
        if not self.engine.is_alive:
            raise RuntimeError(f"the engine loop of replica {self.name} died: {self.engine.error}")

    # ---- requests --------------------------------------------------------------------------
    async def generate(self, request_id: str, prompt_token_ids: list, params, prompt: Optional[str] = None,
                       pooling: bool = False, route: Optional[dict] = None):
        """See the module docstring. `route` is the router's hint (read by the router, not here)."""
        try:
            if pooling:
                stream = self.engine.encode(request_id, prompt_token_ids, params, prompt=prompt)
            else:
                stream = self.engine.add_request(request_id, prompt_token_ids, params, prompt=prompt)
        except SamplingParamsError as e:
            yield ("rejected", "sampling", str(e), e.param)
            return
        except EngineDeadError as e:
            yield ("rejected", "dead", str(e), None)
            return
        except ValueError as e:
            yield ("rejected", "value", str(e), None)
            return
        cost = len(prompt_token_ids) + (0 if pooling else (params.max_tokens or 0))
        self._outstanding[request_id] = cost
        try:
            loop, ready = asyncio.get_running_loop(), asyncio.Event()
            stream.set_waker(lambda: loop.call_soon_threadsafe(ready.set))
            yield ("accepted", self.name)
            while True:
                ready.clear()  # before draining: an output queued after the drain sets it again
                batch = []
                while True:
                    try:
                        out = stream.get(timeout=0)
                    except TimeoutError:
                        break
                    batch.append(out)
                    if out.finished:
                        break
                if batch:
                    yield batch
                    if batch[-1].finished:
                        return
                else:
                    try:
                        await asyncio.wait_for(ready.wait(), WAKE_TIMEOUT_S)
                    except asyncio.TimeoutError:
                        pass
        finally:
            if not stream.finished:
                stream.abort()  # cancelled: the engine frees its blocks before the next step
            self._outstanding.pop(request_id, None)

    def __del__(self):
        """Serve's graceful shutdown (scale-down, redeploy) calls this once the replica's
        requests have finished or graceful_shutdown_timeout_s has passed."""
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown(drain_timeout=0.0)
        llm = getattr(self, "llm", None)
        if llm is not None:
            llm.close()
