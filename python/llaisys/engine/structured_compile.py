"""One thread with a large native stack for every llguidance call that compiles.

llguidance compiles grammars recursively in native code; a deep enough grammar overflows the
native stack and kills the process (SIGSEGV), not just the request. structured_limits.py
bounds the depth before compiling; this thread gives those bounds their headroom. The calls
that compile (grammar_from_json_schema / lark / regex, gbnf_to_lark, validate_grammar, and the
LLMatcher of a grammar's start state with its first mask) run here, not on a request's
thread (8 MiB stack) or the engine loop's.

Measured (llguidance 1.9.1, x86-64): a $ref chain crashes at ~925 refs on an 8 MiB stack
and ~7,400 on 64 MiB; a Lark rule chain at ~2,660 and > 19,700. STACK_BYTES is 64 MiB of
address space (pages are committed only when touched). One job runs at a time; a caller waits
at most COMPILE_TIMEOUT_S for its result, after which it gets a StructuredOutputError (the job
still finishes in the thread; later jobs queue behind it).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from .structured_spec import StructuredOutputError

STACK_BYTES = 64 << 20  # the compile thread's stack (see the module docstring for the measurements)
COMPILE_TIMEOUT_S = 30.0  # longest a request waits for its grammar to compile (queue included)
MAX_QUEUED = 64  # compile jobs waiting at once; more are refused

_jobs: "queue.Queue" = queue.Queue(MAX_QUEUED)  # (Future, fn, args)
_start_lock = threading.Lock()
_thread = None  # the compile thread, started on first use


def _serve() -> None:
    while True:
        fut, fn, args = _jobs.get()
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # handed to the caller, re-raised there
            fut.set_exception(e)


def _ensure_thread() -> None:
    global _thread
    with _start_lock:
        if _thread is not None and _thread.is_alive():
            return
        old = threading.stack_size()
        threading.stack_size(STACK_BYTES)  # applies to threads started while it is set
        try:
            _thread = threading.Thread(target=_serve, name="llaisys-grammar-compile", daemon=True)
            _thread.start()
        finally:
            threading.stack_size(old)


def in_compile_thread(param: str, fn, *args):
    """fn(*args) run on the compile thread; its result, or the exception it raised.
    StructuredOutputError naming `param` if the queue is full or the result takes longer than
    COMPILE_TIMEOUT_S. Called from the compile thread itself, runs fn directly."""
    if threading.current_thread() is _thread:
        return fn(*args)
    _ensure_thread()
    fut: Future = Future()
    try:
        _jobs.put_nowait((fut, fn, args))
    except queue.Full:
        raise StructuredOutputError(param, f"{param}: too many grammars are being compiled at once "
                                           f"({MAX_QUEUED} queued); try again") from None
    try:
        return fut.result(timeout=COMPILE_TIMEOUT_S)
    except FutureTimeout:
        fut.cancel()
        raise StructuredOutputError(param, f"{param}: compiling the schema or grammar took longer than "
                                           f"{COMPILE_TIMEOUT_S:g} s (COMPILE_TIMEOUT_S)") from None
