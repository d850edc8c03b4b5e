"""ReplicaEngine: what the ingress's Flask routes use as `served.engine`, over a Serve handle.

It offers the part of AsyncEngine the server uses (``tokenizer``, ``config``,
``add_request``, ``encode``, ``abort``, ``is_alive``, ``error``, ``snapshot``,
``shutdown``), so ``llaisys serve``'s route code runs unchanged. Each request is one
streaming call to a replica (``LLMReplica.generate``) read by one pump thread into a
RemoteStream, whose interface is AsyncEngine's RequestStream.

Faults: when the replica of a request dies (Ray reports its actor dead or unavailable) the
request goes to another replica if its client has seen nothing of it yet: a streaming
client before its first token, a non-streaming client at any point (it only ever sees the
final output, which the new replica produces whole). A stream that already sent tokens ends
with a final output of finish_reason "error" (the server sends an error event and
[DONE]). ``HTTP_CONTEXT`` tells which kind of client a request has; the ingress sets it.
"""

from __future__ import annotations

import contextvars
import copy
import logging
import threading
import time
from dataclasses import dataclass
from typing import Optional

from ..engine.async_engine import EngineDeadError, RequestStream, _error_output
from ..engine.kv_cache_manager import hash_block_tokens
from ..engine.sampling_params import SamplingParamsError
from .replica import short_hash

log = logging.getLogger("llaisys.ray")

MAX_ATTEMPTS = 3  # replicas one request may be sent to (the first included)
RETRY_BACKOFF_S = 0.2  # wait before re-sending (the router learns of the death meanwhile)


@dataclass
class HTTPContext:
    """What the ingress knows of the HTTP request being served (one per request)."""

    streaming: bool = False  # the client reads SSE: outputs reach it as they come
    session: Optional[str] = None  # session id (body session_id or X-Session-Id): the routing key


HTTP_CONTEXT: contextvars.ContextVar = contextvars.ContextVar("llaisys_ray_http", default=None)


class FaultCounters:
    """Retries and failed streams of this process (for /metrics)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.retries = 0  # requests re-sent after their replica died
        self.failed_streams = 0  # streams ended with an error because their replica died mid-stream

    def add(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


FAULTS = FaultCounters()


def _replica_gone_errors() -> tuple:
    import ray.exceptions as rex
    from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError

    return rex.RayActorError, ReplicaUnavailableError, DeploymentUnavailableError


def _aborted_final(request_id: str, last, prompt, ids: list, n: int):
    """The final output of a request aborted by the ingress: the last output seen, finished
    with "abort" (usage as far as it got); a fresh one when nothing came yet."""
    if last is None or getattr(last, "finished", False):
        out = _error_output(request_id, prompt, ids, n, "aborted")
        out.error = None
        if n == 0:
            out.finish_reason = "abort"
        else:
            for c in out.outputs:
                c.finish_reason = "abort"
        return out
    out = copy.copy(last)
    out.finished = True
    out.outputs = [copy.copy(c) for c in last.outputs]
    for c in out.outputs:
        c.delta_text, c.delta_token_ids = "", []
        if c.finish_reason is None:
            c.finish_reason = "abort"
    return out


class RemoteStream(RequestStream):
    """The outputs of one request run on a replica: AsyncEngine.RequestStream's reader side
    (get, iteration), fed from the replica's call instead of the local engine."""

    def __init__(self, engine: "ReplicaEngine", request_id: str, ids: list, params, prompt: Optional[str],
                 pooling: bool, n: int, sink: Optional[tuple] = None):
        super().__init__(engine, request_id, sink)
        self.replica: Optional[str] = None  # label of the replica that accepted it (the last one)
        self._args = (ids, params, prompt, pooling)
        self._n = n  # completions (0: a pooling request)
        ctx = HTTP_CONTEXT.get()
        self._ctx = ctx if ctx is not None else HTTPContext(streaming=True)  # no context: assume streaming
        self._decided = threading.Event()  # accepted or rejected
        self._rejection: Optional[tuple] = None  # ("rejected", kind, message, param)
        self._lock = threading.Lock()
        self._call = None  # the current DeploymentResponseGenerator
        self._aborted = False
        self._final_put = False
        self._last = None  # the last output queued

    def abort(self) -> None:
        """Abort: the replica's call is cancelled (its engine frees the blocks) and the final
        output (finish_reason "abort") is delivered here."""
        with self._lock:
            if self._aborted or self._final_put:
                return
            self._aborted = True
            call = self._call
        if call is not None:
            call.cancel()
        self._put_final(_aborted_final(self.request_id, self._last, self._args[2], self._args[0], self._n))

    # ---- the pump --------------------------------------------------------------------------
    def _put(self, out) -> None:
        with self._lock:
            if self._final_put:
                return
            self._final_put = out.finished
            self._last = out
        self._queue.put(out)

    def _put_final(self, out) -> None:
        self._put(out)

    def start(self, accept_timeout: float) -> None:
        """Send the request and wait until a replica took it (or said why not)."""
        threading.Thread(target=self._pump, name=f"ray-{self.request_id}", daemon=True).start()
        if not self._decided.wait(accept_timeout):
            self.abort()
            raise EngineDeadError(f"no replica took the request within {accept_timeout:.0f} s")
        if self._rejection is not None:
            _, kind, message, param = self._rejection
            if kind == "sampling":
                raise SamplingParamsError(param, message)
            if kind == "dead":
                raise EngineDeadError(message)
            raise ValueError(message)

    def _submit(self, attempt: int):
        ids, params, prompt, pooling = self._args
        rid = self.request_id if attempt == 0 else f"{self.request_id}.retry{attempt}"
        return self._engine.handle.options(stream=True).generate.remote(
            rid, ids, params, prompt, pooling, route=self._engine.route_for(ids, params, self._ctx))

    def _pump(self) -> None:
        gone = _replica_gone_errors()
        attempt, tokens_seen = 0, False
        while True:
            with self._lock:
                if self._aborted:
                    return
                call = self._call = self._submit(attempt)
            try:
                for item in call:
                    if isinstance(item, tuple):
                        if item[0] == "accepted":
                            self.replica = item[1]
                        else:
                            self._rejection = item
                        self._decided.set()
                        continue
                    for out in item:
                        if self._n and any(c.delta_token_ids for c in out.outputs):
                            tokens_seen = True
                        self._put(out)
                if self._rejection is None and not self._final_put and not self._aborted:
                    self._fail("the replica ended the request without a final output")
                return
            except gone as e:
                if self._aborted:
                    return
                resend = not tokens_seen or not self._ctx.streaming
                if resend and attempt + 1 < MAX_ATTEMPTS:
                    attempt += 1
                    FAULTS.add("retries")
                    log.warning("request %s: replica %s is gone (%s); sending it to another replica (attempt %d)",
                                self.request_id, self.replica, type(e).__name__, attempt + 1)
                    time.sleep(RETRY_BACKOFF_S)
                    continue
                if tokens_seen and self._ctx.streaming:
                    FAULTS.add("failed_streams")
                self._fail(f"replica {self.replica or '?'} stopped while serving the request ({type(e).__name__})")
                return
            except Exception as e:  # noqa: BLE001 - a fault of the call itself: this request fails
                if self._aborted:
                    return
                log.exception("request %s failed on replica %s", self.request_id, self.replica)
                self._fail(f"{type(e).__name__}: {str(e)[:200]}")
                return

    def _fail(self, error: str) -> None:
        ids, _, prompt, _ = self._args
        if not self._decided.is_set():
            self._rejection = ("rejected", "dead", error, None)
            self._decided.set()
            return
        self._put_final(_error_output(self.request_id, prompt, ids, self._n, error))


class ReplicaEngine:
    """An AsyncEngine look-alike for one model served by Ray replicas (see the module docstring).
    `info` is a replica's ``info()``; `reports` gives replica label -> its latest routing report."""

    def __init__(self, handle, info: dict, reports, accept_timeout: float = 600.0):
        self.handle = handle  # DeploymentHandle of the model's LLMReplica deployment
        self.config = info["config"]  # EngineConfig (every replica's is the same)
        self.tokenizer = info["tokenizer"]
        self.error: Optional[str] = None
        self._reports = reports
        self._accept_timeout = accept_timeout
        self._closing = False
        self._lock = threading.Lock()
        self._streams: dict = {}  # request id -> RemoteStream, until its final output is queued

    @property
    def is_alive(self) -> bool:
        return not self._closing

    @property
    def num_unfinished(self) -> int:
        with self._lock:
            return sum(1 for s in self._streams.values() if not s._final_put)

    def route_for(self, ids: list, params, ctx: HTTPContext) -> dict:
        """The router's hint: session key, the prompt's block hashes (the KV cache manager's
        chained SHA-256, cut to HASH_PREFIX_BYTES, over the blocks a hit could cover), and
        the tokens the request may cost."""
        bs = self.config.block_size
        hashes, parent = [], None
        for i in range((len(ids) - 1) // bs):
            parent = hash_block_tokens(parent, ids[i * bs:(i + 1) * bs])
            hashes.append(short_hash(parent))
        max_tokens = getattr(params, "max_tokens", None) or 0
        return {"session": ctx.session, "hashes": hashes, "tokens": len(ids) + max_tokens}

    def _start(self, request_id: str, ids, params, prompt, pooling: bool, n: int,
               sink: Optional[tuple] = None) -> RemoteStream:
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty string, got {request_id!r}")
        if self._closing:
            raise EngineDeadError("the engine is shutting down")
        stream = RemoteStream(self, request_id, list(ids), params, prompt, pooling, n, sink)
        with self._lock:
            if request_id in self._streams and not self._streams[request_id]._final_put:
                raise ValueError(f"request id {request_id!r} is already in use")
            self._streams[request_id] = stream
        try:
            stream.start(self._accept_timeout)
        except BaseException:
            with self._lock:
                self._streams.pop(request_id, None)
            raise
        with self._lock:  # forget finished ones (keeps the map bounded by what is in flight)
            for rid in [rid for rid, s in self._streams.items() if s._final_put]:
                del self._streams[rid]
        return stream

    def add_request(self, request_id: str, prompt_token_ids, sampling_params=None, prompt: Optional[str] = None):
        from ..engine.llm_engine import snapshot_sampling_params

        sp = snapshot_sampling_params(sampling_params)
        return self._start(request_id, prompt_token_ids, sp, prompt, False, sp.n)

    def add_requests(self, entries, sink=None) -> list:
        """AsyncEngine.add_requests over the replicas: each request is sent and accepted in
        turn (a replica checks it); if one is refused, those already accepted are aborted."""
        from ..engine.llm_engine import snapshot_sampling_params

        streams = []
        try:
            for i, (request_id, ids, params, prompt) in enumerate(entries):
                sp = snapshot_sampling_params(params)
                streams.append(self._start(request_id, ids, sp, prompt, False, sp.n, None if sink is None else (sink, i)))
        except BaseException:
            for s in streams:
                s.abort()
            raise
        return streams

    def encode(self, request_id: str, prompt_token_ids, pooling_params=None, prompt: Optional[str] = None):
        from ..engine.llm_engine import snapshot_pooling_params

        return self._start(request_id, prompt_token_ids, snapshot_pooling_params(pooling_params), prompt, True, 0)

    def abort(self, request_id: str) -> None:
        with self._lock:
            stream = self._streams.get(request_id)
        if stream is not None:
            stream.abort()

    def snapshot(self):
        """The replicas' EngineMetrics added up (gauges and counters; KV usage averaged), as of
        their latest reports."""
        from ..engine.metrics import EngineMetrics

        total = EngineMetrics()
        reports = [r for r in self._reports().values() if r.get("metrics") is not None]
        for rep in reports:
            m = rep["metrics"]
            for name in ("num_running", "num_waiting", "num_preempted_waiting", "num_free_blocks",
                         "num_cached_blocks", "num_steps", "prompt_tokens_total", "generation_tokens_total",
                         "computed_tokens_total", "num_preemptions_total", "pooled_tokens_total"):
                setattr(total, name, getattr(total, name) + getattr(m, name))
            for name in ("finished_total", "pooling_finished_total"):
                acc = getattr(total, name)
                for k, v in getattr(m, name).items():
                    acc[k] = acc.get(k, 0) + v
            for name in ("queries", "query_hits", "query_misses", "query_tokens", "hit_tokens", "evictions"):
                setattr(total.prefix_cache, name, getattr(total.prefix_cache, name) + getattr(m.prefix_cache, name))
        if reports:
            total.kv_usage = sum(r["metrics"].kv_usage for r in reports) / len(reports)
        return total

    def shutdown(self, drain_timeout: float = 0.0) -> None:
        """Stop taking requests, give those in flight up to `drain_timeout` s, abort the rest."""
        self._closing = True
        deadline = time.monotonic() + max(0.0, drain_timeout)
        while self.num_unfinished and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            s.abort()
