"""AsyncEngine: one background thread drives LLMEngine.step(); other threads add requests,
read their outputs from per-request streams, and abort them.

The engine itself is single-threaded. Callers never touch it: add_request checks what can be
checked without engine state (so a bad request fails at once, in the caller's thread) and
queues a command; the loop applies queued commands between steps, so an abort takes effect
before the next step, and a request never waits behind a long prefill to be admitted.
Generation (add_request) and pooling (encode) are both requests of the one scheduler; there
is no other way onto the loop thread.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections import deque
from typing import Callable, Iterator, Optional

from .llm_engine import EngineDeadError, LLMEngine, snapshot_pooling_params, snapshot_sampling_params
from .outputs import CompletionOutput, PoolingRequestOutput, RequestOutput, Usage
from .pooling_params import PoolingParams
from .request import RequestTimes
from .sampling_params import SamplingParams

log = logging.getLogger(__name__)


def freeze_startup_objects() -> int:
    """Once a long-lived process (`llaisys serve`, a Ray replica) has loaded its models: collect,
    then freeze what start-up made (modules, weights' bookkeeping, the KV pools), so that the
    garbage collector's full collections skip it between steps (doc/engine.md, "The pool and the
    garbage collector"). This process's own objects only. Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()

MAX_CONSECUTIVE_FAILURES = 3  # steps that raise in a row before the loop gives up
IDLE_WAIT_S = 0.5  # how long the idle loop sleeps between checks when nothing wakes it


class RequestStream:
    """The outputs of one request, in order; the last has ``finished`` set (a pooling
    request's stream holds one PoolingRequestOutput)."""

    def __init__(self, engine: "AsyncEngine", request_id: str, sink: Optional[tuple] = None):
        self.request_id = request_id
        self.finished = False  # the final output has been taken by the reader
        self._engine = engine
        # sink (queue, index): outputs go to that shared queue as (index, output), so one reader
        # takes several requests' outputs in arrival order with no thread per request; the
        # stream itself is then not readable (get raises)
        self._queue = queue.SimpleQueue() if sink is None else _Tagged(*sink)
        self._waker: Optional[Callable[[], None]] = None

    def set_waker(self, waker: Optional[Callable[[], None]]) -> None:
        """Call `waker()` (from the engine's thread) after each output is queued: lets an event
        loop wait for outputs instead of polling (``loop.call_soon_threadsafe(event.set)``).
        Set it before reading; an exception it raises is logged and ignored."""
        self._waker = waker

    def _put(self, out) -> None:
        self._queue.put(out)
        waker = self._waker
        if waker is not None:
            try:
                waker()
            except Exception:  # the reader's loop closed: it will not read again
                log.debug("waker of request %s failed", self.request_id, exc_info=True)

    def get(self, timeout: Optional[float] = None) -> RequestOutput:
        """The next output; TimeoutError if none comes within `timeout` seconds."""
        if isinstance(self._queue, _Tagged):
            raise RuntimeError(f"request {self.request_id!r} delivers into a shared sink; read that queue")
        if self.finished:
            raise RuntimeError(f"request {self.request_id!r} has already delivered its final output")
        try:
            out = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no output for request {self.request_id!r} within {timeout} s") from None
        self.finished = out.finished
        return out

    def __iter__(self) -> Iterator[RequestOutput]:
        while not self.finished:
            yield self.get()

    def abort(self) -> None:
        """Abort the request; its final output (finish_reason "abort") still arrives."""
        self._engine.abort(self.request_id)


class _Tagged:
    """A stream's side of a shared sink: put(out) queues (index, out)."""

    def __init__(self, sink: queue.SimpleQueue, index: int):
        self.sink, self.index = sink, index

    def put(self, out) -> None:
        self.sink.put((self.index, out))


def _error_output(request_id: str, prompt: Optional[str], prompt_ids: list, n: int, error: str):
    """A final output for a request the engine could not take or finish (n = 0: pooling)."""
    if n == 0:
        now = time.monotonic()
        return PoolingRequestOutput(request_id, prompt, prompt_ids, None, True, "error", Usage(len(prompt_ids), 0, 0),
                                    RequestTimes(now, finished=now), error=error)
    outs = [CompletionOutput(i, "", [], "", [], None, "error") for i in range(n)]
    return RequestOutput(request_id, prompt, prompt_ids, outs, True, Usage(len(prompt_ids), 0, 0),
                         RequestTimes(time.monotonic(), finished=time.monotonic()), error=error)


class AsyncEngine:
    """Runs `engine` on a daemon thread; every public method is thread-safe."""

    def __init__(self, engine: LLMEngine, name: str = "llaisys-engine"):
        self.engine = engine
        self.error: Optional[str] = None  # why the loop died
        # request id -> (RequestStream, prompt, prompt ids, n; 0 for pooling) until its final output
        self._streams: dict = {}
        self._commands: deque = deque()  # ("add", id, ids, sampling, max_tokens, pooling, prompt,
        #                                  embeds), ("abort", id)
        self._lock = threading.Lock()  # guards _streams, _commands, _closing and the metrics copy
        self._wake = threading.Event()
        self._closing = False  # no new requests
        self._stop = False  # the loop exits once every stream has its final output
        self._metrics = engine.metrics.copy(samples=False)
        self._refresh_metrics()  # the gauges (the model's memory too) before the first step
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ---- the caller's side ---------------------------------------------------------------
    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def config(self):
        return self.engine.config

    @property
    def hidden_size(self):
        """The width of a prompt's input embedding rows (None: the runner takes none)."""
        return self.engine.hidden_size

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    @property
    def num_unfinished(self) -> int:
        """Requests added whose final output has not been queued yet."""
        with self._lock:
            return len(self._streams)

    def add_request(self, request_id: str, prompt_token_ids, sampling_params: Optional[SamplingParams] = None,
                    prompt: Optional[str] = None) -> RequestStream:
        """Queue a request and return its stream. ValueError (SamplingParamsError) for a bad
        request, EngineDeadError once shutdown began or the loop died."""
        return self.add_requests([(request_id, prompt_token_ids, sampling_params, prompt)])[0]

    def add_requests(self, entries, sink: Optional[queue.SimpleQueue] = None) -> list:
        """Queue several requests, (request_id, prompt ids or {"prompt_embeds": rows},
        SamplingParams or None, prompt text) each, all or none: every one is checked
        (LLMEngine.check_request or check_embeds_request, the one admission
        pass: the loop adds them without checking again) and its id found free before any is
        queued, so one bad prompt of an HTTP request refuses them all. With `sink`, each
        request's outputs go to it as (its index in entries, output). The streams, in order;
        ValueError / SamplingParamsError, or EngineDeadError once shutdown began or the loop died."""
        checked = []
        for request_id, prompt_ids, sampling_params, prompt in entries:
            if not isinstance(request_id, str) or not request_id:
                raise ValueError(f"request_id must be a non-empty string, got {request_id!r}")
            sp = snapshot_sampling_params(sampling_params)  # later changes by the caller do not reach the loop
            embeds = None
            if isinstance(prompt_ids, dict):  # {"prompt_embeds": rows}: a prompt given as input embeddings
                ids, max_tokens, embeds = self.engine.check_embeds_request(prompt_ids.get("prompt_embeds"), sp)
            else:
                ids, max_tokens = self.engine.check_request(prompt_ids, sp)
            checked.append((request_id, ids, sp, max_tokens, None, prompt, embeds))
        return self._queue_add(checked, sink)

    def encode(self, request_id: str, prompt_token_ids, pooling_params: Optional[PoolingParams] = None,
               prompt: Optional[str] = None) -> RequestStream:
        """Queue a pooling (embedding) request and return its stream, whose one output is a
        PoolingRequestOutput (``outputs.data``: the [hidden] float32 vector). It is scheduled
        with the generation requests (same budget, chunking, blocks, preemption); ``abort``
        and the stream's ``get(timeout)`` work as for generation. ValueError for a bad
        request, EngineDeadError once shutdown began or the loop died."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty string, got {request_id!r}")
        pp = snapshot_pooling_params(pooling_params)
        ids = self.engine.check_pooling_request(prompt_token_ids, pp)
        return self._queue_add([(request_id, ids, None, 0, pp, prompt, None)], None)[0]

    def _queue_add(self, checked: list, sink: Optional[queue.SimpleQueue]) -> list:
        """Register and queue checked requests, (id, ids, sp, max_tokens, pp, prompt, embeds) each: the
        only id -> request map is here (_streams); all or none."""
        streams = [RequestStream(self, c[0], None if sink is None else (sink, i)) for i, c in enumerate(checked)]
        with self._lock:
            self._check_open()
            seen = set()
            for request_id, *_ in checked:
                if request_id in self._streams or request_id in seen:
                    raise ValueError(f"request id {request_id!r} is already in use")
                seen.add(request_id)
            for stream, (request_id, ids, sp, max_tokens, pp, prompt, embeds) in zip(streams, checked):
                shown = ids if embeds is None else []  # an embeddings prompt's ids are unknown
                self._streams[request_id] = (stream, prompt, shown, 0 if sp is None else sp.n)
                self._commands.append(("add", request_id, ids, sp, max_tokens, pp, prompt, embeds))
        self._wake.set()
        return streams

    def abort(self, request_id: str) -> None:
        """Abort a request in any state before the next step; unknown or finished ids are ignored."""
        with self._lock:
            if request_id in self._streams:
                self._commands.append(("abort", request_id))
        self._wake.set()

    def snapshot(self):
        """A copy of the engine's metrics as of the last step: its counters and gauges, without
        the latency samples (``ttft``... are empty; the server keeps its own histograms, and
        ``LLMEngine.metrics`` has them), which the loop would otherwise copy after every step."""
        with self._lock:
            return self._metrics.copy(samples=False)

    def shutdown(self, drain_timeout: float = 0.0) -> None:
        """Stop admitting, give in-flight requests up to `drain_timeout` seconds to finish,
        abort the rest (their final outputs are still delivered) and stop the loop."""
        with self._lock:
            self._closing = True
        deadline = time.monotonic() + max(0.0, drain_timeout)
        while self.num_unfinished and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        with self._lock:
            for rid in self._streams:
                self._commands.append(("abort", rid))
            self._stop = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _check_open(self) -> None:
        if self.error is not None:
            raise EngineDeadError(f"the engine loop has died: {self.error}")
        if self._closing or not self._thread.is_alive():
            raise EngineDeadError("the engine is shutting down")

    # ---- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        try:
            while True:
                self._apply_commands()
                if not self.engine.has_unfinished_requests():
                    with self._lock:
                        if self._stop and not self._streams and not self._commands:
                            return
                    self._wake.wait(IDLE_WAIT_S)
                    self._wake.clear()
                    continue
                try:
                    outputs = self.engine.step()
                    failures = 0
                except Exception as e:  # a bug outside the runner: fail what is in flight, go on
                    if isinstance(e, EngineDeadError) or getattr(e, "fatal", False):
                        raise  # nothing can run again: no retry
                    failures += 1
                    log.exception("engine step raised (%d in a row)", failures)
                    if failures >= MAX_CONSECUTIVE_FAILURES:
                        raise
                    self._fail_in_flight(f"{type(e).__name__}: {e}")
                    continue
                self._deliver(outputs)
                if self.engine.dead is not None:  # a fatal error closed it; its requests ended above
                    raise EngineDeadError(self.engine.dead)
        except BaseException as e:
            self.error = f"{type(e).__name__}: {e}"
            log.exception("engine loop died")
            self._fail_everything(self.error)

    def _apply_commands(self) -> None:
        with self._lock:
            commands, self._commands = list(self._commands), deque()
        for cmd in commands:
            if cmd[0] == "add":
                _, rid, ids, sp, max_tokens, pp, prompt, embeds = cmd
                try:  # checked in the caller's thread (add_requests / encode): nothing is checked twice
                    if pp is not None:
                        self.engine.add_pooling_checked(rid, ids, pp, prompt=prompt)
                    else:
                        self.engine.add_checked(rid, ids, sp, max_tokens, prompt=prompt, prompt_embeds=embeds)
                except Exception as e:  # anything left (an id aliasing "<id>#<i>") fails this request only
                    self._finish_stream(rid, f"{type(e).__name__}: {e}")
            else:  # "abort"
                self.engine.abort_request(cmd[1])
        if commands:
            self._refresh_metrics()

    def _deliver(self, outputs: list) -> None:
        self._refresh_metrics()
        with self._lock:
            for out in outputs:
                entry = self._streams.get(out.request_id)
                if entry is None:
                    continue
                if out.finished:
                    del self._streams[out.request_id]
                entry[0]._put(out)

    def _refresh_metrics(self) -> None:
        m = self.engine.metrics.copy(samples=False)  # after every step: O(1), not the 4 x 10,000 samples
        sched = self.engine.scheduler  # gauges right after commands, not only after steps
        m.num_running, m.num_waiting = len(sched.running), len(sched.waiting)
        m.kv_usage = sched.kv.usage
        try:  # host counters of the core (weights, workspace, kernel scratch): a C call, no device work
            m.memory = self.engine.memory_stats()
        except Exception:  # a gauge must never stop the loop
            log.debug("could not read the model's memory stats", exc_info=True)
        with self._lock:
            self._metrics = m

    def _finish_stream(self, request_id: str, error: str) -> None:
        with self._lock:
            entry = self._streams.pop(request_id, None)
        if entry is not None:
            stream, prompt, ids, n = entry
            stream._put(_error_output(request_id, prompt, ids, n, error))

    def _fail_in_flight(self, error: str) -> None:
        """Finish every unfinished request with `error` and collect their final outputs."""
        with self._lock:
            ids = list(self._streams)
        try:
            self.engine.abort_request(ids, error=error)
            self._deliver(self.engine.step())
        except Exception:  # the engine stays broken: the loop counts the next failure
            log.exception("could not finish the failed requests through the engine")
        for rid in ids:  # whatever the step did not deliver gets a synthetic final output
            self._finish_stream(rid, error)

    def _fail_everything(self, error: str) -> None:
        with self._lock:
            self._closing = True
            ids = list(self._streams)
            self._commands = deque()
        for rid in ids:
            self._finish_stream(rid, error)
