"""DeviceThread: the one thread that makes the core calls of an overlapped engine, in order.

A ThreadPoolExecutor of one thread, but for one thing: a call queued behind another (async
scheduling: ``submit(..., before=f)``) gets its ``ready(outcome)`` run as soon as the call
before it returns, and only then is that call's Future resolved. The engine, which waits on
that Future, therefore wakes when the next call is ready to go: the step thread holds the GIL
for the few microseconds until the next core call releases it, instead of queueing behind the
engine's own Python (its outputs, its next plan) while the device idles.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Callable, Optional


class DeviceThread:
    def __init__(self, name: str = "llaisys-step_0"):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    def submit(self, fn: Callable, *args, after: Optional[Future] = None, ready: Optional[Callable] = None) -> Future:
        """Queue fn(*args); its Future. With ``after`` (a call queued earlier) and ``ready``:
        ready(outcome of that call: its result, or the exception it raised) runs on this thread
        just before fn, and, when that call ran just before, before that call's Future is
        resolved; an exception ready raises is fn's outcome, and fn is not called."""
        if self._closed:
            raise RuntimeError("the step thread is closed")
        f: Future = Future()
        self._queue.put((f, fn, args, after, ready))
        return f

    def close(self) -> None:
        """Run what is queued, then end the thread (waits for it)."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()

    def _loop(self) -> None:
        item = self._queue.get()
        before = None  # (Future, outcome) of the call just made, not yet resolved
        while item is not None:
            f, fn, args, after, ready = item
            try:
                if ready is not None:
                    ready(before[1] if before is not None and before[0] is after else _outcome(after))
                _resolve(before)  # the call before is answered once this one is ready to run
                before = None
                outcome = fn(*args)
            except BaseException as e:  # the caller's Future carries it
                outcome = e
            _resolve(before)
            before = (f, outcome)
            try:
                item = self._queue.get_nowait()  # a call already queued goes next, its ready() first
            except queue.Empty:
                _resolve(before)  # nothing waits behind this one
                before = None
                item = self._queue.get()
        _resolve(before)


def _outcome(f: Future) -> object:
    """A resolved Future's result, or the exception it holds."""
    e = f.exception()
    return e if e is not None else f.result()


def _resolve(done) -> None:
    if done is None:
        return
    f, outcome = done
    if isinstance(outcome, BaseException):
        f.set_exception(outcome)
    else:
        f.set_result(outcome)
